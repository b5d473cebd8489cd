// SPDX-License-Identifier: Apache-2.0
// The C API, second half: running the search, evaluating a given plan, and
// reading a result back (summary, mesh axes, strategies and cuts, tensor
// shardings, redistributions, plan JSON). A result owns everything it hands
// out (the graph's recsearch::Problem is shared, never copied), so it outlives the
// handles it was made from and may be read from several threads at once.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "handles.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/search/search.hpp"

namespace recsearch::capi {
namespace {

std::unique_ptr<rs_result> make_result(Solution solution) {
  auto r = std::unique_ptr<rs_result>(new rs_result{std::move(solution), {}, {}, {}, {}, {}, {}});
  const auto& spaces = r->solution.problem().spaces();
  const auto& cuts = r->plan().cuts;
  r->cut_names.resize(cuts.size());
  for (std::size_t o = 0; o < cuts.size(); ++o) {
    r->cut_names[o].reserve(cuts[o].size());
    for (const std::int16_t c : cuts[o])
      r->cut_names[o].push_back(c == plan::kReplicated ? std::string()
                                                       : spaces[o].loops.at(c).name.str());
  }
  if (r->plan().mode == Mode::Train) {
    r->recompute = plan::operator_recompute(r->graph(), r->plan().training);
    r->zero = plan::parameter_zero(r->graph(), r->plan().training);
    r->zero_axes = plan::zero_axes(r->graph(), spaces, r->plan());
  }
  const plan::TensorShardings& shardings = r->eval().tensors;
  r->shardings.resize(shardings.size());
  for (std::size_t t = 0; t < shardings.size(); ++t) shardings.read(t, r->shardings[t]);
  const Cluster& cluster = r->solution.cluster();
  for (const Cut& cut : r->plan().mesh)
    r->axis_levels.push_back(cut.level < cluster.levels().size() ? cluster.levels()[cut.level].name
                                                                 : std::string());
  return r;
}

// `eval` of a plan without a cluster: the one the plan file was made for.
Cluster cluster_for_plan(std::string_view text, const std::string& source) {
  if (auto c = plan_file_cluster(text, source)) return *std::move(c);
  throw Error(Errc::kUsage,
              source + " has no mesh and no cluster: pass a cluster to evaluate it on");
}

const rs_result& res(const rs_result* r) {
  need(r, "result");
  return *r;
}

std::size_t op_index(const rs_result& r, std::size_t op) {
  if (op >= r.graph().num_operators())
    throw Error(Errc::kUsage, "operator index " + std::to_string(op) + " out of range (" +
                                  std::to_string(r.graph().num_operators()) + " operators)");
  return op;
}

std::size_t tensor_index(const rs_result& r, std::size_t t) {
  if (t >= r.graph().num_tensors())
    throw Error(Errc::kUsage, "tensor index " + std::to_string(t) + " out of range (" +
                                  std::to_string(r.graph().num_tensors()) + " tensors)");
  return t;
}

std::size_t axis_index(const rs_result& r, std::size_t axis) {
  if (axis >= r.plan().mesh.size())
    throw Error(Errc::kUsage, "axis index " + std::to_string(axis) + " out of range (" +
                                  std::to_string(r.plan().mesh.size()) + " axes)");
  return axis;
}

template <class T>
void put(T* out, T value) {
  need(out, "output pointer");
  *out = value;
}

}  // namespace
}  // namespace recsearch::capi

using namespace recsearch;
using capi::guard;
using capi::need;

extern "C" {

rs_status rs_search(const rs_graph* g, const rs_cluster* c, const rs_options* o, rs_result** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    need(g, "graph");
    need(c, "cluster");
    const std::shared_ptr<const Problem> problem = capi::prepare(*g);
    search::SearchOptions opts = o != nullptr ? o->search : search::SearchOptions{};
    opts.cost = capi::merged_cost(*g, c, o);
    *out = capi::make_result(solve(*problem, capi::cluster_of(*c), opts)).release();
  });
}

rs_status rs_evaluate(const rs_graph* g, const rs_cluster* c, const char* plan_json, size_t len,
                      const rs_options* o, rs_result** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    need(g, "graph");
    if (len > 0) need(plan_json, "plan text");
    const std::string source = "<plan>";
    const std::string_view text(len > 0 ? plan_json : "", len);
    const std::shared_ptr<const Problem> problem = capi::prepare(*g);
    const CostParams cost = capi::merged_cost(*g, c, o);
    const Cluster cluster =
        c != nullptr ? capi::cluster_of(*c) : capi::cluster_for_plan(text, source);
    plan::Plan p = problem->parse_plan(text, source, cluster);
    if (o != nullptr && o->mode_set) p.mode = o->search.mode;
    *out = capi::make_result(evaluate(*problem, std::move(p), cluster, cost)).release();
  });
}

void rs_result_free(rs_result* r) { delete r; }

rs_status rs_result_summary(const rs_result* r, rs_summary* out) {
  return guard([&] {
    const plan::Summary& s = capi::res(r).eval().summary;
    capi::put(out,
              rs_summary{s.step_time_s, s.compute_s, s.communication_s, s.memory_per_device_bytes,
                         s.parameter_bytes, s.activation_bytes, s.search_time_s});
  });
}

rs_status rs_result_training(const rs_result* r, const char** recompute, int* zero_stage,
                             int64_t* microbatches) {
  return guard([&] {
    const plan::Plan& p = capi::res(r).plan();
    const plan::Training t = p.mode == Mode::Train ? p.training : plan::Training{};
    // recompute_name returns views of string literals: valid for the program.
    capi::put(recompute, plan::recompute_name(t.recompute).data());
    capi::put(zero_stage, t.zero_stage);
    capi::put(microbatches, t.microbatches);
  });
}

rs_status rs_result_operator_recompute(const rs_result* r, size_t op, const char** recompute) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const std::size_t o = capi::op_index(rr, op);
    const plan::Recompute rc = rr.recompute.empty() ? plan::Recompute::None : rr.recompute[o];
    capi::put(recompute, plan::recompute_name(rc).data());
  });
}

rs_status rs_result_parameter_zero_stage(const rs_result* r, size_t tensor, int* zero_stage) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const auto t = static_cast<ir::TensorId>(capi::tensor_index(rr, tensor));
    if (rr.graph().tensor(t).kind != ir::TensorKind::Parameter)
      throw Error(Errc::kUsage, "tensor '" + rr.graph().tensor(t).name +
                                    "' is not a parameter: only parameters have a ZeRO stage");
    capi::put(zero_stage, rr.zero.empty() ? 0 : rr.zero[t]);
  });
}

rs_status rs_result_parameter_zero_axes(const rs_result* r, size_t tensor, const uint32_t** axes,
                                        size_t* count) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const auto t = static_cast<ir::TensorId>(capi::tensor_index(rr, tensor));
    if (rr.graph().tensor(t).kind != ir::TensorKind::Parameter)
      throw Error(Errc::kUsage, "tensor '" + rr.graph().tensor(t).name +
                                    "' is not a parameter: only parameters have ZeRO axes");
    need(axes, "output pointer");
    need(count, "output pointer");
    // Stage 0 (and inference) shards nothing, whatever the cuts.
    const bool sharded = !rr.zero.empty() && rr.zero[t] > 0;
    const auto of = sharded ? rr.zero_axes.of(t) : std::span<const std::uint32_t>{};
    *axes = of.data();
    *count = of.size();
  });
}

rs_status rs_result_num_axes(const rs_result* r, size_t* out) {
  return guard([&] { capi::put(out, capi::res(r).plan().mesh.size()); });
}

rs_status rs_result_axis(const rs_result* r, size_t axis, const char** name, int64_t* size,
                         const char** level) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const Cut& cut = rr.plan().mesh[capi::axis_index(rr, axis)];
    if (name != nullptr) *name = cut.axis.c_str();
    if (size != nullptr) *size = cut.size;
    if (level != nullptr) *level = rr.axis_levels[axis].c_str();
  });
}

rs_status rs_result_num_operators(const rs_result* r, size_t* out) {
  return guard([&] { capi::put(out, capi::res(r).graph().num_operators()); });
}

rs_status rs_result_operator_name(const rs_result* r, size_t op, const char** out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const auto id = static_cast<ir::OpId>(capi::op_index(rr, op));
    capi::put(out, rr.graph().op(id).name.c_str());
  });
}

rs_status rs_result_find_operator(const rs_result* r, const char* name, size_t* out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const std::string n = capi::need_string(name, "operator name");
    const auto id = rr.graph().find_operator(n);
    if (!id) throw Error(Errc::kUsage, "unknown operator '" + n + "'");
    capi::put(out, static_cast<std::size_t>(*id));
  });
}

rs_status rs_result_strategy_num_inputs(const rs_result* r, size_t op, size_t* out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    capi::put(out, rr.eval().strategies.at(capi::op_index(rr, op)).size());
  });
}

rs_status rs_result_strategy(const rs_result* r, size_t op, size_t input, const int64_t** splits,
                             size_t* rank) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const ir::Strategy& s = rr.eval().strategies.at(capi::op_index(rr, op));
    if (input >= s.size())
      throw Error(Errc::kUsage, "input index " + std::to_string(input) + " out of range (" +
                                    std::to_string(s.size()) + " inputs)");
    need(splits, "output pointer");
    need(rank, "output pointer");
    *splits = s[input].data();
    *rank = s[input].size();
  });
}

rs_status rs_result_cut(const rs_result* r, size_t op, size_t axis, const char** loop) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const std::string& n = rr.cut_names[capi::op_index(rr, op)][capi::axis_index(rr, axis)];
    capi::put(loop, n.empty() ? static_cast<const char*>(nullptr) : n.c_str());
  });
}

rs_status rs_result_num_tensors(const rs_result* r, size_t* out) {
  return guard([&] { capi::put(out, capi::res(r).graph().num_tensors()); });
}

rs_status rs_result_tensor_name(const rs_result* r, size_t tensor, const char** out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const auto id = static_cast<ir::TensorId>(capi::tensor_index(rr, tensor));
    capi::put(out, rr.graph().tensor(id).name.c_str());
  });
}

rs_status rs_result_find_tensor(const rs_result* r, const char* name, size_t* out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const std::string n = capi::need_string(name, "tensor name");
    const auto id = rr.graph().find_tensor(n);
    if (!id) throw Error(Errc::kUsage, "unknown tensor '" + n + "'");
    capi::put(out, static_cast<std::size_t>(*id));
  });
}

rs_status rs_result_tensor_rank(const rs_result* r, size_t tensor, size_t* out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const auto id = static_cast<ir::TensorId>(capi::tensor_index(rr, tensor));
    capi::put(out, rr.graph().tensor(id).rank());
  });
}

rs_status rs_result_tensor_sharding(const rs_result* r, size_t tensor, size_t dim,
                                    const uint32_t** axes, size_t* count) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const plan::TensorSharding& ts = rr.shardings.at(capi::tensor_index(rr, tensor));
    if (dim >= ts.dims.size())
      throw Error(Errc::kUsage, "dimension " + std::to_string(dim) + " out of range: tensor '" +
                                    rr.graph().tensor(static_cast<ir::TensorId>(tensor)).name +
                                    "' has rank " + std::to_string(ts.dims.size()));
    need(axes, "output pointer");
    need(count, "output pointer");
    *axes = ts.dims[dim].data();
    *count = ts.dims[dim].size();
  });
}

rs_status rs_result_tensor_partial(const rs_result* r, size_t tensor, const uint32_t** axes,
                                   size_t* count) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    const plan::TensorSharding& ts = rr.shardings.at(capi::tensor_index(rr, tensor));
    need(axes, "output pointer");
    need(count, "output pointer");
    *axes = ts.partial.data();
    *count = ts.partial.size();
  });
}

rs_status rs_result_num_redistributions(const rs_result* r, size_t* out) {
  return guard([&] { capi::put(out, capi::res(r).eval().events.size()); });
}

rs_status rs_result_redistribution(const rs_result* r, size_t index, rs_redistribution* out) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    if (index >= rr.eval().events.size())
      throw Error(Errc::kUsage, "redistribution index " + std::to_string(index) +
                                    " out of range (" + std::to_string(rr.eval().events.size()) +
                                    ")");
    need(out, "output pointer");
    const plan::CommEvent& e = rr.eval().events[index];
    const ir::Graph& g = rr.graph();
    // The names below are static strings (string_views of literals) or
    // strings the result owns.
    rs_redistribution d{};
    d.tensor = e.tensor == ir::kNone ? nullptr : g.tensor(e.tensor).name.c_str();
    d.from = e.from == ir::kNone ? nullptr : g.op(e.from).name.c_str();
    d.to = e.to == ir::kNone ? nullptr : g.op(e.to).name.c_str();
    d.axis = e.axis;
    d.collective = cost::collective_name(e.collective).data();
    d.phase = cost::phase_name(e.phase).data();
    d.reason = plan::comm_reason_name(e.reason).data();
    d.bytes = e.bytes;
    d.seconds = e.seconds;
    *out = d;
  });
}

rs_status rs_result_plan_json(const rs_result* r, char** out, size_t* len) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    capi::give_string(rr.solution.to_json(), out, len);
  });
}

rs_status rs_result_plan_table(const rs_result* r, char** out, size_t* len) {
  return guard([&] {
    const rs_result& rr = capi::res(r);
    capi::give_string(rr.solution.to_table(), out, len);
  });
}

}  // extern "C"
