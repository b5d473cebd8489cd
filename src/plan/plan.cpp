// Plans as choices of loop cuts: deriving MindSpore-style strategies from
// them, laying a pinned strategy out on a mesh, and checking a plan against
// its graph.
//
// A plan only says, per operator and mesh axis, which loop the axis splits.
// These functions translate between that and the per-input split counts a
// user writes (`strategy`), and reject plans whose choices the dimension
// algebra forbids, so that the evaluator and the execution layer can trust
// every cut they see.
#include "recsearch/plan/plan.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "recsearch/error.hpp"

namespace recsearch::plan {
namespace {

std::string op_path(ir::OpId op) { return "/operators/" + std::to_string(op); }

std::string strategy_path(ir::OpId op) { return op_path(op) + "/strategy"; }

std::string strategy_path(ir::OpId op, std::size_t input) {
  return strategy_path(op) + "/" + std::to_string(input);
}

std::string strategy_path(ir::OpId op, std::size_t input, std::size_t dim) {
  return strategy_path(op, input) + "/" + std::to_string(dim);
}

std::string cut_path(ir::OpId op, std::size_t axis) {
  return op_path(op) + "/cuts/" + std::to_string(axis);
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// "2x2x2" (or "1" for an empty mesh), for messages.
std::string mesh_to_string(const std::vector<Cut>& mesh) {
  if (mesh.empty()) return "1";
  std::string s;
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    if (a > 0) s += "x";
    s += std::to_string(mesh[a].size);
  }
  return s;
}

std::int64_t mesh_devices(const std::vector<Cut>& mesh) {
  std::int64_t n = 1;
  for (const auto& c : mesh) n *= c.size;
  return n;
}

// Shape of an operand as the graph declares it; empty when the operator
// lists fewer operands than its space (a malformed space: divisibility is
// then checked against the loop only).
const ir::Shape* operand_shape(const ir::Graph& g, const std::vector<ir::TensorId>& ids,
                               std::size_t j) {
  if (j >= ids.size() || ids[j] >= g.num_tensors()) return nullptr;
  return &g.tensor(ids[j]).shape;
}

// Finds the first operand dim of `maps` mapped to `loop` whose extent `split`
// does not divide; returns {operand, dim} or {-1, -1}.
std::pair<int, int> first_undivided(const ir::Graph& g, const std::vector<ir::TensorId>& ids,
                                    const std::vector<std::vector<int>>& maps, int loop,
                                    std::int64_t split) {
  for (std::size_t j = 0; j < maps.size(); ++j) {
    const ir::Shape* shape = operand_shape(g, ids, j);
    if (shape == nullptr) continue;
    for (std::size_t d = 0; d < maps[j].size() && d < shape->size(); ++d) {
      if (maps[j][d] == loop && ((*shape)[d] % split != 0 || (*shape)[d] < split)) {
        return {static_cast<int>(j), static_cast<int>(d)};
      }
    }
  }
  return {-1, -1};
}

}  // namespace

std::vector<std::int64_t> loop_splits(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                                      const std::vector<std::int16_t>& cuts) {
  std::vector<std::int64_t> splits(s.loops.size(), 1);
  for (std::size_t a = 0; a < mesh.size() && a < cuts.size(); ++a) {
    const int c = cuts[a];
    if (c >= 0 && static_cast<std::size_t>(c) < splits.size()) splits[c] *= mesh[a].size;
  }
  return splits;
}

ir::Strategy strategy_of(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                         const std::vector<std::int16_t>& cuts) {
  const auto splits = loop_splits(s, mesh, cuts);
  ir::Strategy strategy;
  strategy.reserve(s.inputs.size());
  for (const auto& dims : s.inputs) {
    std::vector<std::int64_t> row;
    row.reserve(dims.size());
    for (const int loop : dims) {
      row.push_back(loop == algebra::kUnmapped ? 1 : splits[static_cast<std::size_t>(loop)]);
    }
    strategy.push_back(std::move(row));
  }
  return strategy;
}

std::vector<std::int16_t> assign_cuts(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                                      const ir::Strategy& strategy, const std::vector<Cut>& mesh) {
  const ir::Operator& node = g.op(op);
  if (strategy.size() != s.inputs.size()) {
    throw Error(Errc::kStrategy,
                "strategy lists " + std::to_string(strategy.size()) + " inputs but operator " +
                    quoted(node.name) + " has " + std::to_string(s.inputs.size()),
                strategy_path(op));
  }

  // Per loop: the split count and the input dim that first set it (for
  // messages about disagreement).
  std::vector<std::int64_t> split(s.loops.size(), 1);
  std::vector<std::pair<int, int>> set_by(s.loops.size(), {-1, -1});
  for (std::size_t j = 0; j < strategy.size(); ++j) {
    if (strategy[j].size() != s.inputs[j].size()) {
      throw Error(Errc::kStrategy,
                  "strategy of input " + std::to_string(j) + " has " +
                      std::to_string(strategy[j].size()) + " dims but the input has rank " +
                      std::to_string(s.inputs[j].size()),
                  strategy_path(op, j));
    }
    const ir::Shape* shape = operand_shape(g, node.inputs, j);
    for (std::size_t d = 0; d < strategy[j].size(); ++d) {
      const std::int64_t k = strategy[j][d];
      const std::string path = strategy_path(op, j, d);
      if (k < 1) {
        throw Error(Errc::kStrategy, "split count " + std::to_string(k) + " must be at least 1",
                    path);
      }
      const int loop = s.inputs[j][d];
      if (loop == algebra::kUnmapped) {
        if (k > 1) {
          throw Error(Errc::kStrategy,
                      "dim " + std::to_string(d) + " of input " + std::to_string(j) + " of " +
                          quoted(node.name) + " cannot be split (split " + std::to_string(k) + ")",
                      path);
        }
        continue;
      }
      const algebra::LoopDim& ld = s.loops[static_cast<std::size_t>(loop)];
      if (k > 1 && ld.role == algebra::DimRole::Whole) {
        throw Error(Errc::kStrategy,
                    "dim " + std::to_string(d) + " of input " + std::to_string(j) +
                        " maps to loop " + quoted(ld.name) + " of " + quoted(node.name) +
                        ", which must not be split (split " + std::to_string(k) + ")",
                    path);
      }
      if (shape != nullptr && d < shape->size() && ((*shape)[d] % k != 0 || (*shape)[d] < k)) {
        throw Error(Errc::kStrategy,
                    "split " + std::to_string(k) + " does not divide dim " + std::to_string(d) +
                        " of input " + std::to_string(j) + " (size " + std::to_string((*shape)[d]) +
                        ")",
                    path);
      }
      auto& first = set_by[static_cast<std::size_t>(loop)];
      if (first.first < 0) {
        first = {static_cast<int>(j), static_cast<int>(d)};
        split[static_cast<std::size_t>(loop)] = k;
      } else if (split[static_cast<std::size_t>(loop)] != k) {
        throw Error(Errc::kStrategy,
                    "split " + std::to_string(k) + " of loop " + quoted(ld.name) +
                        " disagrees with split " +
                        std::to_string(split[static_cast<std::size_t>(loop)]) + " of input " +
                        std::to_string(first.first) + " dim " + std::to_string(first.second),
                    path);
      }
    }
  }

  // The loop extent and outputs must also divide; report against the input
  // dim that asked for the split.
  for (std::size_t l = 0; l < split.size(); ++l) {
    if (split[l] == 1) continue;
    const auto [j, d] = set_by[l];
    const std::string path =
        strategy_path(op, static_cast<std::size_t>(j), static_cast<std::size_t>(d));
    if (s.loops[l].size % split[l] != 0 || s.loops[l].size < split[l]) {
      throw Error(Errc::kStrategy,
                  "split " + std::to_string(split[l]) + " does not divide loop " +
                      quoted(s.loops[l].name) + " (size " + std::to_string(s.loops[l].size) + ")",
                  path);
    }
    const auto [oj, od] =
        first_undivided(g, node.outputs, s.outputs, static_cast<int>(l), split[l]);
    if (oj >= 0) {
      throw Error(Errc::kStrategy,
                  "split " + std::to_string(split[l]) + " of loop " + quoted(s.loops[l].name) +
                      " does not divide dim " + std::to_string(od) + " of output " +
                      std::to_string(oj),
                  path);
    }
  }

  // Outermost axes first, so that the largest splits go to the slowest links
  // only when the strategy asks for it (MindSpore lays strategies out the same way).
  std::vector<std::int64_t> remaining = split;
  std::vector<std::int16_t> cuts(mesh.size(), kReplicated);
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    const std::int64_t k = mesh[a].size;
    if (k <= 1) continue;
    for (std::size_t l = 0; l < remaining.size(); ++l) {
      if (remaining[l] > 1 && remaining[l] % k == 0) {
        cuts[a] = static_cast<std::int16_t>(l);
        remaining[l] /= k;
        break;
      }
    }
  }
  for (std::size_t l = 0; l < remaining.size(); ++l) {
    if (remaining[l] == 1) continue;
    std::int64_t needed = 1;
    for (const std::int64_t k : split) needed *= k;
    const auto [j, d] = set_by[l];
    throw Error(Errc::kStrategy,
                "strategy needs " + std::to_string(needed) + " devices but the mesh (" +
                    mesh_to_string(mesh) + ", " + std::to_string(mesh_devices(mesh)) +
                    " devices) cannot lay out split " + std::to_string(split[l]) + " of loop " +
                    quoted(s.loops[l].name) + " (" + std::to_string(remaining[l]) + " left over)",
                strategy_path(op, static_cast<std::size_t>(j), static_cast<std::size_t>(d)));
  }
  return cuts;
}

void check_plan(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p) {
  const std::size_t n_ops = g.num_operators();
  if (p.cuts.size() != n_ops) {
    throw Error(Errc::kPlan,
                "plan has " + std::to_string(p.cuts.size()) + " operators but graph " +
                    quoted(g.name()) + " has " + std::to_string(n_ops),
                "/operators");
  }
  if (spaces.size() != n_ops) {
    throw Error(Errc::kInternal, "got " + std::to_string(spaces.size()) + " operator spaces for " +
                                     std::to_string(n_ops) + " operators");
  }
  for (std::size_t a = 0; a < p.mesh.size(); ++a) {
    if (p.mesh[a].size < 1) {
      throw Error(
          Errc::kPlan,
          "mesh axis " + quoted(p.mesh[a].axis) + " has size " + std::to_string(p.mesh[a].size),
          "/mesh/axes/" + std::to_string(a) + "/size");
    }
  }

  for (ir::OpId o = 0; o < n_ops; ++o) {
    const ir::Operator& node = g.op(o);
    const algebra::OpSpace& s = spaces[o];
    const auto& row = p.cuts[o];
    if (row.size() != p.mesh.size()) {
      throw Error(Errc::kPlan,
                  "operator " + quoted(node.name) + " has " + std::to_string(row.size()) +
                      " cuts but the mesh has " + std::to_string(p.mesh.size()) + " axes",
                  op_path(o) + "/cuts");
    }
    std::vector<std::int64_t> splits(s.loops.size(), 1);
    for (std::size_t a = 0; a < row.size(); ++a) {
      const int c = row[a];
      if (c == kReplicated) continue;
      const std::string path = cut_path(o, a);
      const std::string axis = quoted(p.mesh[a].axis);
      if (s.opaque) {
        throw Error(Errc::kPlan,
                    "operator " + quoted(node.name) + " of unknown type " + quoted(node.type) +
                        " cannot be cut (axis " + axis + ")",
                    path);
      }
      if (c < 0 || static_cast<std::size_t>(c) >= s.loops.size()) {
        throw Error(Errc::kPlan,
                    "loop index " + std::to_string(c) + " on axis " + axis + " is out of range: " +
                        quoted(node.name) + " has " + std::to_string(s.loops.size()) + " loops",
                    path);
      }
      const algebra::LoopDim& ld = s.loops[static_cast<std::size_t>(c)];
      if (ld.role == algebra::DimRole::Whole) {
        throw Error(Errc::kPlan,
                    "loop " + quoted(ld.name) + " of " + quoted(node.name) +
                        " must not be cut (axis " + axis + ")",
                    path);
      }
      if (node.allowed) {
        bool ok = false;
        for (const auto& name : *node.allowed) ok = ok || name == ld.name;
        if (!ok) {
          throw Error(Errc::kPlan,
                      "loop " + quoted(ld.name) + " of " + quoted(node.name) +
                          " is not among its allowed dims (axis " + axis + ")",
                      path);
        }
      }
      const std::int64_t k = p.mesh[a].size;
      if (!algebra::can_cut(g, node, s, splits, c, k)) {
        throw Error(Errc::kPlan,
                    "cannot cut loop " + quoted(ld.name) + " of " + quoted(node.name) + " by " +
                        std::to_string(k) + " on axis " + axis + " after splits of " +
                        std::to_string(splits[static_cast<std::size_t>(c)]) +
                        ": the loop or an operand dim does not divide",
                    path);
      }
      splits[static_cast<std::size_t>(c)] *= k;
    }

    if (node.strategy) {
      // A strategy that cannot be laid out on this mesh is the strategy's
      // fault, not the plan's: assign_cuts throws kStrategy for it.
      const auto want = assign_cuts(g, o, s, *node.strategy, p.mesh);
      for (std::size_t a = 0; a < row.size(); ++a) {
        if (row[a] == want[a]) continue;
        const auto name = [&](int c) {
          return c == kReplicated ? std::string("none")
                                  : quoted(s.loops[static_cast<std::size_t>(c)].name);
        };
        throw Error(Errc::kPlan,
                    "operator " + quoted(node.name) + " has a pinned strategy that cuts " +
                        name(want[a]) + " on axis " + quoted(p.mesh[a].axis) + ", the plan cuts " +
                        name(row[a]),
                    cut_path(o, a));
      }
    }
  }
}

}  // namespace recsearch::plan
