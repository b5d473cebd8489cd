// SPDX-License-Identifier: Apache-2.0
// ONNX import: an ONNX model file becomes a recsearch graph.
//
// Shapes come from the model's value_info, completed by ONNX's own shape
// inference (with data propagation, so that Reshape targets computed by
// Shape/Gather/Concat chains resolve). Weights are never read beyond their
// shapes: large initializer payloads are skipped while the file is parsed,
// so external-data files are not needed and a multi-gigabyte model costs
// only the memory of its structure. Initializers become parameters (or
// constants for integer tensors and batch-norm running statistics); an
// Identity copy of a weight (torch.onnx.export's deduplication) is a
// parameter of its own and a Cast/Reshape view of one is that weight, with
// no operator; nodes that only compute shapes are folded away in one pass. Operators recsearch has
// no kind for are kept under their ONNX type, replicated, and reported in `warnings`, each naming
// the node.
//
// Built only with the `onnx` feature (Debian's libonnx-dev); without it
// onnx_import_available() is false and the readers throw Error(kUsage).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/ir/graph.hpp"

namespace recsearch::io {

struct OnnxImportOptions {
  // Values for symbolic dimensions (dim_param), e.g. {"batch", 32}. A graph
  // input with a symbolic or unknown dimension that is not bound here is an
  // error naming the input and the dimension.
  std::map<std::string, std::int64_t, std::less<>> dims;
  // Graph name; the model file's graph name when empty.
  std::string name;
};

struct OnnxImport {
  ir::Graph graph;                       // finalized; operator spaces build without error
  std::vector<std::string> warnings;     // one line per node imported as replicated
  std::int64_t opset = 0;                // of the default ("ai.onnx") domain
  std::size_t folded_nodes = 0;          // shape computations folded into constants
  std::size_t weight_view_nodes = 0;     // Identity copies and Cast/Reshape views of weights
  std::size_t skipped_weight_bytes = 0;  // initializer payload bytes never loaded
};

// Whether this build can import ONNX models.
[[nodiscard]] bool onnx_import_available() noexcept;

// Parses a serialized ModelProto. `source` names it in errors. Throws
// recsearch::Error: kParse for bytes that are not an ONNX model, kShape or
// kSchema naming the node (path "/graph/node/<index>") for a model whose
// shapes cannot be resolved or contradict the operator, kUnknownName for a
// dangling tensor reference, kUsage when built without ONNX support.
[[nodiscard]] OnnxImport parse_onnx(std::string_view bytes, const std::string& source,
                                    const OnnxImportOptions& options = {});
// Reads and parses an ONNX file, streaming it (weights are skipped, not
// loaded). Error(kIo) naming the file when it cannot be read.
[[nodiscard]] OnnxImport read_onnx_file(const std::string& path,
                                        const OnnxImportOptions& options = {});

// Whether a path names an ONNX model by its extension (".onnx", any case).
[[nodiscard]] bool is_onnx_path(std::string_view path) noexcept;

}  // namespace recsearch::io
