// SPDX-License-Identifier: Apache-2.0
// The plan file (docs/design.md, Plan file): reading a plan against a graph and
// a cut schedule, writing a plan with its evaluation. (The text table is
// report::plan_to_table.)
//
// A plan's meaning is its cuts (plan/plan.hpp); everything else in the file
// (tensor shardings, redistributions, summary) is derived and ignored on
// reading, so a hand-edited derived field can never disagree with what is
// evaluated. Errors raised by the plan module name graph operator ids; they
// are re-pointed at the entry of the file that caused them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "io/cluster_json.hpp"
#include "io/json_util.hpp"
#include "io/plan_members.hpp"
#include "io/training_json.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/mesh_names.hpp"

namespace recsearch::io {

namespace {

using detail::child;
using detail::Json;
using detail::OrderedJson;
using detail::Reader;

// How the file gave an operator's cuts.
// Bare: listed with neither cuts nor strategy, which means the same as
// absent but still counts as listed.
enum class Source : std::uint8_t { Absent, Bare, Cuts, Strategy };

struct OpEntry {
  Source source = Source::Absent;
  std::size_t index = 0;                 // position in the file's "operators"
  std::vector<std::size_t> cut_entry;    // per axis: index in "cuts" (a list), or SIZE_MAX
  bool by_axis = false;                  // "cuts" is an object keyed by axis name
  std::optional<ir::Strategy> strategy;  // given next to "cuts": checked against them
};

// "<prefix><index><rest>" -> (index, rest), for JSON paths like
// "/operators/12/inputs/1"; nullopt unless `prefix` is followed by 1 to
// `max_digits` decimal digits.
std::optional<std::pair<std::uint64_t, std::string>> split_index(std::string_view path,
                                                                 std::string_view prefix,
                                                                 std::size_t max_digits) {
  if (path.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::size_t i = prefix.size();
  std::uint64_t index = 0;
  while (i < path.size() && path[i] >= '0' && path[i] <= '9' && i - prefix.size() < max_digits) {
    index = index * 10 + static_cast<std::uint64_t>(path[i] - '0');
    ++i;
  }
  if (i == prefix.size()) return std::nullopt;
  return std::make_pair(index, std::string(path.substr(i)));
}

// "/operators/<id><rest>" -> (id, rest).
std::optional<std::pair<ir::OpId, std::string>> split_op_path(const std::string& path) {
  const auto split = split_index(path, "/operators/", 10);
  if (!split || split->first >= ir::kNone) return std::nullopt;
  if (!split->second.empty() && split->second.front() != '/') return std::nullopt;
  return std::make_pair(static_cast<ir::OpId>(split->first), split->second);
}

std::string strategy_string(const ir::Strategy& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += ',';
    out += '[';
    for (std::size_t d = 0; d < s[i].size(); ++d) {
      if (d > 0) out += ',';
      out += std::to_string(s[i][d]);
    }
    out += ']';
  }
  return out + "]";
}

std::string loop_names(const algebra::OpSpace& s) {
  std::string out;
  for (const auto& l : s.loops) {
    if (!out.empty()) out += ", ";
    out += l.name;
  }
  return out.empty() ? "none" : out;
}

// Axis names of the file's mesh (when it has one; they line up with `mesh`
// by position), else the cut schedule's own names. Also checks the mesh.
std::vector<std::string> read_mesh(const Reader& r, const Json& root,
                                   const std::vector<Cut>& mesh) {
  std::vector<std::string> names;
  names.reserve(mesh.size());
  for (const Cut& c : mesh) names.push_back(c.axis);
  const Json* m = r.find(root, "mesh");
  if (m == nullptr) return names;
  r.expect_object(*m, "/mesh");
  std::int64_t devices = 1;
  for (const Cut& c : mesh) devices *= c.size;
  if (const Json* axes = r.find(*m, "axes")) {
    r.array(*axes, "/mesh/axes");
    if (axes->size() != mesh.size()) {
      r.fail(Errc::kPlan,
             "the plan's mesh has " + std::to_string(axes->size()) +
                 " axes, the cut schedule it is evaluated on has " + std::to_string(mesh.size()),
             "/mesh/axes");
    }
    std::unordered_map<std::string, std::size_t> seen;
    for (std::size_t a = 0; a < axes->size(); ++a) {
      const std::string at = child("/mesh/axes", a);
      const Json& ax = r.object((*axes)[a], at);
      const std::int64_t size = r.positive_integer(r.require(ax, "size", at), child(at, "size"));
      if (const Json* n = r.find(ax, "name")) {
        names[a] = r.nonempty_string(*n, child(at, "name"));
        if (!seen.emplace(names[a], a).second) {
          r.fail(Errc::kDuplicate, "mesh axis '" + names[a] + "' is listed twice",
                 child(at, "name"));
        }
      }
      if (size != mesh[a].size) {
        r.fail(Errc::kPlan,
               "axis '" + names[a] + "' has size " + std::to_string(size) +
                   " in the plan but the cut schedule's axis " + std::to_string(a) + " ('" +
                   mesh[a].axis + "') has size " + std::to_string(mesh[a].size),
               at);
      }
    }
  }
  if (const Json* d = r.find(*m, "devices")) {
    const std::int64_t n = r.positive_integer(*d, "/mesh/devices");
    if (n != devices) {
      r.fail(Errc::kPlan,
             "the plan is for " + std::to_string(n) + " devices, the cut schedule has " +
                 std::to_string(devices),
             "/mesh/devices");
    }
  }
  return names;
}

Mode read_mode(const Reader& r, const Json& root) {
  const Json* m = r.find(root, "mode");
  if (m == nullptr) return Mode::Train;
  const std::string s = r.string(*m, "/mode");
  if (s == "train") return Mode::Train;
  if (s == "infer") return Mode::Infer;
  r.fail(Errc::kSchema, "unknown mode '" + s + "' (expected train or infer)", "/mode");
}

// "recompute_ops": operator name to recomputation, for the operators whose
// recomputation is not the plan-wide one. An operator the graph pins must
// be given its pin (the evaluator prices the pin).
void read_recompute_ops(const Reader& r, const Json& j, const std::string& path, const ir::Graph& g,
                        plan::Training& t) {
  r.expect_object(j, path);
  for (const auto& [name, value] : j.items()) {
    const std::string at = child(path, name);
    const auto o = g.find_operator(name);
    if (!o) r.fail(Errc::kUnknownName, "unknown operator '" + name + "'", at);
    const plan::Recompute rc = detail::read_recompute(r, value, at);
    const auto& pin = g.op(*o).recompute;
    if (pin && *pin != rc)
      r.fail(Errc::kSchema,
             "operator '" + name + "' is pinned to recompute " +
                 std::string(plan::recompute_name(*pin)) + " in the graph",
             at);
    t.per_op[*o] = rc;
  }
}

// "zero_params": parameter name to ZeRO stage, for the parameters whose
// stage is not the plan-wide one.
void read_zero_params(const Reader& r, const Json& j, const std::string& path, const ir::Graph& g,
                      plan::Training& t) {
  r.expect_object(j, path);
  for (const auto& [name, value] : j.items()) {
    const std::string at = child(path, name);
    const auto id = g.find_tensor(name);
    if (!id) r.fail(Errc::kUnknownName, "unknown tensor '" + name + "'", at);
    if (g.tensor(*id).kind != ir::TensorKind::Parameter)
      r.fail(Errc::kSchema,
             "tensor '" + name + "' is not a parameter: only parameters have a ZeRO stage", at);
    t.zero_per_param[*id] = static_cast<std::int8_t>(detail::read_zero_stage(r, value, at));
  }
}

// The "training" object: recompute, zero_stage, microbatches, recompute_ops
// and zero_params, each optional (defaults: none, 0, 1, none, none);
// unknown keys are errors.
plan::Training read_training(const Reader& r, const Json& root, const ir::Graph& g) {
  plan::Training t;
  const Json* j = r.find(root, "training");
  if (j == nullptr) return t;
  r.expect_object(*j, "/training");
  for (const auto& [key, value] : j->items()) {
    const std::string at = "/training/" + key;
    if (key == "recompute") {
      t.recompute = detail::read_recompute(r, value, at);
    } else if (key == "zero_stage") {
      t.zero_stage = detail::read_zero_stage(r, value, at);
    } else if (key == "microbatches") {
      t.microbatches = r.positive_integer(value, at);
    } else if (key != "recompute_ops" && key != "zero_params" && key != "zero_axes") {
      r.fail(Errc::kSchema,
             "unknown training setting '" + key +
                 "' (known: recompute, zero_stage, microbatches, recompute_ops, zero_params, "
                 "zero_axes)",
             at);
    }
  }
  // After "recompute", whatever the key order: the plan-wide value fills the
  // operators recompute_ops does not name.
  if (const Json* ops = r.find(*j, "recompute_ops")) {
    t.per_op = plan::operator_recompute(g, t);  // the pins among them
    read_recompute_ops(r, *ops, "/training/recompute_ops", g, t);
    if (!plan::mixed_recompute(g, t)) t.per_op.clear();
  }
  // Likewise after "zero_stage".
  if (const Json* params = r.find(*j, "zero_params")) {
    t.zero_per_param.assign(g.num_tensors(), static_cast<std::int8_t>(t.zero_stage));
    read_zero_params(r, *params, "/training/zero_params", g, t);
    if (!plan::mixed_zero(g, t)) t.zero_per_param.clear();
  }
  return t;
}

std::string axis_list(const std::vector<std::string>& names, std::span<const std::uint32_t> axes) {
  std::string out = "[";
  for (const std::uint32_t a : axes) {
    if (out.size() > 1) out += ", ";
    out += a < names.size() ? names[a] : "c" + std::to_string(a);
  }
  return out + "]";
}

// "zero_axes" (derived from the cuts, so checked, never used): per
// parameter its ZeRO axes by the file's axis names. Each listed entry must
// be the axes plan::zero_axes gives for the plan as read, and a parameter
// with a ZeRO stage and axes may not be left out; plans without the field
// (written before it existed) are not checked.
void check_zero_axes(const Reader& r, const Json& head, const ir::Graph& g,
                     const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p,
                     const std::vector<std::string>& names,
                     const std::unordered_map<std::string, std::size_t>& axis_index) {
  const Json* training = r.find(head, "training");
  const Json* j = training == nullptr ? nullptr : r.find(*training, "zero_axes");
  if (j == nullptr) return;
  const std::string path = "/training/zero_axes";
  r.expect_object(*j, path);
  const plan::ZeroAxes expected = plan::zero_axes(g, spaces, p);
  std::vector<bool> listed(g.num_tensors(), false);
  for (const auto& [name, value] : j->items()) {
    const std::string at = child(path, name);
    const auto id = g.find_tensor(name);
    if (!id) r.fail(Errc::kUnknownName, "unknown tensor '" + name + "'", at);
    if (g.tensor(*id).kind != ir::TensorKind::Parameter)
      r.fail(Errc::kSchema,
             "tensor '" + name + "' is not a parameter: only parameters have ZeRO axes", at);
    r.array(value, at);
    std::vector<std::uint32_t> axes;
    for (std::size_t k = 0; k < value.size(); ++k) {
      const std::string axis = r.string(value[k], child(at, k));
      const auto it = axis_index.find(axis);
      if (it == axis_index.end())
        r.fail(Errc::kUnknownName, "unknown mesh axis '" + axis + "'", child(at, k));
      axes.push_back(static_cast<std::uint32_t>(it->second));
    }
    const auto want = expected.of(*id);
    if (!std::equal(axes.begin(), axes.end(), want.begin(), want.end())) {
      r.fail(Errc::kPlan,
             "parameter '" + name + "' has ZeRO axes " + axis_list(names, axes) +
                 " in the plan but the plan's cuts give " + axis_list(names, want),
             at);
    }
    listed[*id] = true;
  }
  const std::vector<int> zero = plan::parameter_zero(g, p.training);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (listed[t] || zero[t] <= 0 || expected.of(t).empty()) continue;
    r.fail(Errc::kPlan,
           "parameter '" + g.tensor(t).name + "' (ZeRO stage " + std::to_string(zero[t]) +
               ") is missing; the plan's cuts give it ZeRO axes " +
               axis_list(names, expected.of(t)),
           path);
  }
}

// Sets cuts[axis] to the loop named by `dim` (null: replicated across the
// axis), for read_cuts. `dim_at()` is the value's path, built on failure
// only (a plan of 10^6 operators has some 10^7 cuts).
template <class Path>
void read_cut_dim(const Reader& r, const Json& dim, const Path& dim_at, const algebra::OpSpace& s,
                  const std::string& op_name, std::size_t axis, std::vector<std::int16_t>& cuts) {
  if (dim.is_null()) return;
  if (!dim.is_string()) {
    r.fail(Errc::kSchema, std::string("expected a loop name or null, got ") + dim.type_name(),
           dim_at());
  }
  const std::string& name = dim.get_ref<const std::string&>();
  const int loop = s.find_loop(name);
  if (loop == algebra::kUnmapped) {
    r.fail(Errc::kUnknownName,
           "operator '" + op_name + "' has no loop '" + name + "' (loops: " + loop_names(s) + ")",
           dim_at());
  }
  cuts[axis] = static_cast<std::int16_t>(loop);
}

// The file's axis names, by axis, and their index. The cuts are walked in
// the order the JSON value keeps them: mesh order for a version-1 list,
// the keys' order for a version-2 object (alphabetical: "c10" before
// "c2"). The next axis after the last one found is tried before the
// index, which saves the hash on meshes of up to 10 axes; past them, the
// index answers.
struct AxisNames {
  std::vector<std::string> names;
  std::unordered_map<std::string, std::size_t> index;

  [[nodiscard]] std::optional<std::size_t> find(const std::string& name, std::size_t next) const {
    if (next < names.size() && names[next] == name) return next;
    const auto it = index.find(name);
    if (it == index.end()) return std::nullopt;
    return it->second;
  }
};

// Reads one entry's "cuts" into cuts (sized to the mesh): an object
// {"axis": "dim"}, as version 2 writes it, or the list of {"axis", "dim"}
// objects of version 1.
void read_cuts(const Reader& r, const Json& j, const std::string& path, const algebra::OpSpace& s,
               const std::string& op_name, const AxisNames& axes, std::vector<std::int16_t>& cuts,
               OpEntry& entry) {
  entry.cut_entry.assign(cuts.size(), SIZE_MAX);
  if (j.is_object()) {
    // A key given twice is refused by the streaming parser.
    entry.by_axis = true;
    std::size_t next = 0;
    for (const auto& [axis, dim] : j.items()) {
      const auto at = [&, &key = axis] { return child(path, key); };
      const auto a = axes.find(axis, next);
      if (!a) r.fail(Errc::kUnknownName, "unknown mesh axis '" + axis + "'", at());
      entry.cut_entry[*a] = *a;
      next = *a + 1;
      read_cut_dim(r, dim, at, s, op_name, *a, cuts);
    }
    return;
  }
  if (!j.is_array()) {
    r.fail(Errc::kSchema,
           std::string("expected an object of mesh axes' cut loops, got ") + j.type_name(), path);
  }
  for (std::size_t k = 0; k < j.size(); ++k) {
    const std::string at = child(path, k);
    const Json& c = r.object(j[k], at);
    const std::string axis_at = child(at, "axis");
    const std::string axis = r.string(r.require(c, "axis", at), axis_at);
    const auto found = axes.find(axis, 0);
    if (!found) r.fail(Errc::kUnknownName, "unknown mesh axis '" + axis + "'", axis_at);
    const std::size_t a = *found;
    if (entry.cut_entry[a] != SIZE_MAX) {
      r.fail(Errc::kPlan,
             "axis '" + axis + "' is cut twice (first at " + child(path, entry.cut_entry[a]) + ")",
             axis_at);
    }
    entry.cut_entry[a] = k;
    read_cut_dim(
        r, r.require(c, "dim", at), [&] { return child(at, "dim"); }, s, op_name, a, cuts);
  }
}

std::string axis_name(const plan::Plan& p, std::size_t a) {
  return a < p.mesh.size() ? p.mesh[a].axis : "c" + std::to_string(a);
}

// check_plan names "/operators/<op>/cuts/<axis>"; point at the file instead.
Error repoint(const Error& e, const Reader& r, const ir::Graph& g, const plan::Plan& p,
              const std::vector<OpEntry>& entries) {
  const auto op_split = split_op_path(e.json_path());
  if (!op_split || op_split->first >= entries.size()) return e.in_file(r.source());
  const auto [op, rest] = *op_split;
  const OpEntry& entry = entries[op];
  const std::string at = child("/operators", entry.index);
  switch (entry.source) {
    case Source::Absent:
      return Error(e.code(),
                   "operator '" + g.op(op).name +
                       "' (not in the plan file; pinned or replicated): " + e.detail(),
                   {}, r.source());
    case Source::Bare:
      return Error(e.code(),
                   "operator '" + g.op(op).name + "' (pinned or replicated): " + e.detail(), at,
                   r.source());
    case Source::Strategy: return Error(e.code(), e.detail(), child(at, "strategy"), r.source());
    case Source::Cuts: break;
  }
  if (const auto split = split_index(rest, "/cuts/", 9);
      split && split->first < entry.cut_entry.size()) {
    const std::size_t axis = static_cast<std::size_t>(split->first);
    if (entry.cut_entry[axis] == SIZE_MAX) {
      return Error(e.code(), e.detail(), child(at, "cuts"), r.source());
    }
    const std::string cuts = child(at, "cuts");
    return Error(
        e.code(), e.detail(),
        (entry.by_axis ? child(cuts, axis_name(p, axis)) : child(cuts, entry.cut_entry[axis])) +
            split->second,
        r.source());
  }
  return Error(e.code(), e.detail(), at + rest, r.source());
}

std::string_view mode_name(Mode m) { return m == Mode::Infer ? "infer" : "train"; }

}  // namespace

namespace {

// Reads a plan file while it streams by. The derived arrays (tensors,
// redistributions) are skipped unparsed into any DOM; operator entries are
// handled as they arrive once the format is checked and the mesh known
// (the writer puts "mesh" first); otherwise they wait in a buffer until the
// end of the file.
class PlanStream final : public detail::StreamHandler {
 public:
  PlanStream(const Reader& r, const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
             const std::vector<Cut>& mesh)
      : r_(r), g_(g), spaces_(spaces), mesh_(mesh), entries_(g.num_operators()) {
    p_.graph_name = g.name();
    p_.algorithm = "file";
    p_.mesh = mesh;
    p_.cuts.assign(g.num_operators(), std::vector<std::int16_t>(mesh.size(), plan::kReplicated));
  }

  Mode mode(const std::string& key) override {
    if (key == "operators") return Mode::kStream;
    if (key == "tensors") return Mode::kStream;
    if (key == "redistributions" || key == "redistribution_summary" ||
        key == "heaviest_redistributions")
      return Mode::kSkip;
    return Mode::kCollect;
  }

  void record(const std::string& key, std::size_t index, Json&& value) override {
    if (key == "tensors") {
      tensor_entry(index, value);
      return;
    }
    if (ready_ && pending_.empty()) {
      entry(index, value);
    } else {
      pending_.push_back(std::move(value));
    }
  }

  void field_done(const std::string& key, const Json& head) override {
    if (key == "operators") {
      if (const Json* v = r_.find(head, "operators")) (void)r_.array(*v, "/operators");
    }
    if (!format_ok_ && head.contains("format") && head.contains("version")) {
      r_.check_format(head, "recsearch.plan", detail::kPlanVersion);
      format_ok_ = true;
    }
    if (format_ok_ && !ready_ && head.contains("mesh")) start(head);
  }

  plan::Plan finish(const Json& head) {
    if (!format_ok_) r_.check_format(head, "recsearch.plan", detail::kPlanVersion);
    format_ok_ = true;
    if (!ready_) start(head);
    if (const Json* n = r_.find(head, "graph")) p_.graph_name = r_.string(*n, "/graph");
    p_.mode = read_mode(r_, head);
    p_.training = read_training(r_, head, g_);
    pin_absent();
    try {
      plan::check_plan(g_, spaces_, p_);
    } catch (const Error& e) {
      throw repoint(e, r_, g_, p_, entries_);
    }
    check_strategies();
    if (p_.mode == recsearch::Mode::Train)
      check_zero_axes(r_, head, g_, spaces_, p_, axes_.names, axes_.index);
    return std::move(p_);
  }

 private:
  // The mesh is known (or known to be absent): entries can be read.
  void start(const Json& head) {
    axes_.names = read_mesh(r_, head, mesh_);
    for (std::size_t a = 0; a < axes_.names.size(); ++a) axes_.index.emplace(axes_.names[a], a);
    ready_ = true;
    for (std::size_t i = 0; i < pending_.size(); ++i) entry(i, std::exchange(pending_[i], Json()));
    pending_.clear();
  }

  void entry(std::size_t i, const Json& o) {
    const std::string at = child("/operators", i);
    r_.expect_object(o, at);
    const std::string name_at = child(at, "name");
    const std::string name = r_.string(r_.require(o, "name", at), name_at);
    // Written plans list the operators in the graph's order.
    const auto id = i < g_.num_operators() && g_.op(static_cast<ir::OpId>(i)).name == name
                        ? std::optional<ir::OpId>(static_cast<ir::OpId>(i))
                        : g_.find_operator(name);
    if (!id) {
      r_.fail(Errc::kUnknownName,
              "unknown operator '" + name + "' (not in graph '" + g_.name() + "')", name_at);
    }
    // A plan of another graph that happens to share operator names must
    // not be evaluated as if it were this graph's.
    if (const Json* type = r_.find(o, "type"); type != nullptr && type->is_string()) {
      const std::string t = type->get<std::string>();
      if (t != g_.op(*id).type) {
        r_.fail(Errc::kPlan,
                "operator '" + name + "' is " + t + " in the plan but " + g_.op(*id).type +
                    " in graph '" + g_.name() + "' (a plan of another graph?)",
                child(at, "type"));
      }
    }
    OpEntry& entry = entries_[*id];
    if (entry.source != Source::Absent) {
      r_.fail(Errc::kDuplicate,
              "operator '" + name + "' is listed twice (first at " +
                  child("/operators", entry.index) + ")",
              name_at);
    }
    entry.index = i;
    const Json* cuts = r_.find(o, "cuts");
    const Json* strategy = r_.find(o, "strategy");
    if (cuts != nullptr) {
      entry.source = Source::Cuts;
      read_cuts(r_, *cuts, child(at, "cuts"), spaces_[*id], name, axes_, p_.cuts[*id], entry);
      if (strategy != nullptr) {
        entry.strategy = detail::read_strategy(r_, *strategy, child(at, "strategy"));
      }
    } else if (strategy != nullptr) {
      entry.source = Source::Strategy;
      const ir::Strategy s = detail::read_strategy(r_, *strategy, child(at, "strategy"));
      try {
        p_.cuts[*id] = plan::assign_cuts(g_, *id, spaces_[*id], s, mesh_);
      } catch (const Error& e) {
        const auto split = split_op_path(e.json_path());
        const std::string rest = split ? split->second : std::string("/strategy");
        throw Error(e.code(), e.detail(), at + rest, r_.source());
      }
    } else {
      // An entry with neither says nothing about the operator: it keeps
      // its pinned strategy (or stays replicated) like an absent one, but
      // is still counted as listed so a second entry is a duplicate.
      entry.source = Source::Bare;
      if (!g_.op(*id).strategy) return;
      try {
        p_.cuts[*id] = plan::assign_cuts(g_, *id, spaces_[*id], *g_.op(*id).strategy, mesh_);
      } catch (const Error& e) {
        throw Error(e.code(),
                    "operator '" + name + "', pinned strategy in the graph: " + e.detail(), at,
                    r_.source());
      }
    }
  }

  // "tensors" is derived (eval takes layouts from the cuts) and otherwise
  // ignored, but an entry naming a tensor must still describe this graph:
  // a known name and, when it gives one, the graph's shape -- else the plan
  // was made for another graph and must not be evaluated against this one.
  void tensor_entry(std::size_t i, const Json& t) const {
    if (!t.is_object()) return;
    const Json* name_j = r_.find(t, "name");
    if (name_j == nullptr || !name_j->is_string()) return;
    const std::string at = child("/tensors", i);
    const std::string& name = name_j->get_ref<const std::string&>();
    // Written plans list the tensors in the graph's order.
    const auto id = i < g_.num_tensors() && g_.tensor(static_cast<ir::TensorId>(i)).name == name
                        ? std::optional<ir::TensorId>(static_cast<ir::TensorId>(i))
                        : g_.find_tensor(name);
    if (!id) {
      r_.fail(Errc::kUnknownName,
              "unknown tensor '" + name + "' (not in graph '" + g_.name() + "')",
              child(at, "name"));
    }
    const Json* dims = r_.find(t, "shape");
    if (dims == nullptr || !dims->is_array()) return;
    ir::Shape shape;
    shape.reserve(dims->size());
    for (const Json& d : *dims) {
      std::int64_t v = 0;
      if (!detail::as_int64(d, v)) return;
      shape.push_back(v);
    }
    const ir::Shape& expected = g_.tensor(*id).shape;
    if (shape != expected) {
      r_.fail(Errc::kPlan,
              "tensor '" + name + "' has shape " + ir::shape_to_string(shape) +
                  " in the plan but " + ir::shape_to_string(expected) + " in graph '" + g_.name() +
                  "' (a plan of another graph?)",
              child(at, "shape"));
    }
  }

  // Operators the file leaves out keep their pinned strategy.
  void pin_absent() {
    for (ir::OpId id = 0; id < g_.num_operators(); ++id) {
      if (entries_[id].source != Source::Absent || !g_.op(id).strategy) continue;
      try {
        p_.cuts[id] = plan::assign_cuts(g_, id, spaces_[id], *g_.op(id).strategy, mesh_);
      } catch (const Error& e) {
        throw Error(
            e.code(),
            "operator '" + g_.op(id).name + "', pinned strategy in the graph: " + e.detail(), {},
            r_.source());
      }
    }
  }

  // A strategy written next to cuts is derived from them; one that
  // disagrees means the file was edited inconsistently.
  void check_strategies() const {
    for (ir::OpId id = 0; id < g_.num_operators(); ++id) {
      const OpEntry& entry = entries_[id];
      if (entry.source != Source::Cuts || !entry.strategy) continue;
      const ir::Strategy implied = plan::strategy_of(spaces_[id], mesh_, p_.cuts[id]);
      if (implied != *entry.strategy) {
        r_.fail(Errc::kPlan,
                "strategy " + strategy_string(*entry.strategy) +
                    " does not match the cuts, which give " + strategy_string(implied),
                child(child("/operators", entry.index), "strategy"));
      }
    }
  }

  const Reader& r_;
  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const std::vector<Cut>& mesh_;
  plan::Plan p_;
  std::vector<OpEntry> entries_;
  AxisNames axes_;  // the file's axis names
  bool format_ok_ = false;
  bool ready_ = false;
  std::vector<Json> pending_;
};

// plan_mesh_sizes and plan_cluster need only the head: everything else is
// skipped, and the fast reader stops once the head is read (written plans
// put it before the operators: at 10^6 operators the rest is 0.4 GB).
class HeadOnly final : public detail::StreamHandler {
 public:
  Mode mode(const std::string& key) override { return is_head(key) ? Mode::kCollect : Mode::kSkip; }
  void record(const std::string&, std::size_t, Json&&) override {}
  void field_done(const std::string&, const Json&) override {}
  [[nodiscard]] bool done(const Json& head) const override {
    return head.contains("format") && head.contains("version") && head.contains("mesh") &&
           head.contains("cluster");
  }

 private:
  static bool is_head(const std::string& key) {
    return key == "mesh" || key == "cluster" || key == "format" || key == "version";
  }
};

// The head of a plan file: read fast where it can be, else streamed.
Json plan_head(std::string_view text, const std::string& source) {
  HeadOnly fast;
  Json head;
  if (detail::stream_object_fast(text, 0, fast, head)) return head;
  HeadOnly slow;
  return detail::stream_object(text, source, slow);
}

}  // namespace

plan::Plan detail::parse_plan_padded(std::string_view text, std::size_t capacity,
                                     const std::string& source, const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces,
                                     const std::vector<Cut>& mesh) {
  if (spaces.size() != g.num_operators()) {
    throw Error(Errc::kUsage, "parse_plan: " + std::to_string(spaces.size()) +
                                  " operator spaces for a graph of " +
                                  std::to_string(g.num_operators()) + " operators");
  }
  const Reader r(source);
  {
    PlanStream fast(r, g, spaces, mesh);
    Json head;
    bool done = false;
    try {
      done = detail::stream_object_fast(text, capacity, fast, head);
    } catch (const Error&) {
      // Read again below, so that the error is the streaming reader's,
      // exactly as for any other file it reads.
      done = false;
    }
    if (done) return fast.finish(head);
  }
  PlanStream stream(r, g, spaces, mesh);
  const Json head = detail::stream_object(text, source, stream);
  return stream.finish(head);
}

plan::Plan parse_plan(std::string_view text, const std::string& source, const ir::Graph& g,
                      const std::vector<algebra::OpSpace>& spaces, const std::vector<Cut>& mesh) {
  return detail::parse_plan_padded(text, 0, source, g, spaces, mesh);
}

plan::Plan read_plan_file(const std::string& path, const ir::Graph& g,
                          const std::vector<algebra::OpSpace>& spaces,
                          const std::vector<Cut>& mesh) {
  const std::string text = read_text_file(path);
  return parse_plan(text, path, g, spaces, mesh);
}

std::optional<Cluster> plan_cluster(std::string_view text, const std::string& source) {
  const Json root = plan_head(text, source);
  const Reader r(source);
  r.check_format(root, "recsearch.plan", detail::kPlanVersion);
  const Json* c = r.find(root, "cluster");
  if (c == nullptr) return std::nullopt;
  r.expect_object(*c, "/cluster");
  try {
    return detail::read_cluster(r, *c, nullptr);
  } catch (const Error& e) {
    throw Error(e.code(), e.detail(), "/cluster" + e.json_path(), source);
  }
}

std::vector<std::int64_t> plan_mesh_sizes(std::string_view text, const std::string& source) {
  const Json root = plan_head(text, source);
  const Reader r(source);
  r.check_format(root, "recsearch.plan", detail::kPlanVersion);
  const Json* m = r.find(root, "mesh");
  if (m == nullptr) return {};
  r.expect_object(*m, "/mesh");
  std::vector<std::int64_t> sizes;
  std::int64_t product = 1;
  if (const Json* axes = r.find(*m, "axes")) {
    r.array(*axes, "/mesh/axes");
    for (std::size_t a = 0; a < axes->size(); ++a) {
      const std::string at = child("/mesh/axes", a);
      const Json& ax = r.object((*axes)[a], at);
      const std::int64_t size = r.positive_integer(r.require(ax, "size", at), child(at, "size"));
      if (__builtin_mul_overflow(product, size, &product) || product > kMaxDevices) {
        r.fail(Errc::kPlan, "the mesh has more than " + std::to_string(kMaxDevices) + " devices",
               at);
      }
      sizes.push_back(size);
    }
  }
  if (const Json* d = r.find(*m, "devices")) {
    const std::int64_t n = r.positive_integer(*d, "/mesh/devices");
    if (r.find(*m, "axes") == nullptr) {
      if (n > kMaxDevices) {
        r.fail(Errc::kPlan, "more than " + std::to_string(kMaxDevices) + " devices",
               "/mesh/devices");
      }
      sizes.push_back(n);
    } else if (n != product) {
      r.fail(Errc::kPlan,
             "devices is " + std::to_string(n) + " but the axes multiply to " +
                 std::to_string(product),
             "/mesh/devices");
    }
  }
  return sizes;
}

namespace {

// The "mesh" field: every axis with its cluster level, and the device count.
OrderedJson mesh_json(const Cluster& cluster, const plan::Plan& p) {
  OrderedJson axes = OrderedJson::array();
  for (const Cut& c : p.mesh) {
    OrderedJson a;
    a["name"] = c.axis;
    a["size"] = c.size;
    a["level"] = c.level < cluster.levels().size() ? cluster.levels()[c.level].name : std::string();
    axes.push_back(std::move(a));
  }
  OrderedJson mesh;
  mesh["axes"] = std::move(axes);
  mesh["devices"] = p.num_devices();
  return mesh;
}

// The loop operator id cuts on axis a, or kReplicated (also for plans
// shorter than the graph).
std::int16_t cut_of(const plan::Plan& p, ir::OpId id, std::size_t a) {
  return id < p.cuts.size() && a < p.cuts[id].size() ? p.cuts[id][a] : plan::kReplicated;
}

// The printed JSON lists of axes a plan file repeats: per tensor dim its
// axes (["c0", "c3"]) and their named mesh dims (["node", "gpu/4"]), per
// operator loop the mesh dims that cut it. A plan has a few dozen distinct
// lists but prints one per tensor dim and cut loop (about 10^7 at 10^6
// operators); building each anew (a vector of strings per list) was a
// fifth of writing. Lists of up to 8 axes below 127 are memoized under a
// packed key, longer ones printed each time.
class AxisText {
 public:
  AxisText(const Cluster& cluster, const plan::Plan& p) : cluster_(cluster), p_(p) {}
  AxisText(const AxisText&) = delete;
  AxisText& operator=(const AxisText&) = delete;

  // The quoted name of axis a ("c3").
  void append_axis(std::string& out, std::size_t a) {
    if (a >= p_.mesh.size()) {
      detail::append_string(out, axis_name(p_, a));
      return;
    }
    if (quoted_.empty()) {
      for (std::size_t i = 0; i < p_.mesh.size(); ++i) {
        quoted_.emplace_back();
        detail::append_string(quoted_.back(), p_.mesh[i].axis);
      }
    }
    out += quoted_[a];
  }
  // ["c0", "c3"]: the axes' names.
  void append_axes(std::string& out, std::span<const std::uint32_t> axes, bool spaced) {
    append_memo(out, axes, spaced, false);
  }
  // ["node", "gpu/4"]: the axes as named mesh dims (mesh_dim_names).
  void append_mesh_dims(std::string& out, std::span<const std::uint32_t> axes, bool spaced) {
    append_memo(out, axes, spaced, true);
  }
  // A buffer for a list of axes, reused from record to record.
  [[nodiscard]] std::vector<std::uint32_t>& scratch() noexcept { return scratch_; }

 private:
  static constexpr std::size_t kMaxPacked = 8;
  static constexpr std::uint32_t kAxisLimit = 127;

  void append_memo(std::string& out, std::span<const std::uint32_t> axes, bool spaced,
                   bool mesh_dims) {
    // A leading 1 bit, the two flags, then 7 bits (axis + 1) per axis: the
    // leading bit's position gives the length, so no two lists share a key.
    std::uint64_t key = 4U | (mesh_dims ? 2U : 0U) | (spaced ? 1U : 0U);
    bool packed = axes.size() <= kMaxPacked;
    for (std::size_t i = 0; packed && i < axes.size(); ++i) {
      packed = axes[i] < kAxisLimit;
      key = (key << 7) | (axes[i] + 1);
    }
    if (!packed) {
      print(out, axes, spaced, mesh_dims);
      return;
    }
    auto [it, fresh] = memo_.try_emplace(key);
    if (fresh) print(it->second, axes, spaced, mesh_dims);
    out += it->second;
  }

  void print(std::string& out, std::span<const std::uint32_t> axes, bool spaced, bool mesh_dims) {
    out += '[';
    if (mesh_dims) {
      const std::vector<std::string> names =
          mesh_dim_names(cluster_, p_, std::vector<std::uint32_t>(axes.begin(), axes.end()));
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (i > 0) out += detail::comma(spaced);
        detail::append_string(out, names[i]);
      }
    } else {
      for (std::size_t i = 0; i < axes.size(); ++i) {
        if (i > 0) out += detail::comma(spaced);
        append_axis(out, axes[i]);
      }
    }
    out += ']';
  }

  const Cluster& cluster_;
  const plan::Plan& p_;
  std::vector<std::string> quoted_;
  std::unordered_map<std::uint64_t, std::string> memo_;
  std::vector<std::uint32_t> scratch_;
};

// Everything a section of the plan file is written from.
struct PlanContext {
  const ir::Graph& g;
  const std::vector<algebra::OpSpace>& spaces;
  const Cluster& cluster;
  const plan::Plan& p;
  const plan::Evaluation& ev;
  bool full;  // PlanDetail::Full, or Auto on a small graph
  AxisText& text;
};

// The loop name operator id cuts on axis a, or nullptr when it is replicated.
const algebra::LoopName* cut_dim(const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p,
                                 ir::OpId id, std::size_t a) {
  const std::int16_t loop = cut_of(p, id, a);
  if (loop < 0 || id >= spaces.size() || static_cast<std::size_t>(loop) >= spaces[id].loops.size())
    return nullptr;
  return &spaces[id].loops[static_cast<std::size_t>(loop)].name;
}

void print_strategy(std::string& out, const ir::Strategy& s, bool spaced) {
  out += '[';
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += detail::comma(spaced);
    detail::append_int_array(out, s[i], spaced);
  }
  out += ']';
}

// The strategy plan::strategy_of derives from an operator's cuts (per
// input dim, the split count of the loop it maps to; 1 where unmapped),
// printed as print_strategy prints it without building it: at 10^6
// operators the vectors of vectors made and freed per operator cost about
// as much as the printing. `splits` is a reused buffer.
void print_strategy_of(std::string& out, const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                       const std::vector<std::int16_t>& cuts, std::vector<std::int64_t>& splits,
                       bool spaced) {
  plan::loop_splits(s, mesh, cuts, splits);
  out += '[';
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    if (i > 0) out += detail::comma(spaced);
    out += '[';
    const std::span<const int> dims = s.inputs[i];
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (d > 0) out += detail::comma(spaced);
      const int loop = dims[d];
      detail::append_int(out,
                         loop == algebra::kUnmapped ? 1 : splits[static_cast<std::size_t>(loop)]);
    }
    out += ']';
  }
  out += ']';
}

// An operator's "mesh_split": per loop that is cut, the user's named mesh
// dims that cut it (io/mesh_names.hpp), e.g. {"i": ["node"], "j": ["gpu"]}.
void print_mesh_split(std::string& out, bool spaced, const PlanContext& c, ir::OpId id) {
  out += detail::comma(spaced);
  detail::append_key(out, "mesh_split", spaced);
  out += '{';
  if (id < c.spaces.size()) {
    // loop_axes(c.p, loops, id), one loop at a time into a reused buffer.
    const auto& loops = c.spaces[id].loops;
    const std::vector<std::int16_t> none;
    const std::vector<std::int16_t>& cuts = id < c.p.cuts.size() ? c.p.cuts[id] : none;
    const std::size_t n = std::min(cuts.size(), c.p.mesh.size());
    std::vector<std::uint32_t>& axes = c.text.scratch();
    bool first = true;
    for (std::size_t l = 0; l < loops.size(); ++l) {
      axes.clear();
      for (std::size_t a = 0; a < n; ++a) {
        if (cuts[a] == static_cast<std::int16_t>(l)) axes.push_back(static_cast<std::uint32_t>(a));
      }
      if (axes.empty()) continue;
      if (!first) out += detail::comma(spaced);
      first = false;
      detail::append_key(out, loops[l].name, spaced);
      c.text.append_mesh_dims(out, axes, spaced);
    }
  }
  out += '}';
}

// One record of "operators": name, type, strategy and the cut dim of each
// mesh axis, {"axis": "dim"} (in summary detail only the axes that cut: a
// replicated axis is what a missing one means to the reader).
void print_operator(std::string& out, bool spaced, const PlanContext& c, ir::OpId id) {
  const ir::Operator& op = c.g.op(id);
  out += '{';
  detail::append_key(out, "name", spaced);
  detail::append_string(out, op.name);
  out += detail::comma(spaced);
  detail::append_key(out, "type", spaced);
  detail::append_string(out, op.type);
  if (id < c.ev.strategies.size()) {
    out += detail::comma(spaced);
    detail::append_key(out, "strategy", spaced);
    print_strategy(out, c.ev.strategies[id], spaced);
  } else if (id < c.spaces.size() && id < c.p.cuts.size()) {
    out += detail::comma(spaced);
    detail::append_key(out, "strategy", spaced);
    thread_local std::vector<std::int64_t> splits;
    print_strategy_of(out, c.spaces[id], c.p.mesh, c.p.cuts[id], splits, spaced);
  }
  out += detail::comma(spaced);
  detail::append_key(out, "cuts", spaced);
  out += '{';
  bool first = true;
  for (std::size_t a = 0; a < c.p.mesh.size(); ++a) {
    const algebra::LoopName* dim = cut_dim(c.spaces, c.p, id, a);
    if (dim == nullptr && !c.full) continue;
    if (!first) out += detail::comma(spaced);
    first = false;
    c.text.append_axis(out, a);
    out += spaced ? ": " : ":";
    if (dim != nullptr) {
      detail::append_string(out, *dim);
    } else {
      out += "null";
    }
  }
  out += '}';
  if (c.full) print_mesh_split(out, spaced, c, id);
  out += '}';
}

// One record of "tensors": name, shape, and the axes sharding each dim or
// leaving it partial (in summary detail "partial" only when not empty),
// then, in full detail, the same on the named mesh.
void print_tensor(std::string& out, bool spaced, const PlanContext& c, ir::TensorId t) {
  const ir::Tensor& tensor = c.g.tensor(t);
  // Read into one sharding per thread: its lists are reused, tensor after tensor.
  thread_local plan::TensorSharding sharding;
  const plan::TensorSharding* ts = nullptr;
  if (t < c.ev.tensors.size()) {
    c.ev.tensors.read(t, sharding);
    ts = &sharding;
  }
  out += '{';
  detail::append_key(out, "name", spaced);
  detail::append_string(out, tensor.name);
  out += detail::comma(spaced);
  detail::append_key(out, "shape", spaced);
  detail::append_int_array(out, tensor.shape, spaced);
  out += detail::comma(spaced);
  detail::append_key(out, "sharding", spaced);
  out += '[';
  static const std::vector<std::uint32_t> kNoAxes;
  for (std::size_t d = 0; d < tensor.rank(); ++d) {
    if (d > 0) out += detail::comma(spaced);
    c.text.append_axes(out, ts != nullptr && d < ts->dims.size() ? ts->dims[d] : kNoAxes, spaced);
  }
  out += ']';
  const std::vector<std::uint32_t>& partial = ts != nullptr ? ts->partial : kNoAxes;
  if (c.full || !partial.empty()) {
    out += detail::comma(spaced);
    detail::append_key(out, "partial", spaced);
    c.text.append_axes(out, partial, spaced);
  }
  // A sharded dim its producer cuts on an inner factor (a merge region,
  // algebra::StridedDim) holds strided rows: per dim the outer factor (1:
  // contiguous), written only where some sharded dim is strided.
  std::vector<std::int64_t> outer(tensor.rank(), 1);
  bool strided = false;
  if (ts != nullptr)
    for (std::size_t d = 0; d < tensor.rank() && d < ts->dims.size(); ++d) {
      if (ts->dims[d].empty()) continue;
      outer[d] = algebra::produced_outer(c.g, c.spaces, t, d);
      strided = strided || outer[d] > 1;
    }
  if (strided) {
    out += detail::comma(spaced);
    detail::append_key(out, "strided_outer", spaced);
    detail::append_int_array(out, outer, spaced);
  }
  // The same on the user's named mesh dims (io/mesh_names.hpp); a summary
  // plan leaves this restatement out (docs/formats.md, Plan detail).
  if (!c.full) {
    out += '}';
    return;
  }
  out += detail::comma(spaced);
  detail::append_key(out, "mesh_sharding", spaced);
  out += '[';
  for (std::size_t d = 0; d < tensor.rank(); ++d) {
    if (d > 0) out += detail::comma(spaced);
    c.text.append_mesh_dims(out, ts != nullptr && d < ts->dims.size() ? ts->dims[d] : kNoAxes,
                            spaced);
  }
  out += ']';
  if (!partial.empty()) {
    out += detail::comma(spaced);
    detail::append_key(out, "mesh_partial", spaced);
    c.text.append_mesh_dims(out, partial, spaced);
  }
  out += '}';
}

void print_op_name(std::string& out, const ir::Graph& g, ir::OpId id) {
  if (id == ir::kNone || id >= g.num_operators()) {
    out += "null";
  } else {
    detail::append_string(out, g.op(id).name);
  }
}

// One record of "redistributions".
void print_event(std::string& out, bool spaced, const PlanContext& c, const plan::CommEvent& e) {
  out += '{';
  detail::append_key(out, "tensor", spaced);
  if (e.tensor == ir::kNone || e.tensor >= c.g.num_tensors()) {
    out += "null";
  } else {
    detail::append_string(out, c.g.tensor(e.tensor).name);
  }
  out += detail::comma(spaced);
  detail::append_key(out, "from", spaced);
  print_op_name(out, c.g, e.from);
  out += detail::comma(spaced);
  detail::append_key(out, "to", spaced);
  print_op_name(out, c.g, e.to);
  out += detail::comma(spaced);
  detail::append_key(out, "axis", spaced);
  c.text.append_axis(out, e.axis);
  out += detail::comma(spaced);
  detail::append_key(out, "collective", spaced);
  detail::append_string(out, cost::collective_name(e.collective));
  out += detail::comma(spaced);
  detail::append_key(out, "phase", spaced);
  detail::append_string(out, cost::phase_name(e.phase));
  out += detail::comma(spaced);
  detail::append_key(out, "reason", spaced);
  detail::append_string(out, plan::comm_reason_name(e.reason));
  out += detail::comma(spaced);
  detail::append_key(out, "bytes", spaced);
  detail::append_number(out, e.bytes);
  out += detail::comma(spaced);
  detail::append_key(out, "seconds", spaced);
  detail::append_number(out, e.seconds);
  if (e.repeats != 1) {
    out += detail::comma(spaced);
    detail::append_key(out, "repeats", spaced);
    detail::append_number(out, e.repeats);
  }
  out += '}';
}

}  // namespace

OrderedJson detail::training_json(const ir::Graph& g, const plan::Training& t) {
  OrderedJson j;
  j["recompute"] = std::string(plan::recompute_name(t.recompute));
  j["zero_stage"] = t.zero_stage;
  j["microbatches"] = t.microbatches;
  if (plan::mixed_recompute(g, t)) {
    const std::vector<plan::Recompute> rc = plan::operator_recompute(g, t);
    OrderedJson ops = OrderedJson::object();
    for (ir::OpId o = 0; o < g.num_operators(); ++o)
      if (rc[o] != t.recompute) ops[g.op(o).name] = std::string(plan::recompute_name(rc[o]));
    j["recompute_ops"] = std::move(ops);
  }
  if (plan::mixed_zero(g, t)) {
    const std::vector<int> z = plan::parameter_zero(g, t);
    OrderedJson params = OrderedJson::object();
    for (ir::TensorId i = 0; i < g.num_tensors(); ++i)
      if (g.tensor(i).kind == ir::TensorKind::Parameter && z[i] != t.zero_stage)
        params[g.tensor(i).name] = z[i];
    j["zero_params"] = std::move(params);
  }
  return j;
}

namespace {

OrderedJson summary_json(const plan::Summary& s) {
  OrderedJson summary;
  summary["step_time_s"] = detail::number_json(s.step_time_s);
  summary["compute_s"] = detail::number_json(s.compute_s);
  summary["recompute_s"] = detail::number_json(s.recompute_s);
  summary["backward_compute_s"] = detail::number_json(s.backward_compute_s);
  summary["communication_s"] = detail::number_json(s.communication_s);
  summary["exposed_communication_s"] = detail::number_json(s.exposed_communication_s);
  summary["microbatch_s"] = detail::number_json(s.microbatch_s);
  summary["memory_per_device_bytes"] = detail::number_json(s.memory_per_device_bytes);
  summary["parameter_bytes"] = detail::number_json(s.parameter_bytes);
  summary["gradient_bytes"] = detail::number_json(s.gradient_bytes);
  summary["optimizer_bytes"] = detail::number_json(s.optimizer_bytes);
  summary["activation_bytes"] = detail::number_json(s.activation_bytes);
  summary["search_time_s"] = detail::number_json(s.search_time_s);
  return summary;
}

}  // namespace

namespace {

// The plan's "training" object: training_json's members, then "zero_axes":
// every parameter whose ZeRO stage is above 0 and that has ZeRO axes
// (plan::zero_axes), in graph order, with its axes by the plan's axis names
// ({"layer0.w": ["c0", "c2"]}); absent when no parameter has any. The
// lists (10^5 at 10^6 operators, a few dozen distinct) are printed through
// the memoized axis text, not built as nlohmann values: 3*10^6 of those
// were a sixth of writing the plan.
class TrainingMembers {
 public:
  explicit TrainingMembers(const PlanContext& c)
      : c_(c),
        head_(detail::training_json(c.g, c.p.training)),
        zero_(plan::parameter_zero(c.g, c.p.training)),
        axes_(plan::zero_axes(c.g, c.spaces, c.p)) {
    for (ir::TensorId t = 0; t < c.g.num_tensors() && !any_; ++t) any_ = listed(t);
  }

  // training_json's members.
  [[nodiscard]] const OrderedJson& head() const noexcept { return head_; }
  // Whether "zero_axes" is written.
  [[nodiscard]] bool any() const noexcept { return any_; }

  // The value of "zero_axes"; `between` runs after each member (the
  // writer's flush: a member per parameter is too many to hold at once).
  void print_axes(std::string& out, bool spaced, const std::function<void()>& between) const {
    out += '{';
    bool first = true;
    for (ir::TensorId t = 0; t < c_.g.num_tensors(); ++t) {
      if (!listed(t)) continue;
      if (!first) out += detail::comma(spaced);
      first = false;
      detail::append_string(out, c_.g.tensor(t).name);
      out += detail::colon(spaced);
      c_.text.append_axes(out, axes_.of(t), spaced);
      between();
    }
    out += '}';
  }

  // The whole object on one line, as LayoutWriter::element would print it.
  void print(std::string& out, bool spaced) const {
    if (!any_ || !head_.is_object()) {
      detail::append_json(out, head_, spaced);
      return;
    }
    out += '{';
    for (const auto& [name, value] : head_.items()) {
      detail::append_key(out, name, spaced);
      detail::append_json(out, value, spaced);
      out += detail::comma(spaced);
    }
    detail::append_key(out, "zero_axes", spaced);
    print_axes(out, spaced, [] {});
    out += '}';
  }

 private:
  [[nodiscard]] bool listed(ir::TensorId t) const { return zero_[t] > 0 && !axes_.of(t).empty(); }

  const PlanContext& c_;
  OrderedJson head_;
  std::vector<int> zero_;
  plan::ZeroAxes axes_;
  bool any_ = false;
};

void write_training(detail::LayoutWriter& w, const PlanContext& c) {
  const TrainingMembers t(c);
  const std::function<void(std::string&, bool)> print = [&](std::string& out, bool spaced) {
    t.print_axes(out, spaced, [&] { w.maybe_flush(); });
  };
  w.object_field("training", t.head(), "zero_axes", t.any() ? &print : nullptr);
}

// The sections of a plan file, one function each, in file order. Small ones
// are built as values; the per-operator, per-tensor and per-event arrays
// are printed record by record straight into the output.
void write_head(detail::LayoutWriter& w, const PlanContext& c) {
  w.field("format", "recsearch.plan");
  w.field("version", detail::kPlanVersion);
  w.field("graph", c.p.graph_name.empty() ? c.g.name() : c.p.graph_name);
  w.field("mode", std::string(mode_name(c.p.mode)));
  w.field("algorithm", c.p.algorithm);
  if (!c.full) w.field("detail", "summary");
  if (c.p.mode == Mode::Train) write_training(w, c);
}

void write_mesh(detail::LayoutWriter& w, const PlanContext& c) {
  w.field("mesh", mesh_json(c.cluster, c.p));
}

// The whole cluster, so that `eval` of a saved plan needs no cluster
// options and uses the same links the search used.
void write_cluster(detail::LayoutWriter& w, const PlanContext& c) {
  w.field("cluster", detail::cluster_json(c.cluster));
}

void write_operators(detail::LayoutWriter& w, const PlanContext& c) {
  w.begin_array("operators");
  for (ir::OpId id = 0; id < c.g.num_operators(); ++id) {
    w.element_with([&](std::string& out, bool spaced) { print_operator(out, spaced, c, id); });
  }
  w.end_array();
}

void write_tensors(detail::LayoutWriter& w, const PlanContext& c) {
  w.begin_array("tensors");
  for (ir::TensorId t = 0; t < c.g.num_tensors(); ++t) {
    w.element_with([&](std::string& out, bool spaced) { print_tensor(out, spaced, c, t); });
  }
  w.end_array();
}

// Summary detail: the redistributions totalled per (reason, phase,
// collective, axis), and the heaviest few in full (plan::RedistributionSummary:
// the evaluation's own where it summed its events as it found them, else
// summed here from its event list). `eval --detail full` lists them all
// again; they follow from the cuts.
void write_redistribution_summary(detail::LayoutWriter& w, const PlanContext& c) {
  std::optional<plan::RedistributionSummary> summed;
  if (!c.ev.redistribution_summary) {
    summed.emplace(c.p.mesh.size());
    for (const plan::CommEvent& e : c.ev.events) summed->add(e);
  }
  const plan::RedistributionSummary& s = summed ? *summed : *c.ev.redistribution_summary;
  w.begin_array("redistribution_summary");
  for (const plan::RedistributionSummary::Total& t : s.totals()) {
    w.element_with([&](std::string& out, bool spaced) {
      out += '{';
      detail::append_key(out, "reason", spaced);
      detail::append_string(out, plan::comm_reason_name(t.reason));
      out += detail::comma(spaced);
      detail::append_key(out, "phase", spaced);
      detail::append_string(out, cost::phase_name(t.phase));
      out += detail::comma(spaced);
      detail::append_key(out, "collective", spaced);
      detail::append_string(out, cost::collective_name(t.collective));
      out += detail::comma(spaced);
      detail::append_key(out, "axis", spaced);
      c.text.append_axis(out, t.axis);
      out += detail::comma(spaced);
      detail::append_key(out, "events", spaced);
      detail::append_int(out, t.events);
      out += detail::comma(spaced);
      detail::append_key(out, "bytes", spaced);
      detail::append_number(out, t.bytes);
      out += detail::comma(spaced);
      detail::append_key(out, "seconds", spaced);
      detail::append_number(out, t.seconds);
      out += '}';
    });
  }
  w.end_array();
  // The costliest events, so the largest transfers stay visible.
  w.begin_array("heaviest_redistributions");
  for (const plan::CommEvent& e : s.heaviest()) {
    w.element_with([&](std::string& out, bool spaced) { print_event(out, spaced, c, e); });
  }
  w.end_array();
}

void write_redistributions(detail::LayoutWriter& w, const PlanContext& c) {
  if (!c.full) {
    write_redistribution_summary(w, c);
    return;
  }
  if (c.ev.redistribution_summary)
    throw Error(Errc::kInternal,
                "the plan's evaluation summed its redistributions; listing them all needs an "
                "evaluation in full detail");
  w.begin_array("redistributions");
  for (const plan::CommEvent& e : c.ev.events) {
    w.element_with([&](std::string& out, bool spaced) { print_event(out, spaced, c, e); });
  }
  w.end_array();
}

void write_summary(detail::LayoutWriter& w, const PlanContext& c) {
  w.field("summary", summary_json(c.ev.summary));
}

using PlanSection = void (*)(detail::LayoutWriter&, const PlanContext&);
constexpr PlanSection kPlanSections[] = {
    write_head,    write_mesh, write_cluster, write_operators, write_tensors, write_redistributions,
    write_summary,
};

void write_plan(detail::LayoutWriter& w, const PlanContext& c) {
  for (const PlanSection section : kPlanSections) section(w, c);
}

bool full_detail(PlanDetail detail, const ir::Graph& g) {
  return lists_redistributions(detail, g.num_operators());
}

}  // namespace

bool lists_redistributions(PlanDetail detail, std::size_t operators) {
  switch (detail) {
    case PlanDetail::Full: return true;
    case PlanDetail::Summary: return false;
    case PlanDetail::Auto: break;
  }
  return operators <= kFullDetailMaxOperators;
}

std::optional<PlanDetail> parse_plan_detail(std::string_view text) {
  if (text == "auto") return PlanDetail::Auto;
  if (text == "full") return PlanDetail::Full;
  if (text == "summary") return PlanDetail::Summary;
  return std::nullopt;
}

namespace detail {

void print_plan_members(std::string& out, bool spaced, const ir::Graph& g,
                        const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
                        const plan::Plan& p, const plan::Evaluation& ev) {
  AxisText text(cluster, p);
  const PlanContext c{g, spaces, cluster, p, ev, true, text};
  if (p.mode == Mode::Train) {
    append_key(out, "training", spaced);
    TrainingMembers(c).print(out, spaced);
    out += comma(spaced);
  }
  append_key(out, "mesh", spaced);
  append_json(out, mesh_json(cluster, p), spaced);
  out += comma(spaced);
  append_key(out, "operators", spaced);
  out += '[';
  for (ir::OpId id = 0; id < g.num_operators(); ++id) {
    if (id > 0) out += comma(spaced);
    print_operator(out, spaced, c, id);
  }
  out += ']';
  out += comma(spaced);
  append_key(out, "summary", spaced);
  append_json(out, summary_json(ev.summary), spaced);
}

}  // namespace detail

std::string plan_to_json(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         const Cluster& cluster, const plan::Plan& p, const plan::Evaluation& ev,
                         int indent, PlanDetail level) {
  detail::LayoutWriter w(indent);
  AxisText text(cluster, p);
  write_plan(w, PlanContext{g, spaces, cluster, p, ev, full_detail(level, g), text});
  return w.finish();
}

void write_plan_file(const std::string& path, const ir::Graph& g,
                     const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
                     const plan::Plan& p, const plan::Evaluation& ev, PlanDetail level,
                     int indent) {
  detail::TextSink sink(path);
  detail::LayoutWriter w(indent, sink);
  AxisText text(cluster, p);
  write_plan(w, PlanContext{g, spaces, cluster, p, ev, full_detail(level, g), text});
  (void)w.finish();
}

}  // namespace recsearch::io
