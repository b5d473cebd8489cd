// SPDX-License-Identifier: Apache-2.0
// The operand-layout rule has two definitions on purpose: plan::wanted_layout
// (shared by the evaluator and the execution layer) and the search's own
// search::detail::operand_layout, kept apart so that the evaluator stays an
// independent reference. This test holds the two to the same answers on
// every operator of bundled and generated graphs, for every choice
// (replicated and each loop) and every operand.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "search/common.hpp"

using namespace recsearch;

namespace {

std::string data_path(const std::string& rel) {
  const char* dir = std::getenv("RECSEARCH_DATA");
  return std::string(dir != nullptr ? dir : "data") + "/" + rel;
}

// Compares the two rules on every operator, choice and operand of g;
// returns how many (operator, choice, operand) triples were compared.
std::size_t compare_rules(const ir::Graph& g) {
  const std::vector<algebra::OpSpace> spaces = algebra::build_op_spaces(g);
  std::size_t compared = 0;
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const algebra::OpSpace& s = spaces[o];
    for (int c = plan::kReplicated; c < static_cast<int>(s.loops.size()); ++c) {
      for (const bool out : {false, true}) {
        const auto& operands = out ? s.outputs : s.inputs;
        for (const std::span<const int> dims : operands) {
          INFO("operator " << g.op(o).name << ", choice " << c << (out ? ", output" : ", input"));
          CHECK(plan::wanted_layout(s, c, dims, out) ==
                search::detail::operand_layout(s, dims, out, c));
          ++compared;
        }
        // An operand the space does not list has no dims: the same as an
        // empty mapping for the search's rule.
        CHECK(plan::wanted_layout(s, c, {}, out) == search::detail::operand_layout(s, {}, out, c));
      }
    }
  }
  return compared;
}

}  // namespace

TEST_CASE("layout rule: the evaluator's and the search's agree on the bundled graphs") {
  for (const char* name : {"graphs/bert_large.json", "graphs/ffn.json", "graphs/gpt2_block.json",
                           "graphs/resnet50.json", "graphs/tiny/convnet.json",
                           "graphs/tiny/embedding.json", "graphs/tiny/wide_matmul.json"}) {
    INFO(name);
    const ir::Graph g = io::read_graph_file(data_path(name));
    CHECK(compare_rules(g) > 0);
  }
}

TEST_CASE("layout rule: the evaluator's and the search's agree on generated graphs") {
  for (const char* name : {"gpt-350m", "moe-380m", "resnet18"}) {
    INFO(name);
    gen::ModelSpec spec = gen::preset(name);
    // Two layers hold every kind of layer (MoE alternates dense and expert).
    if (spec.family != gen::Family::ResNet) spec.layers = 2;
    const ir::Graph g = gen::build_graph(spec);
    CHECK(compare_rules(g) > 0);
  }
}
