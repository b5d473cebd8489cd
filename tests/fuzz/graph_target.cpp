// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the graph reader, the dimension algebra and the search.
// Any bytes read as a graph file either give a graph that round-trips
// through graph_to_json, whose operator spaces build and which the rec
// search plans on 6 devices (a plan that passes check_plan), or a
// well-formed recsearch::Error (fuzz_common.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "recsearch/recsearch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace recsearch;
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
