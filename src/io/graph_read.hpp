// SPDX-License-Identifier: Apache-2.0
// Private pieces of the graph reader (src/io/graph_io.cpp) shared by its two
// parsers: the keys a graph file may carry, the warnings about the others,
// and the fast simdjson reader (graph_simd.cpp).
//
// There are two parsers on purpose. The fast one (simdjson On-Demand) reads
// well-formed files in their usual layout; the moment it meets anything else
// (malformed JSON, a schema error, a duplicate key, an escaped name, fields
// out of their usual order) it gives up, and the streaming nlohmann reader
// reads the file again from the start. Every error a user sees therefore
// comes from the streaming reader, with its ids, JSON paths and byte offsets,
// and the fast reader only has to agree with it on files that are valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::io::detail {

// The objects of a graph file whose keys are checked.
enum class GraphObject : std::uint8_t { kRoot, kTensor, kOperator };

// Whether `key` means something in `where`.
[[nodiscard]] bool known_graph_key(GraphObject where, std::string_view key) noexcept;

// Unknown keys met while reading: one warning per (object kind, key) with
// the first path and a count, or in strict mode an Error(kSchema) at once.
class UnknownKeys {
 public:
  UnknownKeys(bool strict, std::string source) : strict_(strict), source_(std::move(source)) {}
  [[nodiscard]] bool strict() const noexcept { return strict_; }
  // `path` is the key's JSON path. Throws in strict mode.
  void add(GraphObject where, std::string_view key, const std::string& path);
  void clear() { seen_.clear(); }
  // One line each, ordered by object kind and key.
  [[nodiscard]] std::vector<std::string> warnings() const;

 private:
  struct Seen {
    std::string first_path;
    std::size_t count = 0;
  };
  bool strict_;
  std::string source_;
  std::map<std::pair<GraphObject, std::string>, Seen> seen_;
};

// Reads graph JSON with simdjson into `g` (empty on entry), the top-level
// "cost" object into *cost (when given) and unknown keys into `keys`
// (never strict: an unknown key makes it give up). `text` must be followed
// by at least simdjson's padding of readable bytes (`capacity` counts them).
// Returns false, with `g`, *cost and `keys` in an unspecified state, when
// the streaming reader must read the file instead.
[[nodiscard]] bool read_graph_fast(std::string_view text, std::size_t capacity,
                                   const std::string& source, ir::Graph& g, CostParams* cost,
                                   UnknownKeys& keys);

// The streaming reader (nlohmann SAX): every error of a graph file is its.
// Returns the graph before Graph::finalize().
[[nodiscard]] ir::Graph parse_graph_streaming(std::string_view text, const std::string& source,
                                              CostParams* cost, UnknownKeys& keys);

// Reserves room in `g` for the tensors and operators a graph file of
// `text_bytes` likely holds (an estimate from GPT files; nothing when small).
void reserve_for(ir::Graph& g, std::size_t text_bytes);

}  // namespace recsearch::io::detail
