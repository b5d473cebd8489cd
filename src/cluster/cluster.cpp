// SPDX-License-Identifier: Apache-2.0
// Cluster validation and the cut schedule: each level's size factored into
// primes, outermost (slowest) level first, so that the first cuts — made
// while slices are largest — are the ones that cross the slowest links.
// Within a level the small primes come first: the dims that divide evenly
// (batch, heads: powers of two) are cut first, and the odd factors are
// decided last, once the slices they would save compute on are small.
#include "recsearch/cluster.hpp"

#include <cmath>
#include <set>
#include <utility>

#include "recsearch/error.hpp"

namespace recsearch {
namespace {

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

const char* precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::F64: return "f64";
    case Precision::F32: return "f32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::F8: return "f8";
  }
  return "?";
}

std::vector<std::int64_t> prime_factors(std::int64_t n) {
  std::vector<std::int64_t> f;
  for (std::int64_t p = 2; p * p <= n; ++p)
    while (n % p == 0) {
      f.push_back(p);
      n /= p;
    }
  if (n > 1) f.push_back(n);
  return f;
}

Cluster::Cluster(std::string name, std::vector<Level> levels, DeviceSpec device)
    : name_(std::move(name)), levels_(std::move(levels)), device_(device) {
  if (levels_.empty()) throw Error(Errc::kCluster, "a cluster needs at least one level", "/levels");
  std::set<std::string> names;
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    const Level& l = levels_[i];
    const std::string path = "/levels/" + std::to_string(i);
    if (l.name.empty()) throw Error(Errc::kCluster, "level name must not be empty", path + "/name");
    if (!names.insert(l.name).second)
      throw Error(Errc::kCluster, "duplicate level name '" + l.name + "'", path + "/name");
    if (l.size < 1)
      throw Error(Errc::kCluster, "level size must be at least 1, got " + std::to_string(l.size),
                  path + "/size");
    if (devices_ > kMaxDevices / l.size)
      throw Error(Errc::kCluster,
                  "more than 2^31 devices in all (level sizes multiply past the limit)",
                  path + "/size");
    devices_ *= l.size;
    if (!finite_positive(l.bandwidth_GBps))
      throw Error(Errc::kCluster, "bandwidth must be a positive finite number",
                  path + "/bandwidth_GBps");
    if (!std::isfinite(l.latency_us) || l.latency_us < 0)
      throw Error(Errc::kCluster, "latency must be a finite number >= 0", path + "/latency_us");
  }
  if (!finite_positive(device_.peak_TFLOPs))
    throw Error(Errc::kCluster, "peak must be a positive finite number", "/device/peak_TFLOPs");
  const std::pair<double, Precision> peaks[] = {{device_.peak_f64_TFLOPs, Precision::F64},
                                                {device_.peak_f32_TFLOPs, Precision::F32},
                                                {device_.peak_tf32_TFLOPs, Precision::TF32},
                                                {device_.peak_f8_TFLOPs, Precision::F8}};
  for (const auto& [peak, precision] : peaks) {
    if (!std::isfinite(peak) || peak < 0)
      throw Error(Errc::kCluster, "peak must be a finite number >= 0 (0: not given)",
                  std::string("/device/peak_TFLOPs_by_dtype/") + precision_name(precision));
  }
  if (!finite_positive(device_.memory_GiB))
    throw Error(Errc::kCluster, "memory must be a positive finite number", "/device/memory_GiB");
  if (!finite_positive(device_.memory_bandwidth_GBps))
    throw Error(Errc::kCluster, "memory bandwidth must be a positive finite number",
                "/device/memory_bandwidth_GBps");

  for (std::size_t i = 0; i < levels_.size(); ++i) {
    for (std::int64_t p : prime_factors(levels_[i].size)) {
      Cut c;
      c.axis = "c" + std::to_string(cuts_.size());
      c.size = p;
      c.level = i;
      c.bandwidth_Bps = levels_[i].bandwidth_GBps * 1e9;
      c.latency_s = levels_[i].latency_us * 1e-6;
      cuts_.push_back(std::move(c));
    }
  }
  std::int64_t below = 1;
  for (std::size_t a = cuts_.size(); a-- > 0;) {
    cuts_[a].devices_below = below;
    below *= cuts_[a].size;
  }
}

Cluster Cluster::flat(std::int64_t devices, DeviceSpec device) {
  if (devices < 1 || devices > kMaxDevices)
    throw Error(Errc::kCluster,
                "device count must be between 1 and 2^31, got " + std::to_string(devices));
  return Cluster(std::to_string(devices) + " devices", {Level{"device", devices, 100.0, 5.0}},
                 device);
}

Cluster Cluster::mesh(const std::vector<std::int64_t>& dims, DeviceSpec device) {
  if (dims.empty()) throw Error(Errc::kCluster, "a mesh needs at least one dimension");
  std::vector<Level> levels;
  std::string name = "mesh ";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const bool inner = i + 1 == dims.size();
    levels.push_back(
        Level{"m" + std::to_string(i), dims[i], inner ? 450.0 : 50.0, inner ? 2.0 : 5.0});
    name += (i ? "x" : "") + std::to_string(dims[i]);
  }
  return Cluster(name, std::move(levels), device);
}

std::string Cluster::levels_text() const {
  std::string out;
  for (const Level& l : levels_)
    out += (out.empty() ? "" : " x ") + l.name + " " + std::to_string(l.size);
  return out;
}

std::vector<std::int64_t> Cluster::device_coords(std::int64_t device) const {
  std::vector<std::int64_t> coords(cuts_.size());
  for (std::size_t i = cuts_.size(); i-- > 0;) {
    coords[i] = device % cuts_[i].size;
    device /= cuts_[i].size;
  }
  return coords;
}

}  // namespace recsearch
