// SPDX-License-Identifier: Apache-2.0
// Tests of ir::BoxedOptional (include/recsearch/ir/boxed_optional.hpp):
// it reads, copies and compares like std::optional, and an operator with
// its pins absent is the smaller for it.
#include "recsearch/ir/boxed_optional.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "recsearch/ir/graph.hpp"

using recsearch::ir::BoxedOptional;
using Names = std::vector<std::string>;

TEST_CASE("boxed optional: empty, set, reset, as std::optional") {
  BoxedOptional<Names> a;
  CHECK_FALSE(a.has_value());
  CHECK_FALSE(a);
  CHECK(a == std::nullopt);
  CHECK_THROWS_AS((void)a.value(), std::bad_optional_access);
  a = Names{"i", "j"};
  REQUIRE(a);
  CHECK(a->size() == 2);
  CHECK((*a)[1] == "j");
  CHECK(a == Names{"i", "j"});
  CHECK_FALSE(a == Names{"i"});
  a.reset();
  CHECK(a == std::nullopt);
  CHECK(a.emplace(3, "k").size() == 3);
  a = std::nullopt;
  CHECK_FALSE(a.has_value());
}

TEST_CASE("boxed optional: copies own their value; moves take it") {
  BoxedOptional<Names> a = Names{"i"};
  BoxedOptional<Names> b = a;
  b->push_back("j");
  CHECK(a == Names{"i"});
  CHECK(b == Names{"i", "j"});
  CHECK_FALSE(a == b);
  a = b;
  CHECK(a == b);
  a->clear();
  CHECK(b->size() == 2);
  const BoxedOptional<Names> c = std::move(b);
  CHECK(c == Names{"i", "j"});
  BoxedOptional<Names> empty;
  a = empty;
  CHECK(a == empty);
  CHECK(BoxedOptional<Names>() == BoxedOptional<Names>());
}

TEST_CASE("boxed optional: an operator's absent pins cost a pointer each") {
  CHECK(sizeof(BoxedOptional<recsearch::ir::Strategy>) == sizeof(void*));
  recsearch::ir::Operator op;
  op.strategy = recsearch::ir::Strategy{{2, 1}, {1, 4}};
  const recsearch::ir::Operator copy = op;
  op.strategy->at(0).at(0) = 8;
  CHECK(copy.strategy == recsearch::ir::Strategy{{2, 1}, {1, 4}});
  CHECK_FALSE(copy.allowed);
}
