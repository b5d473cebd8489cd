// SPDX-License-Identifier: Apache-2.0
// Tests of the cluster file and of cost coefficients in JSON: the sample
// clusters in data/clusters, defaults, round trips, and errors with their
// exact paths.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "recsearch/io/json_io.hpp"
#include "support/errors.hpp"

namespace {

using namespace recsearch;
using recsearch::testing::expect_error;

const std::string kFile = "cluster.json";

std::string data_path(const std::string& rel) {
  const char* dir = std::getenv("RECSEARCH_DATA");
  REQUIRE_MESSAGE(dir != nullptr, "RECSEARCH_DATA is not set (run through meson test)");
  return (std::filesystem::path(dir) / rel).string();
}

std::string cluster_text(const std::string& levels, const std::string& extra = {}) {
  return R"({"format": "recsearch.cluster", "version": 1, "name": "c", "levels": )" + levels +
         extra + "}";
}

const std::string kTwoLevels =
    R"([{"name": "node", "size": 4, "bandwidth_GBps": 50, "latency_us": 5},
        {"name": "gpu", "size": 2, "bandwidth_GBps": 450, "latency_us": 2}])";

void check_same_cluster(const Cluster& a, const Cluster& b) {
  CHECK(a.name() == b.name());
  REQUIRE(a.levels().size() == b.levels().size());
  for (std::size_t i = 0; i < a.levels().size(); ++i) {
    CHECK(a.levels()[i].name == b.levels()[i].name);
    CHECK(a.levels()[i].size == b.levels()[i].size);
    CHECK(a.levels()[i].bandwidth_GBps == b.levels()[i].bandwidth_GBps);
    CHECK(a.levels()[i].latency_us == b.levels()[i].latency_us);
  }
  CHECK(a.device().peak_TFLOPs == b.device().peak_TFLOPs);
  CHECK(a.device().memory_GiB == b.device().memory_GiB);
  CHECK(a.device().memory_bandwidth_GBps == b.device().memory_bandwidth_GBps);
  CHECK(a.num_devices() == b.num_devices());
}

}  // namespace

TEST_CASE("sample cluster: 64 x DGX-H100 is the docs/formats.md example") {
  const Cluster c = io::read_cluster_file(data_path("clusters/dgx_h100_64x8.json"));
  CHECK(c.name() == "64 x DGX-H100");
  REQUIRE(c.levels().size() == 2);
  CHECK(c.levels()[0].name == "node");
  CHECK(c.levels()[0].size == 64);
  CHECK(c.levels()[0].bandwidth_GBps == 50);
  CHECK(c.levels()[0].latency_us == 5);
  CHECK(c.levels()[1].name == "gpu");
  CHECK(c.levels()[1].size == 8);
  CHECK(c.levels()[1].bandwidth_GBps == 450);
  CHECK(c.levels()[1].latency_us == 2);
  CHECK(c.device().peak_TFLOPs == 989);
  CHECK(c.device().memory_GiB == 80);
  CHECK(c.num_devices() == 512);
  CHECK(c.cuts().size() == 9);
}

TEST_CASE("sample cluster: one DGX-H100") {
  const Cluster c = io::read_cluster_file(data_path("clusters/dgx_h100_8.json"));
  REQUIRE(c.levels().size() == 1);
  CHECK(c.levels()[0].name == "gpu");
  CHECK(c.levels()[0].size == 8);
  CHECK(c.levels()[0].bandwidth_GBps == 450);
  CHECK(c.levels()[0].latency_us == 2);
  CHECK(c.device().peak_TFLOPs == 989);
  CHECK(c.device().memory_GiB == 80);
  CHECK(c.num_devices() == 8);
}

TEST_CASE("cluster defaults and round trip") {
  const Cluster c = io::parse_cluster(
      cluster_text(
          R"([{"name": "rack", "size": 3}, {"name": "gpu", "size": 4, "bandwidth_GBps": 0.5, "latency_us": 0}])",
          R"(, "device": {"memory_GiB": 24.5}, "extra": "ignored")"),
      kFile);
  CHECK(c.levels()[0].bandwidth_GBps == Level{}.bandwidth_GBps);
  CHECK(c.levels()[0].latency_us == Level{}.latency_us);
  CHECK(c.levels()[1].bandwidth_GBps == 0.5);
  CHECK(c.levels()[1].latency_us == 0);
  CHECK(c.device().peak_TFLOPs == DeviceSpec{}.peak_TFLOPs);
  CHECK(c.device().memory_GiB == 24.5);
  CHECK(c.device().memory_bandwidth_GBps == DeviceSpec{}.memory_bandwidth_GBps);
  CHECK(c.num_devices() == 12);

  const std::string text = io::cluster_to_json(c);
  const Cluster back = io::parse_cluster(text, "back.json");
  check_same_cluster(c, back);
  CHECK(io::cluster_to_json(back) == text);

  const Cluster m = Cluster::mesh({64, 8});
  check_same_cluster(m, io::parse_cluster(io::cluster_to_json(m), "mesh.json"));
  const Cluster odd("odd", {Level{"x", 6, 1.0 / 3.0, 0.1}}, DeviceSpec{123.456, 7.25, 1e-3});
  check_same_cluster(odd, io::parse_cluster(io::cluster_to_json(odd), "odd.json"));
}

TEST_CASE("peaks per dtype: read, fallen back to the scalar, written back") {
  const Cluster c = io::parse_cluster(
      cluster_text(
          kTwoLevels,
          R"(, "device": {"peak_TFLOPs_by_dtype": {"f32": 67, "tf32": 494.7, "bf16": 989}})"),
      kFile, nullptr, io::UnknownKeys{.strict = true});
  CHECK(c.device().peak_TFLOPs == 989);  // the bf16 entry is the scalar
  CHECK(c.device().peak_TFLOPs_of(Precision::F32) == 67);
  CHECK(c.device().peak_TFLOPs_of(Precision::TF32) == 494.7);
  CHECK(c.device().peak_TFLOPs_of(Precision::F64) == 989);  // not given: the scalar
  CHECK(c.device().peak_TFLOPs_of(Precision::F8) == 989);
  const std::string text = io::cluster_to_json(c);
  CHECK(text.find(R"("peak_TFLOPs_by_dtype": {"f32": 67, "tf32": 494.7, "bf16": 989})") !=
        std::string::npos);
  const Cluster back = io::parse_cluster(text, "back.json");
  check_same_cluster(c, back);
  CHECK(back.device().peak_f32_TFLOPs == 67);
  CHECK(back.device().peak_tf32_TFLOPs == 494.7);
  CHECK(back.device().peak_f64_TFLOPs == 0);
  // One figure writes as before: no per-dtype object.
  CHECK(io::cluster_to_json(Cluster::flat(2)).find("by_dtype") == std::string::npos);
  // "f16" is the same peak as "bf16".
  CHECK(
      io::parse_cluster(
          cluster_text(kTwoLevels, R"(, "device": {"peak_TFLOPs_by_dtype": {"f16": 312}})"), kFile)
          .device()
          .peak_TFLOPs == 312);
  for (const char* sample : {"clusters/dgx_h100_8.json", "clusters/dgx_a100_4x8.json"}) {
    const Cluster s = io::read_cluster_file(data_path(sample));
    CHECK(s.device().peak_f32_TFLOPs > 0);
    CHECK(s.device().peak_f32_TFLOPs < s.device().peak_tf32_TFLOPs);
    CHECK(s.device().peak_tf32_TFLOPs * 2 == doctest::Approx(s.device().peak_TFLOPs).epsilon(0.01));
  }

  expect_error(
      [&] {
        (void)io::parse_cluster(
            cluster_text(
                kTwoLevels,
                R"(, "device": {"peak_TFLOPs": 989, "peak_TFLOPs_by_dtype": {"bf16": 312}})"),
            kFile);
      },
      Errc::kCluster, "/device/peak_TFLOPs_by_dtype/bf16", kFile);
  expect_error(
      [&] {
        (void)io::parse_cluster(
            cluster_text(kTwoLevels, R"(, "device": {"peak_TFLOPs_by_dtype": {"f32": -1}})"),
            kFile);
      },
      Errc::kCluster, "/device/peak_TFLOPs_by_dtype/f32", kFile);
  expect_error(
      [&] {
        (void)io::parse_cluster(
            cluster_text(kTwoLevels, R"(, "device": {"peak_TFLOPs_by_dtype": {"fp32": 67}})"),
            kFile, nullptr, io::UnknownKeys{.strict = true});
      },
      Errc::kSchema, "/device/peak_TFLOPs_by_dtype/fp32", kFile);
}

TEST_CASE("a cost object in a cluster file") {
  CostParams p;
  (void)io::parse_cluster(cluster_text(kTwoLevels, R"(, "cost": {"optimizer_bytes_factor": 0})"),
                          kFile, &p);
  CHECK(p.optimizer_bytes_factor == 0);
  expect_error(
      [&] {
        (void)io::parse_cluster(cluster_text(kTwoLevels, R"(, "cost": {"latency": true})"), kFile,
                                &p);
      },
      Errc::kSchema, "/cost/latency", kFile);
}

TEST_CASE("cluster errors name the file and the exact JSON path") {
  struct Case {
    std::string name;
    std::string text;
    Errc code;
    std::string path;
  };
  const std::vector<Case> cases = {
      {"not JSON", "{\"format\"", Errc::kParse, ""},
      {"wrong format", R"({"format": "recsearch.graph", "version": 1, "levels": []})",
       Errc::kSchema, "/format"},
      {"wrong version", R"({"format": "recsearch.cluster", "version": 0, "levels": []})",
       Errc::kSchema, "/version"},
      {"levels missing", R"({"format": "recsearch.cluster", "version": 1})", Errc::kSchema,
       "/levels"},
      {"levels not an array", cluster_text("{}"), Errc::kSchema, "/levels"},
      {"no levels", cluster_text("[]"), Errc::kCluster, "/levels"},
      {"level not an object", cluster_text("[8]"), Errc::kSchema, "/levels/0"},
      {"level name missing", cluster_text(R"([{"size": 8}])"), Errc::kSchema, "/levels/0/name"},
      {"level name empty", cluster_text(R"([{"name": "", "size": 8}])"), Errc::kSchema,
       "/levels/0/name"},
      {"level size missing", cluster_text(R"([{"name": "gpu"}])"), Errc::kSchema, "/levels/0/size"},
      {"level size zero", cluster_text(R"([{"name": "gpu", "size": 0}])"), Errc::kCluster,
       "/levels/0/size"},
      {"level size negative", cluster_text(R"([{"name": "gpu", "size": -8}])"), Errc::kCluster,
       "/levels/0/size"},
      {"level size fractional", cluster_text(R"([{"name": "gpu", "size": 2.5}])"), Errc::kSchema,
       "/levels/0/size"},
      {"level size a string", cluster_text(R"([{"name": "gpu", "size": "8"}])"), Errc::kSchema,
       "/levels/0/size"},
      {"bandwidth zero",
       cluster_text(R"([{"name": "a", "size": 2}, {"name": "b", "size": 2, "bandwidth_GBps": 0}])"),
       Errc::kCluster, "/levels/1/bandwidth_GBps"},
      {"bandwidth negative", cluster_text(R"([{"name": "a", "size": 2, "bandwidth_GBps": -5}])"),
       Errc::kCluster, "/levels/0/bandwidth_GBps"},
      {"bandwidth a string",
       cluster_text(R"([{"name": "a", "size": 2, "bandwidth_GBps": "fast"}])"), Errc::kSchema,
       "/levels/0/bandwidth_GBps"},
      {"bandwidth overflows",
       cluster_text(R"([{"name": "a", "size": 2, "bandwidth_GBps": 1e400}])"), Errc::kParse, ""},
      {"latency negative", cluster_text(R"([{"name": "a", "size": 2, "latency_us": -1}])"),
       Errc::kCluster, "/levels/0/latency_us"},
      {"duplicate level names",
       cluster_text(R"([{"name": "a", "size": 2}, {"name": "a", "size": 2}])"), Errc::kCluster,
       "/levels/1/name"},
      {"too many devices",
       cluster_text(R"([{"name": "a", "size": 65536}, {"name": "b", "size": 65536}])"),
       Errc::kCluster, "/levels/1/size"},
      {"device not an object", cluster_text(kTwoLevels, R"(, "device": 989)"), Errc::kSchema,
       "/device"},
      {"peak zero", cluster_text(kTwoLevels, R"(, "device": {"peak_TFLOPs": 0})"), Errc::kCluster,
       "/device/peak_TFLOPs"},
      {"memory negative", cluster_text(kTwoLevels, R"(, "device": {"memory_GiB": -80})"),
       Errc::kCluster, "/device/memory_GiB"},
      {"memory bandwidth null",
       cluster_text(kTwoLevels, R"(, "device": {"memory_bandwidth_GBps": null})"), Errc::kSchema,
       "/device/memory_bandwidth_GBps"},
      {"name not a string",
       R"({"format": "recsearch.cluster", "version": 1, "name": [], "levels": []})", Errc::kSchema,
       "/name"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CostParams p;
    expect_error([&] { (void)io::parse_cluster(c.text, kFile, &p); }, c.code, c.path, kFile);
  }
}

TEST_CASE("every truncation of a cluster file is an Error") {
  const std::string text = cluster_text(kTwoLevels, R"(, "device": {"peak_TFLOPs": 989})");
  for (std::size_t n = 0; n < text.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS((void)io::parse_cluster(std::string_view(text).substr(0, n), kFile), Error);
  }
  CHECK(io::parse_cluster(text, kFile).num_devices() == 8);
}

TEST_CASE("parse_cost_params") {
  CostParams p;
  io::parse_cost_params(
      R"({"backward_flops_factor": 1, "compute_efficiency": 1, "gradient_bytes_factor": 0.5,
          "optimizer_bytes_factor": 4, "count_latency": false, "bucket_gradients": false,
          "memory_budget_bytes": 17179869184})",
      "cost.json", p);
  CHECK(p.bucket_gradients == false);
  CHECK(p.backward_flops_factor == 1);
  CHECK(p.compute_efficiency == 1);
  CHECK(p.gradient_bytes_factor == 0.5);
  CHECK(p.optimizer_bytes_factor == 4);
  CHECK(p.count_latency == false);
  CHECK(p.memory_budget_bytes == 17179869184.0);

  CostParams q;
  io::parse_cost_params("{}", "cost.json", q);
  CHECK(q.compute_efficiency == CostParams{}.compute_efficiency);

  // An error leaves the output untouched, even for fields before the bad one.
  CostParams r;
  expect_error(
      [&] {
        io::parse_cost_params(R"({"backward_flops_factor": 3, "compute_eff": 1})", "cost.json", r);
      },
      Errc::kSchema, "/compute_eff", "cost.json");
  CHECK(r.backward_flops_factor == CostParams{}.backward_flops_factor);
  expect_error([&] { io::parse_cost_params("[]", "cost.json", r); }, Errc::kSchema, "",
               "cost.json");
  expect_error([&] { io::parse_cost_params("{", "cost.json", r); }, Errc::kParse, "", "cost.json");
  expect_error([&] { io::parse_cost_params(R"({"memory_budget_bytes": -1})", "cost.json", r); },
               Errc::kSchema, "/memory_budget_bytes", "cost.json");
  expect_error([&] { io::parse_cost_params(R"({"compute_efficiency": 1.0001})", "cost.json", r); },
               Errc::kSchema, "/compute_efficiency", "cost.json");
  expect_error([&] { io::parse_cost_params(R"({"count_latency": "yes"})", "cost.json", r); },
               Errc::kSchema, "/count_latency", "cost.json");
  expect_error([&] { io::parse_cost_params(R"({"bucket_gradients": 0})", "cost.json", r); },
               Errc::kSchema, "/bucket_gradients", "cost.json");
}

TEST_CASE("unknown keys: a warning with the path and the nearest key, an error when strict") {
  const std::string text =
      cluster_text(R"([{"name": "gpu", "size": 8, "bandwidth_GBs": 450, "latency_us": 2}])",
                   R"(, "device": {"peak_TFLOPs": 989, "memory_GB": 40}, "colour": "blue")");
  std::vector<std::string> warnings;
  const Cluster c = io::parse_cluster(text, kFile, nullptr, io::UnknownKeys{.warnings = &warnings});
  // The misspelt keys are ignored: their defaults stand, as before.
  CHECK(c.levels()[0].bandwidth_GBps == Level{}.bandwidth_GBps);
  CHECK(c.device().memory_GiB == DeviceSpec{}.memory_GiB);
  REQUIRE(warnings.size() == 3);
  auto has = [&](const std::string& needle) {
    for (const auto& w : warnings)
      if (w.find(needle) != std::string::npos) return true;
    return false;
  };
  CHECK(
      has("cluster.json: /levels/0/bandwidth_GBs: unknown key 'bandwidth_GBs', ignored; "
          "did you mean `bandwidth_GBps`?"));
  CHECK(
      has("cluster.json: /device/memory_GB: unknown key 'memory_GB', ignored; "
          "did you mean `memory_GiB`?"));
  // Nothing near: no suggestion, still a warning.
  CHECK(has("cluster.json: /colour: unknown key 'colour', ignored"));
  CHECK_FALSE(has("/colour: unknown key 'colour', ignored;"));

  // Strict: the first unknown key is an error at its path.
  const std::string level_only =
      cluster_text(R"([{"name": "gpu", "size": 8, "bandwidth_GBs": 450}])");
  const std::string detail = expect_error(
      [&] { (void)io::parse_cluster(level_only, kFile, nullptr, io::UnknownKeys{.strict = true}); },
      Errc::kSchema, "/levels/0/bandwidth_GBs", kFile);
  CHECK(detail == "unknown key 'bandwidth_GBs'; did you mean `bandwidth_GBps`?");
  expect_error(
      [&] {
        (void)io::parse_cluster(cluster_text(kTwoLevels, R"(, "device": {"memory_GB": 40})"), kFile,
                                nullptr, io::UnknownKeys{.strict = true});
      },
      Errc::kSchema, "/device/memory_GB", kFile);

  // By default (no warnings wanted, not strict) the reader stays silent, and
  // a file with only known keys gives no warning at all.
  CHECK_NOTHROW((void)io::parse_cluster(level_only, kFile));
  warnings.clear();
  (void)io::parse_cluster(cluster_text(kTwoLevels, R"(, "device": {"memory_GiB": 40}, "cost": {})"),
                          kFile, nullptr, io::UnknownKeys{.strict = true, .warnings = &warnings});
  CHECK(warnings.empty());
  for (const char* sample : {"clusters/dgx_h100_8.json", "clusters/dgx_h100_64x8.json"}) {
    CHECK_NOTHROW((void)io::parse_cluster(io::read_text_file(data_path(sample)), sample, nullptr,
                                          io::UnknownKeys{.strict = true}));
  }
}
