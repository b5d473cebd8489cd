// SPDX-License-Identifier: Apache-2.0
// Test helpers for the dimension algebra: a terse graph builder and compact
// string renderings of OpSpaces, so that a test states a whole iteration
// space in one readable line ("i/P/32 k/R/784 j/P/512").
#pragma once

#include <doctest/doctest.h>

#include <span>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/graph.hpp"
#include "support/errors.hpp"

namespace algebra_test {

using recsearch::Errc;
using recsearch::Error;
using namespace recsearch;

// Builds one-operator (or few-operator) graphs.
struct G {
  ir::Graph g{"t"};

  ir::TensorId t(const std::string& name, ir::Shape s, ir::DType dt = ir::DType::F32) {
    return g.add_tensor(name, std::move(s), dt, ir::TensorKind::Input);
  }
  ir::OpId op(const std::string& type, std::vector<ir::TensorId> in, std::vector<ir::TensorId> out,
              ir::Attrs attrs = {}) {
    ir::Operator o;
    o.name = "op" + std::to_string(g.num_operators());
    o.type = type;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.attrs = std::move(attrs);
    return g.add_operator(std::move(o));
  }
  algebra::OpSpace space(ir::OpId id) const { return algebra::build_op_space(g, id); }
};

// "i/P/32 k/R/784 j/P/512"; window loops add their halo: "h/W/32+2".
inline std::string loops(const algebra::OpSpace& s) {
  std::string r;
  for (const auto& l : s.loops) {
    if (!r.empty()) r += ' ';
    const char role = l.role == algebra::DimRole::Parallel    ? 'P'
                      : l.role == algebra::DimRole::Reduction ? 'R'
                      : l.role == algebra::DimRole::Window    ? 'W'
                                                              : 'X';
    r += l.name + "/" + role + "/" + std::to_string(l.size);
    if (l.halo != 0) r += "+" + std::to_string(l.halo);
  }
  return r;
}

// Loop names of one operand's dims, "-" for unmapped: "i,k" or "-,j".
inline std::string dims(const algebra::OpSpace& s, std::span<const int> m) {
  std::string r;
  for (std::size_t d = 0; d < m.size(); ++d) {
    if (d > 0) r += ',';
    if (m[d] == algebra::kUnmapped) {
      r += '-';
    } else if (m[d] >= 0 && static_cast<std::size_t>(m[d]) < s.loops.size()) {
      r += s.loops[static_cast<std::size_t>(m[d])].name;
    } else {
      r += "?";
    }
  }
  return r;
}
inline std::string in(const algebra::OpSpace& s, std::size_t j) { return dims(s, s.inputs.at(j)); }
inline std::string out(const algebra::OpSpace& s, std::size_t j) {
  return dims(s, s.outputs.at(j));
}

// error_of: tests/support/errors.hpp.
using recsearch::testing::error_of;

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

}  // namespace algebra_test
