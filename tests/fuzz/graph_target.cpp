// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the graph reader, the dimension algebra and the search.
// Any bytes read as a graph file either give a graph that round-trips
// through graph_to_json, whose operator spaces build and which the rec
// search plans on 6 devices (a plan that passes check_plan), or a
// well-formed recsearch::Error (fuzz_common.hpp). And the fast simdjson
// reader either gives up or builds what the streaming reader builds,
// never accepting what that one rejects.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "io/graph_read.hpp"
#include "io/json_util.hpp"
#include "recsearch/recsearch.hpp"

namespace {

using namespace recsearch;

void check_fast_reader(std::string_view text) {
  std::string padded;
  padded.reserve(text.size() + io::detail::simd_padding());
  padded.assign(text);
  ir::Graph fast;
  io::detail::UnknownKeys fast_keys(false, fuzz::kSource);
  CostParams fast_cost;
  if (!io::detail::read_graph_fast(padded, padded.capacity(), fuzz::kSource, fast, &fast_cost,
                                   fast_keys))
    return;
  io::detail::UnknownKeys keys(false, fuzz::kSource);
  CostParams cost;
  ir::Graph slow;
  try {
    slow = io::detail::parse_graph_streaming(text, fuzz::kSource, &cost, keys);
  } catch (const Error& e) {
    fuzz::die(std::string("the fast reader accepts what the streaming reader refuses: ") +
              e.what());
  }
  if (io::graph_to_json(fast) != io::graph_to_json(slow) || fast_keys.warnings() != keys.warnings())
    fuzz::die("the fast and the streaming reader build different graphs");
  if (fast_cost.compute_efficiency != cost.compute_efficiency ||
      fast_cost.memory_budget_bytes != cost.memory_budget_bytes)
    fuzz::die("the fast and the streaming reader read different cost settings");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_fast_reader(fuzz::as_text(data, size));
  fuzz::guard(fuzz::kSource, true, [&] {
    CostParams cost;
    const ir::Graph g = io::parse_graph(fuzz::as_text(data, size), fuzz::kSource, &cost);

    // What the writer writes, the reader reads back to the same text.
    const std::string text = io::graph_to_json(g);
    try {
      const ir::Graph again = io::parse_graph(text, "roundtrip.json");
      if (io::graph_to_json(again) != text) fuzz::die("graph_to_json does not round-trip");
    } catch (const Error& e) {
      fuzz::die(std::string("the reader rejects what the writer wrote: ") + e.what());
    }

    const auto spaces =
        fuzz::attributed(fuzz::kSource, [&] { return algebra::build_op_spaces(g); });
    if (spaces.size() != g.num_operators()) fuzz::die("one operator space per operator");

    // Small inputs only: the search is near-linear, but the fuzzer should
    // spend its time on many inputs, not on one big graph.
    if (g.num_operators() > 64) return;
    search::SearchOptions opts;
    opts.cost = cost;
    opts.threads = 1;
    const Cluster cluster = Cluster::flat(6);
    const search::SearchResult r =
        fuzz::attributed(fuzz::kSource, [&] { return search::run(g, spaces, cluster, opts); });
    try {
      plan::check_plan(g, spaces, r.plan);
    } catch (const Error& e) {
      fuzz::die(std::string("the search returned a plan check_plan rejects: ") + e.what());
    }
  });
  return 0;
}
