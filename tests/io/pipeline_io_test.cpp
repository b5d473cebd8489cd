// SPDX-License-Identifier: Apache-2.0
// The "pipeline" section of plan files: a searched pipeline written,
// read back and evaluated gives the same stages, cuts and figures; bad
// stage data is refused with the file and the JSON path.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/search/pipeline.hpp"
#include "support/errors.hpp"

using namespace recsearch;
namespace t = recsearch::testing;
using Json = nlohmann::json;

namespace {

struct Fixture {
  ir::Graph g;
  std::vector<algebra::OpSpace> spaces;
  Cluster cluster;
  search::PipelineResult r;
};

Fixture searched() {
  gen::ModelSpec s;
  s.family = gen::Family::Gpt;
  s.layers = 8;
  s.hidden = 256;
  s.heads = 8;
  s.seq = 128;
  s.vocab = 1000;
  s.batch = 16;
  ir::Graph g = gen::build_graph(s);
  auto spaces = algebra::build_op_spaces(g);
  Cluster c("nodes", {Level{"node", 4, 25.0, 5.0}, Level{"gpu", 2, 300.0, 2.0}},
            DeviceSpec{312.0, 80.0, 2039.0});
  search::SearchOptions o;
  o.pipeline_stages = 4;
  auto r = search::run_pipeline(g, spaces, c, o);
  return {std::move(g), std::move(spaces), std::move(c), std::move(r)};
}

}  // namespace

TEST_CASE("a pipeline plan file reads back to the same stages and figures") {
  const Fixture f = searched();
  REQUIRE(f.r.plan.groups == 4);
  const std::string text = io::pipeline_to_json(f.g, f.spaces, f.cluster, f.r.plan, f.r.eval);
  CHECK(io::plan_has_pipeline(text, "p.json"));
  // The cluster travels with the plan, as in unpipelined plan files.
  const auto saved = io::plan_cluster(text, "p.json");
  REQUIRE(saved.has_value());
  CHECK(saved->num_devices() == 8);
  const plan::PipelinePlan back = io::parse_pipeline(text, "p.json", f.g, f.spaces, *saved);
  REQUIRE(back.num_stages() == f.r.plan.num_stages());
  CHECK(back.microbatches == f.r.plan.microbatches);
  CHECK(back.schedule == f.r.plan.schedule);
  for (std::size_t j = 0; j < back.num_stages(); ++j) {
    CHECK(back.stages[j].first == f.r.plan.stages[j].first);
    CHECK(back.stages[j].last == f.r.plan.stages[j].last);
    CHECK(back.stages[j].group == f.r.plan.stages[j].group);
    CHECK(back.stages[j].plan.cuts == f.r.plan.stages[j].plan.cuts);
  }
  const auto pe = plan::evaluate_pipeline(f.g, f.spaces, *saved, back, {});
  CHECK(pe.summary.step_time_s == doctest::Approx(f.r.eval.summary.step_time_s).epsilon(1e-12));
  CHECK(pe.summary.memory_per_device_bytes ==
        doctest::Approx(f.r.eval.summary.memory_per_device_bytes).epsilon(1e-12));
  // Written again, the file is the same (search time aside).
  plan::PipelineEvaluation a = f.r.eval, b = pe;
  a.summary.search_time_s = b.summary.search_time_s = 0;
  CHECK(io::pipeline_to_json(f.g, f.spaces, *saved, back, b) ==
        io::pipeline_to_json(f.g, f.spaces, f.cluster, f.r.plan, a));
}

// A stage holds its plan as the plan file of its stage graph: every member
// that file has besides the cluster, the tensors and the redistributions,
// value for value, whatever the layout (indented or on one line) and mode.
TEST_CASE("each stage holds the members of its stage graph's own plan file") {
  Fixture f = searched();
  for (const Mode mode : {Mode::Train, Mode::Infer}) {
    CAPTURE(mode == Mode::Train);
    plan::PipelinePlan pp = f.r.plan;
    for (plan::Stage& s : pp.stages) s.plan.mode = mode;
    const auto pe = plan::evaluate_pipeline(f.g, f.spaces, f.cluster, pp, {});
    const Cluster group = plan::stage_cluster(f.cluster, pp.groups);
    for (const int indent : {2, -1}) {
      CAPTURE(indent);
      const Json file = Json::parse(io::pipeline_to_json(f.g, f.spaces, f.cluster, pp, pe, indent));
      const Json& stages = file["pipeline"]["stages"];
      REQUIRE(stages.size() == pp.num_stages());
      for (std::size_t j = 0; j < pp.num_stages(); ++j) {
        CAPTURE(j);
        const plan::Stage& s = pp.stages[j];
        const plan::StageGraph sg = plan::stage_graph(f.g, f.spaces, s.first, s.last);
        const Json own =
            Json::parse(io::plan_to_json(sg.graph, sg.spaces, group, s.plan, pe.stages[j]));
        Json expected = Json::object();
        for (const char* key : {"training", "mesh", "operators", "summary"})
          if (own.contains(key)) expected[key] = own[key];
        CHECK(expected.contains("training") == (mode == Mode::Train));
        Json got = stages[j];
        for (const char* key : {"range", "first", "last", "group", "devices"}) got.erase(key);
        CHECK(got == expected);
        CHECK(stages[j]["range"] == Json::array({s.first, s.last}));
        CHECK(stages[j]["first"] == f.g.op(s.first).name);
        CHECK(stages[j]["last"] == f.g.op(s.last - 1).name);
      }
    }
  }
}

TEST_CASE("bad stage data is an error naming the file and the JSON path") {
  const Fixture f = searched();
  const Json good = Json::parse(io::pipeline_to_json(f.g, f.spaces, f.cluster, f.r.plan, f.r.eval));
  const auto expect = [&](const Json& doc, Errc code, const std::string& path) {
    const std::string text = doc.dump();
    return t::expect_error(
        [&] { (void)io::parse_pipeline(text, "p.json", f.g, f.spaces, f.cluster); }, code, path,
        "p.json");
  };
  Json doc = good;
  doc["pipeline"]["stages"][1]["range"][0] = 1;
  doc["pipeline"]["stages"][1].erase("first");
  expect(doc, Errc::kPlan, "/pipeline/stages/1/range");
  doc = good;
  doc["pipeline"]["stages"][2]["range"] = "all";
  expect(doc, Errc::kSchema, "/pipeline/stages/2/range");
  doc = good;
  Json& cuts = doc["pipeline"]["stages"][0]["operators"][3]["cuts"];
  REQUIRE(!cuts.empty());
  const std::string axis = cuts.begin().key();
  cuts[axis] = "nonsense";
  expect(doc, Errc::kUnknownName, "/pipeline/stages/0/operators/3/cuts/" + axis);
  doc = good;
  doc["pipeline"]["schedule"] = "gpipe";
  expect(doc, Errc::kSchema, "/pipeline/schedule");
  doc = good;
  doc["pipeline"]["microbatches"] = 0;
  expect(doc, Errc::kSchema, "/pipeline/microbatches");
  doc = good;
  doc["pipeline"]["device_groups"] = 3;
  expect(doc, Errc::kPlan, "/pipeline/device_groups");
  doc = good;
  doc["pipeline"]["stages"].erase(3);
  expect(doc, Errc::kPlan, "/pipeline/stages");
  doc = good;
  doc["pipeline"]["stages"][1]["first"] = "not-this-one";
  expect(doc, Errc::kPlan, "/pipeline/stages/1/first");
}
