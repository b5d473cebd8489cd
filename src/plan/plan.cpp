// SPDX-License-Identifier: Apache-2.0
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

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

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
                                    const algebra::OperandLoops& maps, int loop,
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

void loop_splits(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                 const std::vector<std::int16_t>& cuts, std::vector<std::int64_t>& splits) {
  splits.assign(s.loops.size(), 1);
  for (std::size_t a = 0; a < mesh.size() && a < cuts.size(); ++a) {
    const int c = cuts[a];
    if (c >= 0 && static_cast<std::size_t>(c) < splits.size()) splits[c] *= mesh[a].size;
  }
}

std::vector<std::int64_t> loop_splits(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                                      const std::vector<std::int16_t>& cuts) {
  std::vector<std::int64_t> splits;
  loop_splits(s, mesh, cuts, splits);
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

namespace {

// Per loop of an operator: the split count a strategy asks for, and the
// input dim that first set it (for messages about disagreement).
struct StrategySplits {
  std::vector<std::int64_t> split;
  std::vector<std::pair<int, int>> set_by;
};

// Checks split count k of dim d of input j (mapped to `loop`) on its own:
// at least 1, a dim that may be split, dividing the input's extent.
void check_strategy_dim(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s, std::size_t j,
                        std::size_t d, std::int64_t k) {
  const ir::Operator& node = g.op(op);
  const std::string path = strategy_path(op, j, d);
  if (k < 1) {
    throw Error(Errc::kStrategy, "split count " + std::to_string(k) + " must be at least 1", path);
  }
  const int loop = s.inputs[j][d];
  if (loop == algebra::kUnmapped) {
    if (k > 1) {
      throw Error(Errc::kStrategy,
                  "dim " + std::to_string(d) + " of input " + std::to_string(j) + " of " +
                      quoted(node.name) + " cannot be split (split " + std::to_string(k) + ")",
                  path);
    }
    return;
  }
  const algebra::LoopDim& ld = s.loops[static_cast<std::size_t>(loop)];
  if (k > 1 && ld.role == algebra::DimRole::Whole) {
    throw Error(Errc::kStrategy,
                "dim " + std::to_string(d) + " of input " + std::to_string(j) + " maps to loop " +
                    quoted(ld.name) + " of " + quoted(node.name) +
                    ", which must not be split (split " + std::to_string(k) + ")",
                path);
  }
  const ir::Shape* shape = operand_shape(g, node.inputs, j);
  if (shape != nullptr && d < shape->size() && ((*shape)[d] % k != 0 || (*shape)[d] < k)) {
    throw Error(Errc::kStrategy,
                "split " + std::to_string(k) + " does not divide dim " + std::to_string(d) +
                    " of input " + std::to_string(j) + " (size " + std::to_string((*shape)[d]) +
                    ")",
                path);
  }
}

// The loop splits a strategy asks for; the inputs must agree on shared loops.
StrategySplits strategy_splits(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                               const ir::Strategy& strategy) {
  StrategySplits out{std::vector<std::int64_t>(s.loops.size(), 1),
                     std::vector<std::pair<int, int>>(s.loops.size(), {-1, -1})};
  for (std::size_t j = 0; j < strategy.size(); ++j) {
    if (strategy[j].size() != s.inputs[j].size()) {
      throw Error(Errc::kStrategy,
                  "strategy of input " + std::to_string(j) + " has " +
                      std::to_string(strategy[j].size()) + " dims but the input has rank " +
                      std::to_string(s.inputs[j].size()),
                  strategy_path(op, j));
    }
    for (std::size_t d = 0; d < strategy[j].size(); ++d) {
      const std::int64_t k = strategy[j][d];
      check_strategy_dim(g, op, s, j, d, k);
      const int loop = s.inputs[j][d];
      if (loop == algebra::kUnmapped) continue;
      const auto l = static_cast<std::size_t>(loop);
      auto& first = out.set_by[l];
      if (first.first < 0) {
        first = {static_cast<int>(j), static_cast<int>(d)};
        out.split[l] = k;
      } else if (out.split[l] != k) {
        throw Error(Errc::kStrategy,
                    "split " + std::to_string(k) + " of loop " + quoted(s.loops[l].name) +
                        " disagrees with split " + std::to_string(out.split[l]) + " of input " +
                        std::to_string(first.first) + " dim " + std::to_string(first.second),
                    strategy_path(op, j, d));
      }
    }
  }
  return out;
}

// The loop extent and outputs must also divide; reported against the input
// dim that asked for the split.
void check_splits_divide(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                         const StrategySplits& ss) {
  const ir::Operator& node = g.op(op);
  for (std::size_t l = 0; l < ss.split.size(); ++l) {
    const std::int64_t k = ss.split[l];
    if (k == 1) continue;
    const auto [j, d] = ss.set_by[l];
    const std::string path =
        strategy_path(op, static_cast<std::size_t>(j), static_cast<std::size_t>(d));
    if (s.loops[l].size % k != 0 || s.loops[l].size < k) {
      throw Error(Errc::kStrategy,
                  "split " + std::to_string(k) + " does not divide loop " +
                      quoted(s.loops[l].name) + " (size " + std::to_string(s.loops[l].size) + ")",
                  path);
    }
    const auto [oj, od] = first_undivided(g, node.outputs, s.outputs, static_cast<int>(l), k);
    if (oj >= 0) {
      throw Error(Errc::kStrategy,
                  "split " + std::to_string(k) + " of loop " + quoted(s.loops[l].name) +
                      " does not divide dim " + std::to_string(od) + " of output " +
                      std::to_string(oj),
                  path);
    }
  }
}

// Outermost axes first, so that the largest splits go to the slowest links
// only when the strategy asks for it (MindSpore lays strategies out the same way).
std::vector<std::int16_t> lay_out(ir::OpId op, const algebra::OpSpace& s, const StrategySplits& ss,
                                  const std::vector<Cut>& mesh) {
  std::vector<std::int64_t> remaining = ss.split;
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
    for (const std::int64_t k : ss.split) needed *= k;
    const auto [j, d] = ss.set_by[l];
    throw Error(Errc::kStrategy,
                "strategy needs " + std::to_string(needed) + " devices but the mesh (" +
                    mesh_to_string(mesh) + ", " + std::to_string(mesh_devices(mesh)) +
                    " devices) cannot lay out split " + std::to_string(ss.split[l]) + " of loop " +
                    quoted(s.loops[l].name) + " (" + std::to_string(remaining[l]) + " left over)",
                strategy_path(op, static_cast<std::size_t>(j), static_cast<std::size_t>(d)));
  }
  return cuts;
}

// The plan's operator count, spaces and mesh axis sizes.
void check_plan_shape(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                      const Plan& p) {
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
  if (!p.training.per_op.empty() && p.training.per_op.size() != n_ops) {
    throw Error(Errc::kPlan,
                "plan has a recomputation for " + std::to_string(p.training.per_op.size()) +
                    " operators but graph " + quoted(g.name()) + " has " + std::to_string(n_ops),
                "/training/recompute_ops");
  }
  if (!p.training.zero_per_param.empty() && p.training.zero_per_param.size() != g.num_tensors()) {
    throw Error(Errc::kPlan,
                "plan has a ZeRO stage for " + std::to_string(p.training.zero_per_param.size()) +
                    " tensors but graph " + quoted(g.name()) + " has " +
                    std::to_string(g.num_tensors()),
                "/training/zero_params");
  }
  for (std::size_t a = 0; a < p.mesh.size(); ++a) {
    if (p.mesh[a].size < 1) {
      throw Error(
          Errc::kPlan,
          "mesh axis " + quoted(p.mesh[a].axis) + " has size " + std::to_string(p.mesh[a].size),
          "/mesh/axes/" + std::to_string(a) + "/size");
    }
  }
}

// Whether operator node may have loop c cut at all (opaque, index, role,
// `allowed`), on axis a of the plan.
void check_loop_cuttable(const ir::Operator& node, ir::OpId o, const algebra::OpSpace& s,
                         const Plan& p, std::size_t a, int c) {
  // Built only for a message: a plan of 10^6 operators on 12 axes checks
  // about 10^7 cuts, nearly all of them legal.
  const auto path = [&] { return cut_path(o, a); };
  const auto axis_text = [&] { return quoted(p.mesh[a].axis); };
  if (s.opaque) {
    throw Error(Errc::kPlan,
                "operator " + quoted(node.name) + " of unknown type " + quoted(node.type) +
                    " cannot be cut (axis " + axis_text() + ")",
                path());
  }
  if (c < 0 || static_cast<std::size_t>(c) >= s.loops.size()) {
    throw Error(Errc::kPlan,
                "loop index " + std::to_string(c) + " on axis " + axis_text() +
                    " is out of range: " + quoted(node.name) + " has " +
                    std::to_string(s.loops.size()) + " loops",
                path());
  }
  const algebra::LoopDim& ld = s.loops[static_cast<std::size_t>(c)];
  if (ld.role == algebra::DimRole::Whole) {
    throw Error(Errc::kPlan,
                "loop " + quoted(ld.name) + " of " + quoted(node.name) + " must not be cut (axis " +
                    axis_text() + ")",
                path());
  }
  if (node.allowed) {
    bool ok = false;
    for (const auto& name : *node.allowed) ok = ok || name == ld.name;
    if (!ok) {
      throw Error(Errc::kPlan,
                  "loop " + quoted(ld.name) + " of " + quoted(node.name) +
                      " is not among its allowed dims (axis " + axis_text() + ")",
                  path());
    }
  }
}

// Operator o's row of cuts: each legal, and each dividing what the earlier
// axes left.
// `splits` is scratch, reused from operator to operator.
void check_op_cuts(const ir::Graph& g, ir::OpId o, const algebra::OpSpace& s, const Plan& p,
                   std::vector<std::int64_t>& splits) {
  const ir::Operator& node = g.op(o);
  const auto& row = p.cuts[o];
  if (row.size() != p.mesh.size()) {
    throw Error(Errc::kPlan,
                "operator " + quoted(node.name) + " has " + std::to_string(row.size()) +
                    " cuts but the mesh has " + std::to_string(p.mesh.size()) + " axes",
                op_path(o) + "/cuts");
  }
  splits.assign(s.loops.size(), 1);
  for (std::size_t a = 0; a < row.size(); ++a) {
    const int c = row[a];
    if (c == kReplicated) continue;
    check_loop_cuttable(node, o, s, p, a, c);
    const algebra::LoopDim& ld = s.loops[static_cast<std::size_t>(c)];
    const std::int64_t k = p.mesh[a].size;
    if (!algebra::can_cut(g, node, s, splits, c, k)) {
      throw Error(Errc::kPlan,
                  "cannot cut loop " + quoted(ld.name) + " of " + quoted(node.name) + " by " +
                      std::to_string(k) + " on axis " + quoted(p.mesh[a].axis) +
                      " after splits of " + std::to_string(splits[static_cast<std::size_t>(c)]) +
                      ": the loop or an operand dim does not divide",
                  cut_path(o, a));
    }
    splits[static_cast<std::size_t>(c)] *= k;
  }
}

// A pinned operator's cuts must be the ones its strategy lays out.
void check_pinned(const ir::Graph& g, ir::OpId o, const algebra::OpSpace& s, const Plan& p) {
  const ir::Operator& node = g.op(o);
  const auto& row = p.cuts[o];
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

}  // namespace

std::vector<std::int16_t> assign_cuts(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                                      const ir::Strategy& strategy, const std::vector<Cut>& mesh) {
  const ir::Operator& node = g.op(op);
  if (strategy.size() != s.inputs.size()) {
    throw Error(Errc::kStrategy,
                "strategy lists " + std::to_string(strategy.size()) + " inputs but operator " +
                    quoted(node.name) + " has " + std::to_string(s.inputs.size()),
                strategy_path(op));
  }
  const StrategySplits ss = strategy_splits(g, op, s, strategy);
  check_splits_divide(g, op, s, ss);
  return lay_out(op, s, ss, mesh);
}

void check_plan(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p) {
  check_plan_shape(g, spaces, p);
  std::vector<std::int64_t> splits;
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    check_op_cuts(g, o, spaces[o], p, splits);
    if (g.op(o).strategy) check_pinned(g, o, spaces[o], p);
  }
}

}  // namespace recsearch::plan
