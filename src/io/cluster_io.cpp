// SPDX-License-Identifier: Apache-2.0
// The cluster file (docs/design.md, Cluster file): JSON -> Cluster and back.
//
// Field-level checks (types, signs) are done here so that they point at the
// offending field; the Cluster constructor then checks the whole (device
// count, duplicate level names) and its errors are attributed to the file.
// A key the format does not define is most likely a misspelt one whose
// default would silently take its place: it gets a warning (or, strict, an
// error) with its path and the nearest defined key.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <span>
#include <utility>

#include "io/cluster_json.hpp"
#include "io/json_util.hpp"
#include "io/suggest.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::io {

namespace {

using detail::child;
using detail::Json;
using detail::OrderedJson;
using detail::Reader;

// The keys each object of the format defines.
constexpr std::array<std::string_view, 6> kRootKeys = {"format", "version", "name",
                                                       "levels", "device",  "cost"};
constexpr std::array<std::string_view, 4> kLevelKeys = {"name", "size", "bandwidth_GBps",
                                                        "latency_us"};
constexpr std::array<std::string_view, 4> kDeviceKeys = {"peak_TFLOPs", "peak_TFLOPs_by_dtype",
                                                         "memory_GiB", "memory_bandwidth_GBps"};
// The keys of "peak_TFLOPs_by_dtype": "bf16" and "f16" are one peak, the
// scalar "peak_TFLOPs".
constexpr std::array<std::string_view, 6> kPeakKeys = {"f64", "f32", "tf32", "bf16", "f16", "f8"};

// Reports every key of `obj` (at path `at`) that is not in `known`, in file
// order, as `unknown` says.
void check_keys(const Reader& r, const Json& obj, const std::string& at,
                std::span<const std::string_view> known, const UnknownKeys& unknown) {
  if (!unknown.strict && unknown.warnings == nullptr) return;
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string path = child(at, key);
    const std::string hint = detail::did_you_mean(key, known);
    if (unknown.strict) r.fail(Errc::kSchema, "unknown key '" + key + "'" + hint, path);
    unknown.warnings->push_back(r.source() + ": " + path + ": unknown key '" + key + "', ignored" +
                                hint);
  }
}

// A number that must be finite and > 0 (or >= 0 when zero is allowed).
double read_magnitude(const Reader& r, const Json& obj, std::string_view key, const std::string& at,
                      double def, bool zero_ok) {
  const Json* v = r.find(obj, key);
  if (v == nullptr) return def;
  const std::string path = child(at, key);
  const double x = r.number(*v, path);  // wrong type: kSchema; JSON has no NaN or Inf
  if (x < 0 || (x == 0 && !zero_ok)) {
    r.fail(
        Errc::kCluster,
        std::string(zero_ok ? "must not be negative" : "must be positive") + ", got " + v->dump(),
        path);
  }
  return x;
}

// One entry of "levels", at path `at`.
Level read_level(const Reader& r, const Json& j, const std::string& at,
                 const UnknownKeys& unknown) {
  const Json& l = r.object(j, at);
  check_keys(r, l, at, kLevelKeys, unknown);
  Level level;
  level.name = r.nonempty_string(r.require(l, "name", at), child(at, "name"));
  const std::string size_at = child(at, "size");
  level.size = r.integer(r.require(l, "size", at), size_at);
  if (level.size < 1) {
    r.fail(Errc::kCluster, "level size must be at least 1, got " + std::to_string(level.size),
           size_at);
  }
  level.bandwidth_GBps = read_magnitude(r, l, "bandwidth_GBps", at, level.bandwidth_GBps, false);
  level.latency_us = read_magnitude(r, l, "latency_us", at, level.latency_us, true);
  return level;
}

// "peak_TFLOPs_by_dtype" into `device`: the 16-bit entry ("bf16" or "f16")
// is the scalar peak and must agree with "peak_TFLOPs" where both are given.
void read_peaks(const Reader& r, const Json& d, DeviceSpec& device, const UnknownKeys& unknown) {
  const Json* by = r.find(d, "peak_TFLOPs_by_dtype");
  if (by == nullptr) return;
  const std::string at = "/device/peak_TFLOPs_by_dtype";
  r.expect_object(*by, at);
  check_keys(r, *by, at, kPeakKeys, unknown);
  device.peak_f64_TFLOPs = read_magnitude(r, *by, "f64", at, 0, false);
  device.peak_f32_TFLOPs = read_magnitude(r, *by, "f32", at, 0, false);
  device.peak_tf32_TFLOPs = read_magnitude(r, *by, "tf32", at, 0, false);
  device.peak_f8_TFLOPs = read_magnitude(r, *by, "f8", at, 0, false);
  const bool scalar = r.find(d, "peak_TFLOPs") != nullptr;
  for (const char* key : {"bf16", "f16"}) {
    if (r.find(*by, key) == nullptr) continue;
    const double x = read_magnitude(r, *by, key, at, 0, false);
    if (scalar && x != device.peak_TFLOPs) {
      r.fail(Errc::kCluster,
             std::string("the ") + key + " peak is peak_TFLOPs, which says " +
                 r.find(d, "peak_TFLOPs")->dump(),
             child(at, key));
    }
    device.peak_TFLOPs = x;
  }
}

// The "device" object.
DeviceSpec read_device(const Reader& r, const Json& d, const UnknownKeys& unknown) {
  DeviceSpec device;
  r.expect_object(d, "/device");
  check_keys(r, d, "/device", kDeviceKeys, unknown);
  device.peak_TFLOPs = read_magnitude(r, d, "peak_TFLOPs", "/device", device.peak_TFLOPs, false);
  read_peaks(r, d, device, unknown);
  device.memory_GiB = read_magnitude(r, d, "memory_GiB", "/device", device.memory_GiB, false);
  device.memory_bandwidth_GBps =
      read_magnitude(r, d, "memory_bandwidth_GBps", "/device", device.memory_bandwidth_GBps, false);
  return device;
}

}  // namespace

namespace detail {

Cluster read_cluster(const Reader& r, const Json& root, CostParams* cost,
                     const UnknownKeys& unknown) {
  r.check_format(root, "recsearch.cluster");
  check_keys(r, root, "", kRootKeys, unknown);
  std::string name;
  if (const Json* n = r.find(root, "name")) name = r.string(*n, "/name");

  const Json& levels_json = r.array(r.require(root, "levels", ""), "/levels");
  if (levels_json.empty()) r.fail(Errc::kCluster, "a cluster needs at least one level", "/levels");
  std::vector<Level> levels;
  levels.reserve(levels_json.size());
  for (std::size_t i = 0; i < levels_json.size(); ++i) {
    levels.push_back(read_level(r, levels_json[i], child("/levels", i), unknown));
  }

  DeviceSpec device;
  if (const Json* d = r.find(root, "device")) device = read_device(r, *d, unknown);
  if (const Json* c = r.find(root, "cost")) {
    // Checked even when the caller does not want the values: a misspelt
    // coefficient must not pass `validate` silently.
    CostParams scratch;
    detail::read_cost_params(r, *c, "/cost", cost != nullptr ? *cost : scratch);
  }
  try {
    return Cluster(std::move(name), std::move(levels), device);
  } catch (const Error& e) {
    r.rethrow(e);
  }
}

OrderedJson cluster_json(const Cluster& c) {
  OrderedJson j;
  j["format"] = "recsearch.cluster";
  j["version"] = 1;
  j["name"] = c.name();
  OrderedJson levels = OrderedJson::array();
  for (const Level& l : c.levels()) {
    OrderedJson jl;
    jl["name"] = l.name;
    jl["size"] = l.size;
    jl["bandwidth_GBps"] = detail::number_json(l.bandwidth_GBps);
    jl["latency_us"] = detail::number_json(l.latency_us);
    levels.push_back(std::move(jl));
  }
  j["levels"] = std::move(levels);
  OrderedJson device;
  const DeviceSpec& dev = c.device();
  device["peak_TFLOPs"] = detail::number_json(dev.peak_TFLOPs);
  // Only the peaks given (and the scalar among them as "bf16"), so that a
  // one-figure device writes as before.
  const std::pair<const char*, double> given[] = {{"f64", dev.peak_f64_TFLOPs},
                                                  {"f32", dev.peak_f32_TFLOPs},
                                                  {"tf32", dev.peak_tf32_TFLOPs},
                                                  {"bf16", 0},
                                                  {"f8", dev.peak_f8_TFLOPs}};
  if (std::any_of(std::begin(given), std::end(given), [](const auto& g) { return g.second > 0; })) {
    OrderedJson peaks;
    for (const auto& [key, peak] : given) {
      if (std::string_view(key) == "bf16") peaks[key] = detail::number_json(dev.peak_TFLOPs);
      if (peak > 0) peaks[key] = detail::number_json(peak);
    }
    device["peak_TFLOPs_by_dtype"] = std::move(peaks);
  }
  device["memory_GiB"] = detail::number_json(c.device().memory_GiB);
  device["memory_bandwidth_GBps"] = detail::number_json(c.device().memory_bandwidth_GBps);
  j["device"] = std::move(device);
  return j;
}

}  // namespace detail

Cluster parse_cluster(std::string_view text, const std::string& source, CostParams* cost,
                      const UnknownKeys& unknown) {
  const Json root = detail::parse_json(text, source);
  return detail::read_cluster(Reader(source), root, cost, unknown);
}

Cluster read_cluster_file(const std::string& path, CostParams* cost) {
  return parse_cluster(read_text_file(path), path, cost);
}

std::string cluster_to_json(const Cluster& c) {
  // The levels one per line, the other fields as LayoutWriter spreads them.
  detail::LayoutWriter w(2);
  const OrderedJson j = detail::cluster_json(c);
  for (const auto& [key, value] : j.items()) {
    if (key != "levels") {
      w.field(key, value);
      continue;
    }
    w.begin_array(key);
    for (const OrderedJson& l : value) w.element(l);
    w.end_array();
  }
  return w.finish();
}

}  // namespace recsearch::io
