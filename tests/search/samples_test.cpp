// SPDX-License-Identifier: Apache-2.0
// The bundled graphs on the bundled and shorthand clusters: rec is never
// worse than data parallelism, and its bookkeeping equals the evaluator.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "recsearch/io/json_io.hpp"
#include "recsearch/search/search.hpp"
#include "support/reduced.hpp"
#include "support/search_options.hpp"

using namespace recsearch;

namespace {

std::string data_dir() {
  const char* d = std::getenv("RECSEARCH_DATA");
  return d ? d : "data";
}

}  // namespace

TEST_CASE("bundled graphs: rec <= data-parallel, bookkeeping == evaluator") {
  const std::string dir = data_dir();
  std::vector<Cluster> clusters = {Cluster::flat(8),
                                   Cluster::mesh({2, 4}),
                                   Cluster::flat(6),
                                   Cluster::flat(12),
                                   io::read_cluster_file(dir + "/clusters/dgx_h100_8.json"),
                                   io::read_cluster_file(dir + "/clusters/dgx_h100_64x8.json")};
  const std::vector<const char*> names = {"ffn", "gpt2_block", "bert_large", "resnet50"};
  for (std::size_t gi = 0; gi < names.size(); ++gi) {
    const char* name = names[gi];
    const ir::Graph g = io::read_graph_file(dir + "/graphs/" + name + ".json");
    const auto spaces = algebra::build_op_spaces(g);
    for (std::size_t ci = 0; ci < clusters.size(); ++ci)
      for (Mode mode : {Mode::Train, Mode::Infer}) {
        if (!testing::keep_pair(gi, ci)) continue;
        const Cluster& c = clusters[ci];
        CAPTURE(name);
        CAPTURE(c.name());
        CAPTURE(static_cast<int>(mode));
        search::SearchOptions o = testing::operator_level_options();
        o.mode = mode;
        const auto rec = search::run(g, spaces, c, o);
        o.algorithm = search::Algorithm::DataParallel;
        const auto dp = search::run(g, spaces, c, o);
        const double r = rec.eval.summary.step_time_s, d = dp.eval.summary.step_time_s;
        CHECK(r <= d * (1 + 1e-9));
        CHECK(rec.bookkept_step_time_s == doctest::Approx(r).epsilon(1e-9));
        if (mode == Mode::Train)
          MESSAGE(std::string(name)
                  << " on " << c.name() << ": rec " << r * 1e3 << " ms, data-parallel " << d * 1e3
                  << " ms (" << d / r << "x)");
      }
  }
}
