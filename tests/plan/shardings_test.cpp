// SPDX-License-Identifier: Apache-2.0
// Tests of plan::TensorShardings (src/plan/shardings.cpp): the coded form
// (a byte per tensor and axis) and the lists kept where a rank exceeds what
// a byte codes read back alike, and an evaluation of a graph with such a
// tensor records it as one of low rank is recorded.
#include <doctest/doctest.h>

#include <stdexcept>

#include "fixtures.hpp"
#include "recsearch/plan/evaluator.hpp"

using namespace plan_test;
using plan::TensorSharding;
using plan::TensorShardings;

namespace {

using Dims = std::vector<std::vector<std::uint32_t>>;
using Axes = std::vector<std::uint32_t>;

// The same splits and partial axes, set in a scrambled axis order.
void fill(TensorShardings& s) {
  s.set_split(0, 3, 1);
  s.set_partial(0, 2);
  s.set_split(0, 0, 1);
  s.set_split(0, 1, 0);
  s.set_split(1, 2, 0);
}

}  // namespace

TEST_CASE("shardings: the coded form and the lists read back alike") {
  TensorShardings coded({2, 1, 3}, 4);
  TensorShardings lists({2, 1, TensorShardings::kMaxCodedRank + 1}, 4);
  fill(coded);
  fill(lists);
  for (const TensorShardings* s : {&coded, &lists}) {
    REQUIRE(s->size() == 3);
    CHECK(s->axes() == 4);
    const TensorSharding t0 = (*s)[0];
    CHECK(t0.dims == Dims{{1}, {0, 3}});
    CHECK(t0.partial == Axes{2});
    const TensorSharding t1 = s->at(1);
    CHECK(t1.dims == Dims{{2}});
    CHECK(t1.partial.empty());
    CHECK(s->at(2).dims.size() == (s == &coded ? 3 : TensorShardings::kMaxCodedRank + 1));
    CHECK_THROWS_AS((void)s->at(3), std::out_of_range);
  }
}

TEST_CASE("shardings: read() replaces what the sharding held") {
  TensorShardings s({2, 1}, 2);
  s.set_split(0, 1, 1);
  TensorSharding out{{{7, 8}, {9}, {10}}, {11}};
  s.read(0, out);
  CHECK(out.dims == Dims{{}, {1}});
  CHECK(out.partial.empty());
  s.read(1, out);
  CHECK(out.dims == Dims{{}});
  CHECK(TensorShardings().empty());
}

TEST_CASE("shardings: a tensor of rank over a byte's codes is evaluated like any other") {
  // relu over x[4, 1, ..., 1, 6] of the given rank, split on its first dim
  // by axis 0 and its last by axis 1.
  const auto shardings_of = [](std::size_t rank) {
    ir::Graph g{"high_rank"};
    ir::Shape shape(rank, 1);
    shape.front() = 4;
    shape.back() = 6;
    const auto x = tensor(g, "x", shape, ir::TensorKind::Input);
    const auto y = tensor(g, "y", shape);
    op(g, "relu", "ReLU", {x}, {y});
    const auto spaces = algebra::build_op_spaces(g);
    const auto p = make_plan({axis("a", 2), axis("b", 2)},
                             {{0, static_cast<std::int16_t>(rank - 1)}}, Mode::Infer);
    plan::check_plan(g, spaces, p);
    return plan::evaluate(g, spaces, test_cluster(), p, {}, plan::EvalDetail::Shardings).tensors;
  };
  for (const std::size_t rank : {std::size_t{3}, TensorShardings::kMaxCodedRank + 2}) {
    CAPTURE(rank);
    const TensorShardings s = shardings_of(rank);
    REQUIRE(s.size() == 2);
    for (std::size_t t = 0; t < 2; ++t) {
      const TensorSharding ts = s[t];
      REQUIRE(ts.dims.size() == rank);
      CHECK(ts.dims.front() == Axes{0});
      CHECK(ts.dims.back() == Axes{1});
      for (std::size_t d = 1; d + 1 < rank; ++d) CHECK(ts.dims[d].empty());
      CHECK(ts.partial.empty());
    }
  }
}
