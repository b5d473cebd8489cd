// SPDX-License-Identifier: Apache-2.0
// Tests of the plan file: reading cuts and strategies against a graph and a
// cut schedule, errors re-pointed at the file, writing a plan with its
// evaluation (checked field by field against the Evaluation), read-write-read
// identity, plan_mesh_sizes and the ZeRO axes a plan lists per parameter;
// LayoutWriter::object_field against field() of the same object.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/json_util.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/search/search.hpp"
#include "support/errors.hpp"
#include "support/gen_specs.hpp"
#include "support/sample_graphs.hpp"

namespace {

using namespace recsearch;
using recsearch::testing::expect_error;
using Json = nlohmann::json;

const std::string kFile = "plan.json";

// x[4,16] @ w[16,32] -> h[4,32] -> ReLU -> y.
std::string graph_json(const std::string& mm_extra = {}) {
  return R"({"format": "recsearch.graph", "version": 1, "name": "g",
  "tensors": [{"name": "x", "shape": [4, 16]}, {"name": "w", "shape": [16, 32], "kind": "parameter"},
              {"name": "h", "shape": [4, 32]}, {"name": "y", "shape": [4, 32]}],
  "operators": [{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"])" +
         mm_extra + R"(},
                {"name": "act", "type": "ReLU", "inputs": ["h"], "outputs": ["y"]}]})";
}

// node 2 (c0) then gpu 4 (c1, c2).
Cluster test_cluster() {
  return Cluster("test", {Level{"node", 2, 50.0, 5.0}, Level{"gpu", 4, 450.0, 2.0}});
}

const std::string kMesh =
    R"("mesh": {"axes": [{"name": "c0", "size": 2, "level": "node"}, {"name": "c1", "size": 2, "level": "gpu"},
                         {"name": "c2", "size": 2, "level": "gpu"}], "devices": 8})";

std::string plan_text(const std::string& operators, const std::string& head = kMesh + ", ") {
  return R"({"format": "recsearch.plan", "version": 1, "graph": "g", )" + head +
         R"("operators": )" + operators + "}";
}

struct Fixture {
  ir::Graph g;
  std::vector<algebra::OpSpace> spaces;
  Cluster cluster = test_cluster();
  int i = -1, k = -1, j = -1;

  explicit Fixture(const std::string& mm_extra = {})
      : g(io::parse_graph(graph_json(mm_extra), "g.json")), spaces(algebra::build_op_spaces(g)) {
    REQUIRE(cluster.cuts().size() == 3);
    REQUIRE(cluster.cuts()[0].axis == "c0");
    i = spaces[0].find_loop("i");
    k = spaces[0].find_loop("k");
    j = spaces[0].find_loop("j");
    REQUIRE(i >= 0);
    REQUIRE(k >= 0);
    REQUIRE(j >= 0);
  }

  plan::Plan parse(const std::string& text) const {
    return io::parse_plan(text, kFile, g, spaces, cluster.cuts());
  }
};

using Cuts = std::vector<std::int16_t>;
constexpr std::int16_t kR = plan::kReplicated;

Cuts cuts(int a, int b, int c) {
  return {static_cast<std::int16_t>(a), static_cast<std::int16_t>(b), static_cast<std::int16_t>(c)};
}

}  // namespace

TEST_CASE("a plan with cuts") {
  const Fixture f;
  const plan::Plan p = f.parse(plan_text(
      R"([{"name": "mm", "type": "MatMul", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c2", "dim": "j"},
                                                    {"axis": "c1", "dim": null}]}])",
      kMesh + R"(, "mode": "infer", )"));
  CHECK(p.graph_name == "g");
  CHECK(p.algorithm == "file");
  CHECK(p.mode == Mode::Infer);
  REQUIRE(p.mesh.size() == 3);
  CHECK(p.mesh[1].axis == "c1");
  CHECK(p.num_devices() == 8);
  REQUIRE(p.cuts.size() == 2);
  CHECK(p.cuts[0] == cuts(f.i, kR, f.j));
  CHECK(p.cuts[1] == cuts(kR, kR, kR));  // not in the file: replicated
}

TEST_CASE("a hand-written strategy-only plan") {
  const Fixture f;
  // No mesh, no mode: the cut schedule given by the caller, training.
  const plan::Plan p = f.parse(
      R"({"format": "recsearch.plan", "version": 1, "operators": [{"name": "mm", "strategy": [[2, 1], [1, 4]]},
                                                                  {"name": "act", "strategy": [[4, 2]]}]})");
  CHECK(p.mode == Mode::Train);
  CHECK(p.graph_name == "g");
  // i split 2 goes to c0; j split 4 to c1 and c2 (outermost first).
  CHECK(p.cuts[0] == cuts(f.i, f.j, f.j));
  const int d0 = f.spaces[1].find_loop("d0");
  const int d1 = f.spaces[1].find_loop("d1");
  REQUIRE(d0 >= 0);
  REQUIRE(d1 >= 0);
  CHECK(p.cuts[1] == cuts(d0, d0, d1));
  CHECK(plan::strategy_of(f.spaces[0], p.mesh, p.cuts[0]) == ir::Strategy{{2, 1}, {1, 4}});
}

TEST_CASE("operators the file leaves out keep their pinned strategy") {
  const Fixture f(R"(, "strategy": [[1, 2], [2, 1]])");
  const plan::Plan p = f.parse(plan_text("[]"));
  CHECK(p.cuts[0] == cuts(f.k, kR, kR));
  // Listed without cuts or strategy means the same.
  CHECK(f.parse(plan_text(R"([{"name": "mm"}])")).cuts[0] == cuts(f.k, kR, kR));
  // A plan that contradicts the pin is an error at the cut that differs.
  expect_error(
      [&] {
        (void)f.parse(plan_text(
            R"([{"name": "mm", "cuts": [{"axis": "c1", "dim": "k"}, {"axis": "c0", "dim": "i"}]}])"));
      },
      Errc::kPlan, "/operators/0/cuts/1", kFile);
  // A pin that does not fit the mesh is the graph's strategy's fault.
  const Fixture bad(R"(, "strategy": [[1, 16], [16, 1]])");
  const std::string detail =
      expect_error([&] { (void)bad.parse(plan_text("[]")); }, Errc::kStrategy, "", kFile);
  CHECK(detail.find("'mm'") != std::string::npos);
}

TEST_CASE("plan errors name the file and the exact JSON path") {
  const Fixture f;
  struct Case {
    std::string name;
    std::string text;
    Errc code;
    std::string path;
  };
  const std::vector<Case> cases = {
      {"not JSON", "{\"format\": ", Errc::kParse, ""},
      {"wrong format", R"({"format": "recsearch.graph", "version": 1})", Errc::kSchema, "/format"},
      {"wrong version", R"({"format": "recsearch.plan", "version": 3})", Errc::kSchema, "/version"},
      {"mesh not an object", plan_text("[]", R"("mesh": [], )"), Errc::kSchema, "/mesh"},
      {"axis count", plan_text("[]", R"("mesh": {"axes": [{"size": 2}, {"size": 4}]}, )"),
       Errc::kPlan, "/mesh/axes"},
      {"axis size",
       plan_text("[]", R"("mesh": {"axes": [{"size": 2}, {"size": 4}, {"size": 2}]}, )"),
       Errc::kPlan, "/mesh/axes/1"},
      {"axis size not an integer",
       plan_text("[]", R"("mesh": {"axes": [{"size": 2}, {"size": "2"}, {"size": 2}]}, )"),
       Errc::kSchema, "/mesh/axes/1/size"},
      {"duplicate axis names",
       plan_text(
           "[]",
           R"("mesh": {"axes": [{"name": "a", "size": 2}, {"name": "a", "size": 2}, {"size": 2}]}, )"),
       Errc::kDuplicate, "/mesh/axes/1/name"},
      {"devices", plan_text("[]", R"("mesh": {"devices": 16}, )"), Errc::kPlan, "/mesh/devices"},
      {"mode", plan_text("[]", R"("mode": "training", )"), Errc::kSchema, "/mode"},
      {"graph not a string", plan_text("[]", R"("graph": 1, )"), Errc::kSchema, "/graph"},
      {"recompute_ops not an object", plan_text("[]", R"("training": {"recompute_ops": ["mm"]}, )"),
       Errc::kSchema, "/training/recompute_ops"},
      {"recompute_ops unknown operator",
       plan_text("[]", R"("training": {"recompute_ops": {"nope": "full"}}, )"), Errc::kUnknownName,
       "/training/recompute_ops/nope"},
      {"recompute_ops unknown value",
       plan_text("[]", R"("training": {"recompute_ops": {"mm": "most"}}, )"), Errc::kSchema,
       "/training/recompute_ops/mm"},
      {"operators not an array", plan_text("{}"), Errc::kSchema, "/operators"},
      {"operator not an object", plan_text("[1]"), Errc::kSchema, "/operators/0"},
      {"operator name missing", plan_text(R"([{"cuts": []}])"), Errc::kSchema, "/operators/0/name"},
      {"unknown operator", plan_text(R"([{"name": "mm"}, {"name": "nope"}])"), Errc::kUnknownName,
       "/operators/1/name"},
      {"operator twice",
       plan_text(R"([{"name": "mm"}, {"name": "act"}, {"name": "mm", "cuts": []}])"),
       Errc::kDuplicate, "/operators/2/name"},
      {"cuts neither an object nor a list", plan_text(R"([{"name": "mm", "cuts": "dp"}])"),
       Errc::kSchema, "/operators/0/cuts"},
      {"cut not an object", plan_text(R"([{"name": "mm", "cuts": ["c0"]}])"), Errc::kSchema,
       "/operators/0/cuts/0"},
      {"unknown axis",
       plan_text(
           R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c7", "dim": "j"}]}])"),
       Errc::kUnknownName, "/operators/0/cuts/1/axis"},
      {"axis twice",
       plan_text(
           R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c0", "dim": "j"}]}])"),
       Errc::kPlan, "/operators/0/cuts/1/axis"},
      {"unknown dim",
       plan_text(R"([{"name": "act"}, {"name": "mm", "cuts": [{"axis": "c1", "dim": "q"}]}])"),
       Errc::kUnknownName, "/operators/1/cuts/0/dim"},
      {"dim missing", plan_text(R"([{"name": "mm", "cuts": [{"axis": "c1"}]}])"), Errc::kSchema,
       "/operators/0/cuts/0/dim"},
      {"dim a number", plan_text(R"([{"name": "mm", "cuts": [{"axis": "c1", "dim": 0}]}])"),
       Errc::kSchema, "/operators/0/cuts/0/dim"},
      {"cut does not divide",
       plan_text(
           R"([{"name": "mm", "cuts": [{"axis": "c2", "dim": "i"}, {"axis": "c0", "dim": "i"}, {"axis": "c1", "dim": "i"}]}])"),
       Errc::kPlan, "/operators/0/cuts/0"},
      // The same as objects keyed by axis (version 2's spelling).
      {"unknown axis (by axis)", plan_text(R"([{"name": "mm", "cuts": {"c0": "i", "c7": "j"}}])"),
       Errc::kUnknownName, "/operators/0/cuts/c7"},
      {"axis twice (by axis)", plan_text(R"([{"name": "mm", "cuts": {"c0": "i", "c0": "j"}}])"),
       Errc::kDuplicate, "/operators/0"},
      {"unknown dim (by axis)",
       plan_text(R"([{"name": "act"}, {"name": "mm", "cuts": {"c1": "q"}}])"), Errc::kUnknownName,
       "/operators/1/cuts/c1"},
      {"dim a number (by axis)", plan_text(R"([{"name": "mm", "cuts": {"c1": 0}}])"), Errc::kSchema,
       "/operators/0/cuts/c1"},
      {"cut does not divide (by axis)",
       plan_text(R"([{"name": "mm", "cuts": {"c0": "i", "c1": "i", "c2": "i"}}])"), Errc::kPlan,
       "/operators/0/cuts/c2"},
      {"strategy and cuts disagree",
       plan_text(
           R"([{"name": "mm", "strategy": [[2, 1], [1, 1]], "cuts": [{"axis": "c0", "dim": "j"}]}])"),
       Errc::kPlan, "/operators/0/strategy"},
      {"strategy not an array", plan_text(R"([{"name": "mm", "strategy": "dp"}])"), Errc::kSchema,
       "/operators/0/strategy"},
      {"strategy zero", plan_text(R"([{"name": "mm", "strategy": [[0, 1], [1, 1]]}])"),
       Errc::kSchema, "/operators/0/strategy/0/0"},
      {"strategy wrong input count",
       plan_text(R"([{"name": "act"}, {"name": "mm", "strategy": [[2, 1]]}])"), Errc::kStrategy,
       "/operators/1/strategy"},
      {"strategy does not divide", plan_text(R"([{"name": "mm", "strategy": [[3, 1], [1, 1]]}])"),
       Errc::kStrategy, "/operators/0/strategy/0/0"},
      {"strategy too big for the mesh",
       plan_text(R"([{"name": "mm", "strategy": [[4, 1], [1, 4]]}])"), Errc::kStrategy,
       "/operators/0/strategy/1/1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    expect_error([&] { (void)f.parse(c.text); }, c.code, c.path, kFile);
  }
  // The detail of a mesh mismatch names both sizes.
  const std::string detail = expect_error(
      [&] {
        (void)f.parse(
            plan_text("[]", R"("mesh": {"axes": [{"size": 2}, {"size": 4}, {"size": 2}]}, )"));
      },
      Errc::kPlan, "/mesh/axes/1", kFile);
  CHECK(detail.find('4') != std::string::npos);
  CHECK(detail.find('2') != std::string::npos);
}

TEST_CASE("plan fields may come in any order; derived arrays are ignored") {
  const Fixture f;
  const std::string ops =
      R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c2", "dim": "j"}]}])";
  const Cuts want = cuts(f.i, kR, f.j);
  CHECK(f.parse(R"({"operators": )" + ops + ", " + kMesh +
                R"(, "tensors": {"anything": [1, {"valid": "json"}]}, "redistributions": 5,
                    "mode": "infer", "version": 1, "format": "recsearch.plan"})")
            .cuts[0] == want);
  CHECK(f.parse(R"({"format": "recsearch.plan", "operators": )" + ops + R"(, "version": 1})")
            .cuts[0] == want);
  // Errors in early entries are still reported against their own paths.
  expect_error(
      [&] {
        (void)f.parse(
            R"({"operators": [{"name": "zz"}], "format": "recsearch.plan", "version": 1})");
      },
      Errc::kUnknownName, "/operators/0/name", kFile);
  // Ignored arrays must still be valid JSON.
  expect_error([&] { (void)f.parse(plan_text("[]", R"("tensors": [1, }, )")); }, Errc::kParse, "",
               kFile);
}

TEST_CASE("plan axes may be renamed in the file's mesh") {
  const Fixture f;
  const plan::Plan p = f.parse(plan_text(
      R"([{"name": "mm", "cuts": [{"axis": "inner", "dim": "j"}]}])",
      R"("mesh": {"axes": [{"name": "outer", "size": 2}, {"name": "mid", "size": 2}, {"name": "inner", "size": 2}]}, )"));
  CHECK(p.cuts[0] == cuts(kR, kR, f.j));
}

TEST_CASE("plan_to_json writes the evaluation, and reads back to the same plan") {
  const Fixture f;
  // k on c0 leaves h partial there: the ReLU wants it whole -> all-reduce.
  const plan::Plan p = f.parse(plan_text(
      R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "k"}, {"axis": "c1", "dim": "i"}, {"axis": "c2", "dim": "j"}]},
          {"name": "act", "cuts": [{"axis": "c1", "dim": "d0"}]}])"));
  plan::Evaluation ev = plan::evaluate(f.g, f.spaces, f.cluster, p, CostParams{});
  ev.summary.search_time_s = 0.125;
  const std::string text = io::plan_to_json(f.g, f.spaces, f.cluster, p, ev);

  const Json j = Json::parse(text);
  CHECK(j["format"] == "recsearch.plan");
  CHECK(j["version"] == 2);
  CHECK(j["graph"] == "g");
  CHECK(j["mode"] == "train");
  CHECK(j["algorithm"] == "file");
  REQUIRE(j["mesh"]["axes"].size() == 3);
  CHECK(j["mesh"]["axes"][0] == Json::parse(R"({"name": "c0", "size": 2, "level": "node"})"));
  CHECK(j["mesh"]["axes"][2] == Json::parse(R"({"name": "c2", "size": 2, "level": "gpu"})"));
  CHECK(j["mesh"]["devices"] == 8);

  REQUIRE(j["operators"].size() == 2);
  const Json& mm = j["operators"][0];
  CHECK(mm["name"] == "mm");
  CHECK(mm["type"] == "MatMul");
  CHECK(mm["strategy"].get<ir::Strategy>() == ev.strategies[0]);
  CHECK(mm["cuts"] == Json::parse(R"({"c0": "k", "c1": "i", "c2": "j"})"));
  CHECK(j["operators"][1]["cuts"] == Json::parse(R"({"c0": null, "c1": "d0", "c2": null})"));
  // In the file's order, the mesh's.
  CHECK(text.find(R"("cuts": {"c0": "k", "c1": "i", "c2": "j"})") != std::string::npos);

  REQUIRE(j["tensors"].size() == 4);
  for (ir::TensorId t = 0; t < 4; ++t) {
    const Json& jt = j["tensors"][t];
    CHECK(jt["name"] == f.g.tensor(t).name);
    CHECK(jt["shape"].get<ir::Shape>() == f.g.tensor(t).shape);
    REQUIRE(jt["sharding"].size() == f.g.tensor(t).rank());
    const plan::TensorSharding ts = ev.tensors[t];  // a copy: the evaluation keeps codes
    for (std::size_t d = 0; d < f.g.tensor(t).rank(); ++d) {
      std::vector<std::string> want;
      for (const auto a : ts.dims[d]) want.push_back(p.mesh[a].axis);
      CHECK(jt["sharding"][d].get<std::vector<std::string>>() == want);
    }
    std::vector<std::string> partial;
    for (const auto a : ts.partial) partial.push_back(p.mesh[a].axis);
    CHECK(jt["partial"].get<std::vector<std::string>>() == partial);
  }
  // h is held by mm: split i on c1, j on c2, partial on c0.
  CHECK(j["tensors"][2]["sharding"] == Json::parse(R"([["c1"], ["c2"]])"));
  CHECK(j["tensors"][2]["partial"] == Json::parse(R"(["c0"])"));

  REQUIRE(j["redistributions"].size() == ev.events.size());
  bool found_all_reduce = false;
  for (std::size_t e = 0; e < ev.events.size(); ++e) {
    const plan::CommEvent& want = ev.events[e];
    const Json& je = j["redistributions"][e];
    CHECK(je["tensor"] == f.g.tensor(want.tensor).name);
    if (want.from == ir::kNone) {
      CHECK(je["from"].is_null());
    } else {
      CHECK(je["from"] == f.g.op(want.from).name);
    }
    if (want.to == ir::kNone) {
      CHECK(je["to"].is_null());
    } else {
      CHECK(je["to"] == f.g.op(want.to).name);
    }
    CHECK(je["axis"] == p.mesh[want.axis].axis);
    CHECK(je["collective"] == std::string(cost::collective_name(want.collective)));
    CHECK(je["phase"] == std::string(cost::phase_name(want.phase)));
    CHECK(je["reason"] == std::string(plan::comm_reason_name(want.reason)));
    CHECK(je["bytes"].get<double>() == want.bytes);
    CHECK(je["seconds"].get<double>() == want.seconds);
    found_all_reduce =
        found_all_reduce ||
        (je["tensor"] == "h" && je["from"] == "mm" && je["to"] == "act" && je["axis"] == "c0" &&
         je["collective"] == "all_reduce" && je["phase"] == "forward" && je["reason"] == "layout");
  }
  CHECK(found_all_reduce);

  const Json& s = j["summary"];
  CHECK(s["step_time_s"].get<double>() == ev.summary.step_time_s);
  CHECK(s["compute_s"].get<double>() == ev.summary.compute_s);
  CHECK(s["communication_s"].get<double>() == ev.summary.communication_s);
  CHECK(s["memory_per_device_bytes"].get<double>() == ev.summary.memory_per_device_bytes);
  CHECK(s["parameter_bytes"].get<double>() == ev.summary.parameter_bytes);
  CHECK(s["activation_bytes"].get<double>() == ev.summary.activation_bytes);
  CHECK(s["search_time_s"].get<double>() == 0.125);

  // Read back: the same plan; written again: the same bytes.
  const plan::Plan back = f.parse(text);
  CHECK(back.cuts == p.cuts);
  CHECK(back.mode == p.mode);
  CHECK(back.graph_name == p.graph_name);
  CHECK(back.algorithm == "file");
  plan::Evaluation ev2 = plan::evaluate(f.g, f.spaces, f.cluster, back, CostParams{});
  ev2.summary.search_time_s = 0.125;
  CHECK(io::plan_to_json(f.g, f.spaces, f.cluster, back, ev2) == text);
  CHECK(io::plan_mesh_sizes(text, kFile) == std::vector<std::int64_t>{2, 2, 2});

  // Compact output is the same document.
  CHECK(Json::parse(io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, -1)) == j);
}

TEST_CASE("summary detail: redistributions totalled, null cuts left out, the same plan read back") {
  const Fixture f;
  const plan::Plan p = f.parse(plan_text(
      R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "k"}, {"axis": "c1", "dim": "i"}, {"axis": "c2", "dim": "j"}]},
          {"name": "act", "cuts": [{"axis": "c1", "dim": "d0"}]}])"));
  const plan::Evaluation ev = plan::evaluate(f.g, f.spaces, f.cluster, p, CostParams{});
  REQUIRE(!ev.events.empty());
  const std::string full = io::plan_to_json(f.g, f.spaces, f.cluster, p, ev);
  // Auto is full on a small graph.
  CHECK(io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, 2, io::PlanDetail::Auto) == full);
  const std::string text =
      io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, 2, io::PlanDetail::Summary);
  const Json j = Json::parse(text);
  CHECK(j["detail"] == "summary");
  CHECK(!j.contains("redistributions"));
  CHECK(j["operators"][1]["cuts"] == Json::parse(R"({"c1": "d0"})"));
  for (const Json& t : j["tensors"]) CHECK((!t.contains("partial") || !t["partial"].empty()));
  // The named-mesh restatements are full detail's only; the rest of each
  // record is as in the full file.
  const Json whole = Json::parse(full);
  REQUIRE(j["tensors"].size() == whole["tensors"].size());
  for (std::size_t i = 0; i < j["tensors"].size(); ++i) {
    Json t = whole["tensors"][i];
    t.erase("mesh_sharding");
    t.erase("mesh_partial");
    if (t["partial"].empty()) t.erase("partial");
    CHECK(j["tensors"][i] == t);
  }
  for (std::size_t i = 0; i < j["operators"].size(); ++i) {
    CHECK(!j["operators"][i].contains("mesh_split"));
    CHECK(whole["operators"][i].contains("mesh_split"));
    CHECK(j["operators"][i]["strategy"] == whole["operators"][i]["strategy"]);
  }
  std::int64_t events = 0;
  double bytes = 0;
  for (const Json& k : j["redistribution_summary"]) {
    events += k["events"].get<std::int64_t>();
    bytes += k["bytes"].get<double>();
  }
  double want_bytes = 0;
  for (const plan::CommEvent& e : ev.events) want_bytes += e.bytes;
  CHECK(events == static_cast<std::int64_t>(ev.events.size()));
  CHECK(bytes == doctest::Approx(want_bytes));
  REQUIRE(!j["heaviest_redistributions"].empty());
  double heaviest = 0;
  for (const plan::CommEvent& e : ev.events) heaviest = std::max(heaviest, e.seconds);
  CHECK(j["heaviest_redistributions"][0]["seconds"].get<double>() == heaviest);
  // Read back: the same cuts, hence the same evaluation and full file.
  const plan::Plan back = f.parse(text);
  CHECK(back.cuts == p.cuts);
  const plan::Evaluation ev2 = plan::evaluate(f.g, f.spaces, f.cluster, back, CostParams{});
  plan::Plan renamed = back;
  renamed.algorithm = p.algorithm;
  CHECK(io::plan_to_json(f.g, f.spaces, f.cluster, renamed, ev2) == full);
  CHECK(io::parse_plan_detail("summary") == io::PlanDetail::Summary);
  CHECK(!io::parse_plan_detail("verbose"));
}

TEST_CASE("write_plan_file streams the same text as plan_to_json") {
  const Fixture f;
  const plan::Plan p = f.parse(plan_text(R"([{"name": "mm", "strategy": [[2, 1], [1, 4]]}])"));
  const plan::Evaluation ev = plan::evaluate(f.g, f.spaces, f.cluster, p, CostParams{});
  const auto dir = std::filesystem::temp_directory_path() /
                   ("recsearch_plan_io_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  for (const io::PlanDetail d : {io::PlanDetail::Full, io::PlanDetail::Summary}) {
    io::write_plan_file(path, f.g, f.spaces, f.cluster, p, ev, d);
    CHECK(io::read_text_file(path) == io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, 2, d));
    io::write_plan_file(path, f.g, f.spaces, f.cluster, p, ev, d, -1);
    CHECK(io::read_text_file(path) ==
          io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, -1, d) + "\n");
  }
  expect_error(
      [&] {
        io::write_plan_file((dir / "no" / "plan.json").string(), f.g, f.spaces, f.cluster, p, ev);
      },
      Errc::kIo, "", (dir / "no" / "plan.json").string());
  std::filesystem::remove_all(dir);
}

TEST_CASE("every truncation of a plan file is an Error") {
  const Fixture f;
  const std::string text = plan_text(
      R"([{"name": "mm", "strategy": [[2, 1], [1, 4]]}, {"name": "act", "cuts": [{"axis": "c0", "dim": "d0"}]}])");
  (void)f.parse(text);
  for (std::size_t n = 0; n < text.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS((void)f.parse(text.substr(0, n)), Error);
    CHECK_THROWS_AS((void)io::plan_mesh_sizes(std::string_view(text).substr(0, n), kFile), Error);
  }
}

TEST_CASE("every single-byte corruption of a written plan parses or is an Error") {
  const Fixture f;
  const plan::Plan p = f.parse(plan_text(
      R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "k"}, {"axis": "c2", "dim": "j"}]}])"));
  const plan::Evaluation ev = plan::evaluate(f.g, f.spaces, f.cluster, p, CostParams{});
  const std::string text = io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, -1);
  const char replacements[] = {'"', '}', ']', '{', '[', ',', ':', '1', 'x', '\\', '\0'};
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (const char r : replacements) {
      std::string bad = text;
      bad[i] = r;
      try {
        (void)f.parse(bad);
      } catch (const Error& e) {
        CHECK(e.file() == kFile);
      }
      try {
        (void)io::plan_mesh_sizes(bad, kFile);
      } catch (const Error& e) {
        CHECK(e.file() == kFile);
      }
    }
  }
}

TEST_CASE("plan_mesh_sizes") {
  CHECK(io::plan_mesh_sizes(plan_text("[]"), kFile) == std::vector<std::int64_t>{2, 2, 2});
  CHECK(io::plan_mesh_sizes(plan_text("[]", ""), kFile).empty());
  CHECK(io::plan_mesh_sizes(plan_text("[]", R"("mesh": {"devices": 12}, )"), kFile) ==
        std::vector<std::int64_t>{12});
  expect_error(
      [] {
        (void)io::plan_mesh_sizes(
            plan_text("[]", R"("mesh": {"axes": [{"size": 2}], "devices": 4}, )"), kFile);
      },
      Errc::kPlan, "/mesh/devices", kFile);
  expect_error(
      [] {
        (void)io::plan_mesh_sizes(
            plan_text("[]", R"("mesh": {"axes": [{"size": 2}, {"size": 0}]}, )"), kFile);
      },
      Errc::kSchema, "/mesh/axes/1/size", kFile);
  expect_error(
      [] {
        (void)io::plan_mesh_sizes(
            plan_text("[]", R"("mesh": {"axes": [{"size": 65536}, {"size": 65536}]}, )"), kFile);
      },
      Errc::kPlan, "/mesh/axes/1", kFile);
  expect_error(
      [] { (void)io::plan_mesh_sizes(R"({"format": "recsearch.cluster", "version": 1})", kFile); },
      Errc::kSchema, "/format", kFile);
}

TEST_CASE("plan_cluster and plan_mesh_sizes read the head; parse_plan checks the rest") {
  const Fixture f;
  const std::string cluster =
      R"("cluster": {"format": "recsearch.cluster", "version": 1, "name": "test",
                     "levels": [{"name": "node", "size": 2, "bandwidth_GBps": 50, "latency_us": 5},
                                {"name": "gpu", "size": 4, "bandwidth_GBps": 450, "latency_us": 2}]}, )";
  // An operator entry with a missing separator, after the head.
  const std::string broken = plan_text(R"([{"name": "mm" "cuts": null}])", kMesh + ", " + cluster);
  const auto saved = io::plan_cluster(broken, kFile);
  REQUIRE(saved.has_value());
  CHECK(saved->num_devices() == 8);
  CHECK(io::plan_mesh_sizes(broken, kFile) == std::vector<std::int64_t>{2, 2, 2});
  expect_error([&] { (void)f.parse(broken); }, Errc::kParse, "", kFile);
  // Without a cluster the head is not complete before the end: the whole
  // file is read, and its error reported.
  expect_error(
      [&] { (void)io::plan_cluster(plan_text(R"([{"name": "mm" "cuts": null}])"), kFile); },
      Errc::kParse, "", kFile);
}

TEST_CASE("sample graphs: a replicated plan writes and reads back") {
  const Cluster cluster = Cluster::mesh({2, 4});
  testing::for_each_sample_graph([&](const std::string& file, const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces) {
    CAPTURE(file);
    // No operators listed: pinned strategies or replicated.
    const std::string empty = R"({"format": "recsearch.plan", "version": 1, "operators": []})";
    const plan::Plan p = io::parse_plan(empty, "empty.json", g, spaces, cluster.cuts());
    const plan::Evaluation ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
    const std::string text = io::plan_to_json(g, spaces, cluster, p, ev);
    const plan::Plan back = io::parse_plan(text, "back.json", g, spaces, cluster.cuts());
    CHECK(back.cuts == p.cuts);
  });
}

TEST_CASE("per-operator recomputation and graph pins round-trip through the plan file") {
  const Fixture f(R"(, "recompute": "full")");
  const plan::Plan p = f.parse(
      plan_text("[]", kMesh + R"(, "training": {"recompute_ops": {"act": "selective"}}, )"));
  REQUIRE(p.training.per_op.size() == 2);
  // The pin of mm is its value whether or not the file names it.
  CHECK(p.training.per_op[0] == plan::Recompute::Full);
  CHECK(p.training.per_op[1] == plan::Recompute::Selective);
  CHECK(plan::operator_recompute(f.g, p.training) == p.training.per_op);
  const auto ev = plan::evaluate(f.g, f.spaces, f.cluster, p, {});
  const std::string text = io::plan_to_json(f.g, f.spaces, f.cluster, p, ev, 2);
  const Json j = Json::parse(text);
  CHECK(j["training"]["recompute_ops"] == Json{{"mm", "full"}, {"act", "selective"}});
  CHECK(f.parse(text).training == p.training);
  // A file contradicting the graph's pin is an error at the entry.
  expect_error(
      [&] {
        (void)f.parse(
            plan_text("[]", kMesh + R"(, "training": {"recompute_ops": {"mm": "none"}}, )"));
      },
      Errc::kSchema, "/training/recompute_ops/mm", kFile);
  // Without pins or per-operator values the file names none.
  const Fixture plain;
  const plan::Plan q = plain.parse(plan_text("[]"));
  CHECK(q.training.per_op.empty());
  const auto qev = plan::evaluate(plain.g, plain.spaces, plain.cluster, q, {});
  CHECK_FALSE(
      Json::parse(io::plan_to_json(plain.g, plain.spaces, plain.cluster, q, qev, 2))["training"]
          .contains("recompute_ops"));
}

namespace {

// mm cut on i (c0) and j (c2): w's rows are i-free, so w is replicated on
// c0 and sharded on c2; its ZeRO axes are [c0].
std::string zero_plan_text(const std::string& training) {
  return plan_text(
      R"([{"name": "mm", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c2", "dim": "j"}]}])",
      kMesh + R"(, "training": )" + training + ", ");
}

}  // namespace

TEST_CASE("zero_axes: read back, checked against the cuts, errors name the entry") {
  const Fixture f;
  const plan::Plan p = f.parse(zero_plan_text(R"({"zero_stage": 2, "zero_axes": {"w": ["c0"]}})"));
  CHECK(p.training.zero_stage == 2);
  const plan::ZeroAxes z = plan::zero_axes(f.g, f.spaces, p);
  const auto w = *f.g.find_tensor("w");
  CHECK(std::vector<std::uint32_t>(z.of(w).begin(), z.of(w).end()) ==
        std::vector<std::uint32_t>{0});
  // Written back the same way, and a plan without the field (an older
  // file) reads as the same plan.
  const auto ev = plan::evaluate(f.g, f.spaces, f.cluster, p, {});
  const Json j = Json::parse(io::plan_to_json(f.g, f.spaces, f.cluster, p, ev));
  CHECK(j["training"]["zero_axes"] == Json{{"w", {"c0"}}});
  CHECK(f.parse(zero_plan_text(R"({"zero_stage": 2})")).cuts == p.cuts);
  // Stage 0 lists nothing; an entry that matches the cuts is still accepted.
  const plan::Plan q = f.parse(zero_plan_text(R"({"zero_stage": 0, "zero_axes": {"w": ["c0"]}})"));
  const auto qev = plan::evaluate(f.g, f.spaces, f.cluster, q, {});
  CHECK_FALSE(Json::parse(io::plan_to_json(f.g, f.spaces, f.cluster, q, qev))["training"].contains(
      "zero_axes"));

  struct Case {
    std::string name;
    std::string training;
    Errc code;
    std::string path;
  };
  const std::vector<Case> cases = {
      {"not an object", R"({"zero_stage": 2, "zero_axes": [["c0"]]})", Errc::kSchema,
       "/training/zero_axes"},
      {"unknown tensor", R"({"zero_stage": 2, "zero_axes": {"w": ["c0"], "nope": ["c0"]}})",
       Errc::kUnknownName, "/training/zero_axes/nope"},
      {"not a parameter", R"({"zero_stage": 2, "zero_axes": {"x": ["c0"]}})", Errc::kSchema,
       "/training/zero_axes/x"},
      {"axes not an array", R"({"zero_stage": 2, "zero_axes": {"w": "c0"}})", Errc::kSchema,
       "/training/zero_axes/w"},
      {"axis not a string", R"({"zero_stage": 2, "zero_axes": {"w": [0]}})", Errc::kSchema,
       "/training/zero_axes/w/0"},
      {"unknown axis", R"({"zero_stage": 2, "zero_axes": {"w": ["c0", "c9"]}})", Errc::kUnknownName,
       "/training/zero_axes/w/1"},
      {"other axes", R"({"zero_stage": 2, "zero_axes": {"w": ["c1"]}})", Errc::kPlan,
       "/training/zero_axes/w"},
      {"an axis the parameter is sharded on",
       R"({"zero_stage": 2, "zero_axes": {"w": ["c0", "c2"]}})", Errc::kPlan,
       "/training/zero_axes/w"},
      {"parameter left out", R"({"zero_stage": 3, "zero_axes": {}})", Errc::kPlan,
       "/training/zero_axes"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    expect_error([&] { (void)f.parse(zero_plan_text(c.training)); }, c.code, c.path, kFile);
  }
  // A mismatch names the axes the cuts give.
  const std::string detail = expect_error(
      [&] { (void)f.parse(zero_plan_text(R"({"zero_stage": 2, "zero_axes": {"w": ["c1"]}})")); },
      Errc::kPlan, "/training/zero_axes/w", kFile);
  CHECK(detail.find("[c1]") != std::string::npos);
  CHECK(detail.find("give [c0]") != std::string::npos);
  // The file's own axis names are the ones read and named.
  const std::string renamed =
      R"("mesh": {"axes": [{"name": "dp", "size": 2}, {"name": "x", "size": 2}, {"name": "y", "size": 2}]}, )";
  const std::string ops =
      R"([{"name": "mm", "cuts": [{"axis": "dp", "dim": "i"}, {"axis": "y", "dim": "j"}]}])";
  CHECK(
      f.parse(plan_text(ops,
                        renamed + R"("training": {"zero_stage": 1, "zero_axes": {"w": ["dp"]}}, )"))
          .training.zero_stage == 1);
  const std::string named = expect_error(
      [&] {
        (void)f.parse(plan_text(
            ops, renamed + R"("training": {"zero_stage": 1, "zero_axes": {"w": ["x"]}}, )"));
      },
      Errc::kPlan, "/training/zero_axes/w", kFile);
  CHECK(named.find("give [dp]") != std::string::npos);
}

TEST_CASE("zero_axes of a searched GPT: the axes its cuts give, and a round trip keeps the cost") {
  const ir::Graph g = gen::build_graph(testing::small_gpt(2));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = Cluster::mesh({2, 4});
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    search::SearchOptions o;
    o.training.zero_stage = stage;
    const search::SearchResult res = search::run(g, spaces, c, o);
    const plan::Plan& p = res.plan;
    REQUIRE(p.mode == Mode::Train);
    REQUIRE(p.training.zero_stage == stage);
    const auto ev = plan::evaluate(g, spaces, c, p, o.cost, plan::EvalDetail::Full);
    // Independently: a parameter's ZeRO axes are those of more than one
    // device on which its first consumer is cut but its (held) sharding
    // from the evaluation does not split it.
    Json expected = Json::object();
    std::size_t listed = 0;
    std::vector<bool> seen(g.num_tensors(), false);
    const std::vector<int> zero = plan::parameter_zero(g, p.training);
    for (ir::OpId op = 0; op < g.num_operators(); ++op) {
      for (const ir::TensorId t : g.op(op).inputs) {
        if (g.tensor(t).kind != ir::TensorKind::Parameter || seen[t]) continue;
        seen[t] = true;
        Json axes = Json::array();
        for (std::uint32_t a = 0; a < p.mesh.size(); ++a) {
          if (p.mesh[a].size == 1 || p.cuts[op][a] == plan::kReplicated) continue;
          bool sharded = false;
          for (const auto& dim : ev.tensors[t].dims)
            sharded = sharded || std::find(dim.begin(), dim.end(), a) != dim.end();
          if (!sharded) axes.push_back(p.mesh[a].axis);
        }
        if (!axes.empty() && zero[t] > 0) expected[g.tensor(t).name] = axes;
      }
    }
    listed = expected.size();
    CHECK(listed > 0);
    for (const io::PlanDetail detail : {io::PlanDetail::Full, io::PlanDetail::Summary}) {
      const std::string text = io::plan_to_json(g, spaces, c, p, ev, 2, detail);
      const Json j = Json::parse(text);
      REQUIRE(j["training"].contains("zero_axes"));
      CHECK(Json(j["training"]["zero_axes"]) == expected);
      const plan::Plan back = io::parse_plan(text, "gpt.json", g, spaces, c.cuts());
      CHECK(back.cuts == p.cuts);
      CHECK(back.training == p.training);
      const auto again = plan::evaluate(g, spaces, c, back, o.cost);
      CHECK(again.summary.step_time_s == ev.summary.step_time_s);
      CHECK(again.summary.memory_per_device_bytes == ev.summary.memory_per_device_bytes);
      CHECK(again.summary.communication_s == ev.summary.communication_s);
    }
  }
}

TEST_CASE("LayoutWriter::object_field prints what field() prints for the whole object") {
  using OrderedJson = nlohmann::ordered_json;
  OrderedJson head;
  head["recompute"] = "full";
  head["zero_stage"] = 2;
  head["list"] = OrderedJson::array({1, 2.5, "a\"b"});
  head["nested"] = OrderedJson::object({{"k", OrderedJson::array({"x"})}});
  // The tail as a value, for field(), and as a printer, for object_field.
  OrderedJson tail = OrderedJson::object();
  tail["w\u00e9"] = OrderedJson::array({"c0", "c3"});
  tail["v"] = OrderedJson::array();
  // dump() writes the name's UTF-8 as is.
  const std::function<void(std::string&, bool)> print = [](std::string& out, bool spaced) {
    out += spaced ? "{\"w\u00e9\": [\"c0\", \"c3\"], \"v\": []}"
                  : "{\"w\u00e9\":[\"c0\",\"c3\"],\"v\":[]}";
  };
  for (const int indent : {2, 4, -1}) {
    CAPTURE(indent);
    OrderedJson whole = head;
    whole["zero_axes"] = tail;
    io::detail::LayoutWriter expected(indent);
    expected.field("first", 1);
    expected.field("training", whole);
    expected.field("last", "z");
    io::detail::LayoutWriter got(indent);
    got.field("first", 1);
    got.object_field("training", head, "zero_axes", &print);
    got.field("last", "z");
    CHECK(got.finish() == expected.finish());
    // No tail: field() of the head alone.
    io::detail::LayoutWriter plain(indent);
    plain.field("training", head);
    io::detail::LayoutWriter no_tail(indent);
    no_tail.object_field("training", head, "zero_axes", nullptr);
    CHECK(no_tail.finish() == plain.finish());
  }
}
