// SPDX-License-Identifier: Apache-2.0
// The device cluster: hierarchy levels with their links, the device model,
// and the cut schedule the search recurses over.
//
// Levels are listed outermost (slowest) first. The cut schedule factors each
// level's size into primes (smaller primes first within a level) and lists
// the cuts outermost level first: a 64x8 cluster is cut 2,2,2,2,2,2 (node
// level, 50 GB/s) then 2,2,2 (gpu level, 450 GB/s); 12 flat devices are cut
// 2,2,3. A device id is the mixed-radix number of its cut digits, cut 0 most
// significant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace recsearch {

struct Level {
  std::string name;
  std::int64_t size = 1;
  double bandwidth_GBps = 100.0;  // per device, one direction, 1 GB = 1e9 bytes
  double latency_us = 5.0;        // per collective step
};

// The arithmetic an operator's flops run at, each with its own peak: f64,
// f32 (the CUDA cores), TF32 (f32 contractions on tensor cores, where
// CostParams::tf32 allows it), bf16 and f16 (one peak) and f8.
enum class Precision : std::uint8_t { F64, F32, TF32, BF16, F8 };

struct DeviceSpec {
  double peak_TFLOPs = 989.0;             // dense bf16/f16 peak (H100 SXM)
  double memory_GiB = 80.0;               // capacity; the default memory budget
  double memory_bandwidth_GBps = 3350.0;  // HBM, for memory-bound operators
  // Dense peaks of the other precisions; 0: not given, peak_TFLOPs stands
  // in (a device described by one figure runs everything at it, as before
  // there were several; docs/cost-model.md, Peaks per dtype).
  double peak_f64_TFLOPs = 0;
  double peak_f32_TFLOPs = 0;
  double peak_tf32_TFLOPs = 0;
  double peak_f8_TFLOPs = 0;

  // The peak of `p`, falling back to peak_TFLOPs where it is not given.
  [[nodiscard]] double peak_TFLOPs_of(Precision p) const noexcept {
    double given = 0;
    switch (p) {
      case Precision::F64: given = peak_f64_TFLOPs; break;
      case Precision::F32: given = peak_f32_TFLOPs; break;
      case Precision::TF32: given = peak_tf32_TFLOPs; break;
      case Precision::BF16: break;
      case Precision::F8: given = peak_f8_TFLOPs; break;
    }
    return given > 0 ? given : peak_TFLOPs;
  }
};

// File spelling of a precision ("f64", "f32", "tf32", "bf16", "f8").
[[nodiscard]] const char* precision_name(Precision p) noexcept;

// One cut of the schedule: a mesh axis of the plan.
struct Cut {
  std::string axis;          // "c0", "c1", ...
  std::int64_t size = 2;     // a prime
  std::size_t level = 0;     // index into Cluster::levels()
  double bandwidth_Bps = 0;  // bytes per second
  double latency_s = 0;      // seconds per collective step
  // Devices inside each part of this cut: the product of the later cuts'
  // sizes. A collective across the cut moves the data of a whole part, and
  // that traffic is spread over the part's devices and their links.
  std::int64_t devices_below = 1;
};

// Largest device count accepted (2^31).
inline constexpr std::int64_t kMaxDevices = std::int64_t{1} << 31;

class Cluster {
 public:
  // Validates and builds the cut schedule. Throws Error(kCluster) with a
  // path like "/levels/1/bandwidth_GBps" on sizes < 1, a device count above
  // kMaxDevices, non-finite or non-positive bandwidths or peak (a per-
  // precision peak may be 0: not given), negative or
  // non-finite latencies, duplicate level names.
  Cluster(std::string name, std::vector<Level> levels, DeviceSpec device = {});

  // `--devices N`: one level "device" at 100 GB/s, 5 us.
  [[nodiscard]] static Cluster flat(std::int64_t devices, DeviceSpec device = {});
  // `--mesh 64x8`: one level per factor, outermost first, named m0, m1, ...;
  // the innermost level gets 450 GB/s and 2 us (NVLink class), outer levels
  // 50 GB/s and 5 us (InfiniBand class). A single factor is the innermost.
  [[nodiscard]] static Cluster mesh(const std::vector<std::int64_t>& dims, DeviceSpec device = {});

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::vector<Level>& levels() const noexcept { return levels_; }
  [[nodiscard]] const DeviceSpec& device() const noexcept { return device_; }
  [[nodiscard]] std::int64_t num_devices() const noexcept { return devices_; }
  [[nodiscard]] const std::vector<Cut>& cuts() const noexcept { return cuts_; }
  // Mixed-radix digits of a device id, one per cut.
  [[nodiscard]] std::vector<std::int64_t> device_coords(std::int64_t device) const;
  // The levels outermost first, as messages name them: "node 4 x gpu 2".
  [[nodiscard]] std::string levels_text() const;

 private:
  std::string name_;
  std::vector<Level> levels_;
  DeviceSpec device_;
  std::int64_t devices_ = 1;
  std::vector<Cut> cuts_;
};

// Prime factors of n >= 1 in increasing order (empty for 1).
[[nodiscard]] std::vector<std::int64_t> prime_factors(std::int64_t n);

}  // namespace recsearch
