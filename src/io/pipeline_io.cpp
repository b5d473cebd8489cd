// SPDX-License-Identifier: Apache-2.0
// The "pipeline" section of plan files (recsearch/io/pipeline_io.hpp). Each
// stage's operator-level plan is written and read in the plan file's own
// form on its stage graph (the plan writer's print_plan_members, and
// parse_plan), so that a stage means exactly what an unpipelined plan of
// the same operators means; this file adds the stage ranges, groups,
// schedule and the figures.
#include "recsearch/io/pipeline_io.hpp"

#include <functional>
#include <string>

#include "io/cluster_json.hpp"
#include "io/json_util.hpp"
#include "io/plan_members.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::io {
namespace {

using detail::Json;
using detail::OrderedJson;
using detail::Reader;

std::string stage_path(std::size_t j) { return "/pipeline/stages/" + std::to_string(j); }

// A stage's fields that belong to its operator-level plan (the rest are the
// pipeline's: range, group, devices, the operator names, its summary).
bool plan_field(const std::string& key) {
  return key != "range" && key != "group" && key != "devices" && key != "first" && key != "last" &&
         key != "summary";
}

std::int64_t group_devices(const Cluster& cluster, const plan::PipelinePlan& pp) {
  return cluster.num_devices() / static_cast<std::int64_t>(std::max<std::size_t>(pp.groups, 1));
}

// One stage on one line: its range and group, then its plan's members as
// the plan file of its stage graph holds them (detail::print_plan_members).
void print_stage(std::string& out, bool spaced, const ir::Graph& g,
                 const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
                 const Cluster& group, const plan::PipelinePlan& pp,
                 const plan::PipelineEvaluation& pe, std::size_t j) {
  const plan::Stage& s = pp.stages[j];
  const plan::StageGraph sg = plan::stage_graph(g, spaces, s.first, s.last);
  const std::int64_t per = group_devices(cluster, pp);
  const auto group_at = static_cast<std::int64_t>(s.group);
  out += '{';
  detail::append_key(out, "range", spaced);
  detail::append_int_array(out, {s.first, s.last}, spaced);
  out += detail::comma(spaced);
  detail::append_key(out, "first", spaced);
  detail::append_string(out, g.op(s.first).name);
  out += detail::comma(spaced);
  detail::append_key(out, "last", spaced);
  detail::append_string(out, g.op(s.last - 1).name);
  out += detail::comma(spaced);
  detail::append_key(out, "group", spaced);
  detail::append_int(out, group_at);
  out += detail::comma(spaced);
  detail::append_key(out, "devices", spaced);
  detail::append_int_array(out, {group_at * per, (group_at + 1) * per}, spaced);
  out += detail::comma(spaced);
  detail::print_plan_members(out, spaced, sg.graph, sg.spaces, group, s.plan, pe.stages[j]);
  out += '}';
}

OrderedJson group_json(const plan::GroupReport& gr, std::size_t gi) {
  OrderedJson j;
  j["group"] = gi;
  j["microbatch_s"] = detail::number_json(gr.microbatch_s);
  j["send_s"] = detail::number_json(gr.send_s);
  j["busy_s"] = detail::number_json(gr.busy_s);
  j["bubble_s"] = detail::number_json(gr.bubble_s);
  j["per_step_s"] = detail::number_json(gr.per_step_s);
  j["compute_s"] = detail::number_json(gr.compute_s);
  j["memory_bytes"] = detail::number_json(gr.memory_bytes);
  j["parameter_bytes"] = detail::number_json(gr.parameter_bytes);
  j["activation_bytes"] = detail::number_json(gr.activation_bytes);
  j["in_flight"] = detail::number_json(gr.in_flight);
  j["sent_bytes"] = detail::number_json(gr.sent_bytes);
  j["tied_s"] = detail::number_json(gr.tied_s);
  j["tied_bytes"] = detail::number_json(gr.tied_bytes);
  return j;
}

OrderedJson summary_json(const plan::PipelineEvaluation& pe) {
  const plan::Summary& s = pe.summary;
  OrderedJson j;
  j["step_time_s"] = detail::number_json(s.step_time_s);
  j["pipelined_s"] = detail::number_json(pe.pipelined_s);
  j["bubble_fraction"] = detail::number_json(pe.bubble_fraction);
  j["microbatch_s"] = detail::number_json(s.microbatch_s);
  j["compute_s"] = detail::number_json(s.compute_s);
  j["communication_s"] = detail::number_json(s.communication_s);
  j["memory_per_device_bytes"] = detail::number_json(s.memory_per_device_bytes);
  j["parameter_bytes"] = detail::number_json(s.parameter_bytes);
  j["activation_bytes"] = detail::number_json(s.activation_bytes);
  j["p2p_bytes_per_step"] = detail::number_json(pe.p2p_bytes_per_step);
  j["search_time_s"] = detail::number_json(s.search_time_s);
  return j;
}

std::string mode_text(Mode m) { return m == Mode::Infer ? "infer" : "train"; }

// The stage plan document parse_plan reads: the stage's plan fields under
// the file's format and mode.
std::string stage_plan_text(const Json& stage, const std::string& mode) {
  Json doc = Json::object();
  doc["format"] = "recsearch.plan";
  doc["version"] = detail::kPlanVersion;
  doc["mode"] = mode;
  for (const auto& [key, value] : stage.items())
    if (plan_field(key)) doc[key] = value;
  return doc.dump();
}

// "range": [first, last) within the graph, and the optional operator names.
std::pair<ir::OpId, ir::OpId> read_range(const Reader& r, const Json& stage, const ir::Graph& g,
                                         const std::string& sp) {
  const Json& range = r.array(r.require(stage, "range", sp + "/range"), sp + "/range");
  if (range.size() != 2) r.fail(Errc::kSchema, "expected [first, last)", sp + "/range");
  const std::int64_t first = r.integer(range[0], sp + "/range/0");
  const std::int64_t last = r.integer(range[1], sp + "/range/1");
  const auto ops = static_cast<std::int64_t>(g.num_operators());
  if (first < 0 || last <= first || last > ops)
    r.fail(Errc::kPlan,
           "operators [" + std::to_string(first) + ", " + std::to_string(last) +
               ") is empty or outside the graph's " + std::to_string(ops) + " operators",
           sp + "/range");
  const auto check_name = [&](const char* key, std::int64_t id) {
    const Json* name = r.find(stage, key);
    if (name == nullptr) return;
    const std::string n = r.string(*name, sp + "/" + key);
    if (n != g.op(static_cast<ir::OpId>(id)).name)
      r.fail(Errc::kPlan,
             "'" + n + "' is not operator " + std::to_string(id) + " ('" +
                 g.op(static_cast<ir::OpId>(id)).name + "')",
             sp + "/" + key);
  };
  check_name("first", first);
  check_name("last", last - 1);
  return {static_cast<ir::OpId>(first), static_cast<ir::OpId>(last)};
}

// Notes whether the document has a top-level "pipeline", skipping the rest.
class PipelineKey final : public detail::StreamHandler {
 public:
  Mode mode(const std::string& key) override {
    found_ = found_ || key == "pipeline";
    return Mode::kSkip;
  }
  void record(const std::string&, std::size_t, Json&&) override {}
  void field_done(const std::string&, const Json&) override {}
  [[nodiscard]] bool found() const noexcept { return found_; }

 private:
  bool found_ = false;
};

}  // namespace

bool plan_has_pipeline(std::string_view text, const std::string& source) {
  // Not a DOM of the file: a plan of 10^6 operators would take gigabytes.
  PipelineKey fast;
  Json head;
  if (detail::stream_object_fast(text, 0, fast, head)) return fast.found();
  PipelineKey slow;
  (void)detail::stream_object(text, source, slow);
  return slow.found();
}

plan::PipelinePlan parse_pipeline(std::string_view text, const std::string& source,
                                  const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                  const Cluster& cluster) {
  const Reader r(source);
  const Json root = detail::parse_json(text, source);
  r.expect_object(root, "");
  r.check_format(root, "recsearch.plan", detail::kPlanVersion);
  std::string mode = "train";
  if (const Json* jm = r.find(root, "mode")) {
    mode = r.string(*jm, "/mode");
    if (mode != "train" && mode != "infer")
      r.fail(Errc::kSchema, "mode must be \"train\" or \"infer\"", "/mode");
  }
  // "rec+pipeline": the stages' own algorithm, kept so that a plan read
  // back and written again says what made it.
  std::string algorithm = "file";
  if (const Json* ja = r.find(root, "algorithm")) {
    algorithm = r.string(*ja, "/algorithm");
    const std::string suffix = "+pipeline";
    if (algorithm.size() > suffix.size() &&
        algorithm.compare(algorithm.size() - suffix.size(), suffix.size(), suffix) == 0)
      algorithm.resize(algorithm.size() - suffix.size());
  }
  const Json& pj = r.object(r.require(root, "pipeline", "/pipeline"), "/pipeline");
  plan::PipelinePlan pp;
  pp.groups = static_cast<std::size_t>(r.positive_integer(
      r.require(pj, "device_groups", "/pipeline/device_groups"), "/pipeline/device_groups"));
  const std::string sched =
      r.string(r.require(pj, "schedule", "/pipeline/schedule"), "/pipeline/schedule");
  const auto schedule = plan::parse_schedule(sched);
  if (!schedule)
    r.fail(Errc::kSchema, "unknown schedule '" + sched + "' (1f1b or interleaved)",
           "/pipeline/schedule");
  pp.schedule = *schedule;
  if (const Json* v = r.find(pj, "virtual_stages"))
    pp.virtual_stages =
        static_cast<std::size_t>(r.positive_integer(*v, "/pipeline/virtual_stages"));
  pp.microbatches = r.positive_integer(r.require(pj, "microbatches", "/pipeline/microbatches"),
                                       "/pipeline/microbatches");
  const Json& stages = r.array(r.require(pj, "stages", "/pipeline/stages"), "/pipeline/stages");
  Cluster group = cluster;
  try {
    group = plan::stage_cluster(cluster, pp.groups);
  } catch (const Error& e) {
    r.rethrow(e);
  }
  for (std::size_t j = 0; j < stages.size(); ++j) {
    const std::string sp = stage_path(j);
    const Json& stage = r.object(stages[j], sp);
    plan::Stage s;
    std::tie(s.first, s.last) = read_range(r, stage, g, sp);
    s.group = static_cast<std::size_t>(
        r.integer(r.require(stage, "group", sp + "/group"), sp + "/group"));
    const plan::StageGraph sg = plan::stage_graph(g, spaces, s.first, s.last);
    try {
      s.plan = parse_plan(stage_plan_text(stage, mode), source, sg.graph, sg.spaces, group.cuts());
    } catch (const Error& e) {
      throw Error(e.code(), e.detail(), sp + e.json_path(), source);
    }
    s.plan.mode = mode == "infer" ? Mode::Infer : Mode::Train;
    s.plan.algorithm = algorithm;
    s.plan.training.microbatches = pp.microbatches;
    pp.stages.push_back(std::move(s));
  }
  try {
    plan::check_pipeline(g, cluster, pp);
  } catch (const Error& e) {
    r.rethrow(e);
  }
  return pp;
}

std::string pipeline_to_json(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                             const Cluster& cluster, const plan::PipelinePlan& pp,
                             const plan::PipelineEvaluation& pe, int indent) {
  const Cluster group = plan::stage_cluster(cluster, pp.groups);
  const Mode mode = pp.stages.empty() ? Mode::Train : pp.stages[0].plan.mode;
  detail::LayoutWriter w(indent);
  w.field("format", "recsearch.plan");
  w.field("version", detail::kPlanVersion);
  w.field("graph", g.name());
  w.field("mode", mode_text(mode));
  w.field("algorithm",
          (pp.stages.empty() ? std::string("file") : pp.stages[0].plan.algorithm) + "+pipeline");
  w.field("cluster", detail::cluster_json(cluster));
  OrderedJson head;
  head["device_groups"] = pp.groups;
  head["schedule"] = std::string(plan::schedule_name(pp.schedule));
  head["virtual_stages"] = pp.virtual_stages;
  head["microbatches"] = pp.microbatches;
  head["devices_per_group"] = group_devices(cluster, pp);
  OrderedJson groups = OrderedJson::array();
  for (std::size_t gi = 0; gi < pe.groups.size(); ++gi)
    groups.push_back(group_json(pe.groups[gi], gi));
  head["group_figures"] = std::move(groups);
  // The stages are printed, not built: a stage's operators are most of the file.
  const std::function<void(std::string&, bool)> stages = [&](std::string& out, bool spaced) {
    out += '[';
    for (std::size_t j = 0; j < pp.stages.size(); ++j) {
      if (j > 0) out += detail::comma(spaced);
      print_stage(out, spaced, g, spaces, cluster, group, pp, pe, j);
      w.maybe_flush();
    }
    out += ']';
  };
  w.object_field("pipeline", head, "stages", &stages);
  w.field("summary", summary_json(pe));
  return w.finish();
}

}  // namespace recsearch::io
