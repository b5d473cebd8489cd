// SPDX-License-Identifier: Apache-2.0
// `recsearch calibrate --backend nccl` (docs/exec.md, Calibration on GPUs):
// measures the GPUs of an MPI job, one per rank, on device-resident buffers
// (exec/device_timer.hpp): cuBLAS GEMMs of a transformer layer's shapes in
// f32, TF32 and bf16, forward and both backward products; a device-to-device
// copy; and the four NCCL collectives on each level of the job's nodes (the
// nodes, and the GPUs within a node), fitted to the cost model's latency +
// bytes/bandwidth form as on the CPU. The cluster file it writes describes
// the GPUs as a training framework that keeps its tensors on them would use
// them, not exec's nccl backend, which stages every block through the host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/backends.hpp"
#include "exec/calibrate_gpu.hpp"
#include "exec/device_timer.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::exec {

namespace {

using detail::Collective;

struct DtypeCase {
  const char* name;
  RecsearchGpuDtype dtype;
};
constexpr DtypeCase kDtypes[] = {
    {"f32", kRecsearchGpuF32}, {"tf32", kRecsearchGpuTf32}, {"bf16", kRecsearchGpuBf16}};

struct CollectiveCase {
  const char* kind;
  Collective collective;
};
constexpr CollectiveCase kCollectives[] = {{"all-reduce", Collective::AllReduce},
                                           {"all-gather", Collective::AllGather},
                                           {"reduce-scatter", Collective::ReduceScatter},
                                           {"all-to-all", Collective::AllToAll}};

// The largest buffer a collective timing may need per rank (its k·n input or
// output): 1 GiB, far below any training GPU's memory.
constexpr double kMaxCollectiveBytes = 1024.0 * 1024 * 1024;

// The three products of one layer's MatMul Y [m, n] = X [m, k] W [k, n] in
// training: Y itself, dX = dY W^T ([m, n] x [n, k]) and dW = X^T dY
// ([k, m] x [m, n]).
std::vector<GpuGemmSample> passes_of(const GemmShape& g, const std::string& dtype) {
  const double flops =
      2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  return {{dtype, "forward", g.m, g.n, g.k, false, false, flops, 0},
          {dtype, "backward-data", g.m, g.k, g.n, false, true, flops, 0},
          {dtype, "backward-weight", g.k, g.n, g.m, true, false, flops, 0}};
}

std::vector<GpuGemmSample> measure_gemms(Communicator& comm, detail::DeviceTimer& t, int reps) {
  std::vector<GpuGemmSample> out;
  for (const DtypeCase& d : kDtypes) {
    for (const GemmShape& g : gpu_gemm_shapes()) {
      for (GpuGemmSample s : passes_of(g, d.name)) {
        s.seconds = comm.max_over_ranks(t.gemm(d.dtype, s.m, s.n, s.k, s.trans_a, s.trans_b, reps));
        out.push_back(std::move(s));
      }
    }
  }
  return out;
}

// Per rank contribution from 1 KiB to 64 MiB: latency-bound to
// bandwidth-bound on NVLink and InfiniBand alike (a ring reaches its
// bandwidth from some MiB up).
void measure_level(Communicator& comm, detail::DeviceTimer& t, std::uint32_t axis,
                   LevelCalibration& level, int reps) {
  const auto k = static_cast<double>(level.size);
  for (const CollectiveCase& c : kCollectives) {
    for (const std::size_t n : {std::size_t{256}, std::size_t{4096}, std::size_t{65536},
                                std::size_t{1} << 20, std::size_t{1} << 22, std::size_t{1} << 24}) {
      if (k * static_cast<double>(n) * sizeof(float) > kMaxCollectiveBytes) continue;
      comm.barrier();
      CollectiveSample s;
      s.kind = c.kind;
      s.elements = static_cast<double>(n);
      s.bytes = detail::ring_bytes(c.collective, k, n);
      s.steps = latency_steps(c.kind, static_cast<int>(level.size));
      s.seconds = comm.max_over_ranks(t.collective(c.collective, axis, n, reps));
      level.collectives.push_back(s);
    }
  }
  fit_collectives(level.collectives, level.kind_fits, level.link);
}

double rate_of(const GpuCalibration& c, const std::string& dtype) {
  for (const auto& [d, r] : c.flops_per_s)
    if (d == dtype) return r;
  return 0;
}

}  // namespace

std::vector<LevelCalibration> calibration_levels(int ranks, int nodes, int per_node, bool blocked) {
  std::vector<LevelCalibration> v;
  if (ranks < 2) return v;
  const auto level = [](const char* name, std::int64_t size) {
    LevelCalibration l;
    l.name = name;
    l.size = size;
    return l;
  };
  if (!blocked) {
    v.push_back(level("rank", ranks));
  } else if (nodes > 1 && per_node > 1) {
    v.push_back(level("node", nodes));
    v.push_back(level("gpu", per_node));
  } else {
    v.push_back(level(nodes > 1 ? "node" : "gpu", ranks));
  }
  return v;
}

std::vector<GemmShape> gpu_gemm_shapes() {
  const std::int64_t tokens = 4096;
  std::vector<GemmShape> v;
  for (const std::int64_t h : {1024, 2048, 4096, 8192}) {
    for (const std::int64_t t : {1, 2, 4, 8}) {
      const std::int64_t f = 4 * h / t;
      v.push_back({tokens, h, f});  // [tokens, h] x [h, 4h/t]: the up projection
      v.push_back({tokens, f, h});  // [tokens, 4h/t] x [4h/t, h]: the down projection
    }
  }
  return v;
}

void gpu_gemm_rates(GpuCalibration& c) {
  // As gemm_rates on the CPU: sums over the set, so that the products that
  // take longest weigh most, and the peak that gives the measured three
  // passes under the model's (1 + factor) · forward FLOPs.
  const double factor = CostParams{}.backward_flops_factor;
  c.flops_per_s.clear();
  for (const DtypeCase& d : kDtypes) {
    double flops = 0, seconds = 0;
    for (const auto& g : c.gemms) {
      if (g.dtype != d.name) continue;
      if (g.pass == "forward") flops += g.flops;
      seconds += g.seconds;
    }
    if (!(flops > 0 && seconds > 0)) {
      throw Error(Errc::kRuntime, std::string("calibrate: the ") + d.name + " GEMMs took no time");
    }
    c.flops_per_s.emplace_back(d.name, (1.0 + factor) * flops / seconds);
  }
}

GpuCalibration calibrate_gpu(Communicator& comm, std::vector<LevelCalibration> levels, int reps) {
  const auto timer = detail::device_timer(comm);
  GpuCalibration c;
  c.ranks = comm.size();
  const detail::GpuDeviceInfo info = timer->info();
  c.device = info.name;
  c.memory_GiB = -comm.max_over_ranks(-info.memory_bytes) / (1024.0 * 1024 * 1024);
  c.gemms = measure_gemms(comm, *timer, reps);
  gpu_gemm_rates(c);
  const std::size_t copy_bytes = std::size_t{1} << 30;
  c.copy_bytes = 2.0 * static_cast<double>(copy_bytes);  // read and written
  c.copy_Bps = c.copy_bytes / comm.max_over_ranks(timer->copy(copy_bytes, reps));
  c.levels = std::move(levels);
  for (std::size_t a = 0; a < c.levels.size(); ++a)
    measure_level(comm, *timer, static_cast<std::uint32_t>(a), c.levels[a], reps);
  return c;
}

std::string gpu_calibration_cluster_json(const GpuCalibration& c) {
  if (c.levels.empty()) {
    throw Error(Errc::kUsage, "calibrate: a cluster file needs the collectives of 2 ranks or more");
  }
  std::vector<Level> levels;
  for (const auto& l : c.levels)
    levels.push_back({l.name, l.size, l.link.bandwidth_Bps / 1e9, l.link.latency_s * 1e6});
  DeviceSpec dev;
  dev.peak_TFLOPs = rate_of(c, "bf16") / 1e12;
  dev.peak_f32_TFLOPs = rate_of(c, "f32") / 1e12;
  dev.peak_tf32_TFLOPs = rate_of(c, "tf32") / 1e12;
  dev.memory_GiB = c.memory_GiB;
  dev.memory_bandwidth_GBps = c.copy_Bps / 1e9;
  // Built through Cluster so that the file satisfies the reader's checks.
  const Cluster cluster("calibrated " + std::to_string(c.ranks) + " x " + c.device + " (nccl)",
                        levels, dev);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::cluster_to_json(cluster));
  // The rates are what the GPUs achieve on a layer's GEMMs, not peaks to derate.
  j["cost"] = {{"compute_efficiency", 1.0}};
  return j.dump(2);
}

std::string gpu_calibration_samples_json(const GpuCalibration& c) {
  nlohmann::ordered_json j;
  j["backend"] = "nccl";
  j["ranks"] = c.ranks;
  j["device"] = c.device;
  j["memory_GiB"] = c.memory_GiB;
  j["flops_per_s"] = nlohmann::ordered_json::object();
  for (const auto& [d, r] : c.flops_per_s) j["flops_per_s"][d] = r;
  j["flops_per_s_from"] =
      "(1 + backward_flops_factor) * sum(forward flops) / sum(seconds of the three passes)";
  j["gemms"] = nlohmann::ordered_json::array();
  for (const auto& g : c.gemms) {
    j["gemms"].push_back({{"dtype", g.dtype},
                          {"pass", g.pass},
                          {"m", g.m},
                          {"n", g.n},
                          {"k", g.k},
                          {"trans_a", g.trans_a},
                          {"trans_b", g.trans_b},
                          {"flops", g.flops},
                          {"seconds", g.seconds}});
  }
  j["copy_bytes"] = c.copy_bytes;
  j["copy_Bps"] = c.copy_Bps;
  j["levels"] = nlohmann::ordered_json::array();
  for (const auto& l : c.levels) {
    nlohmann::ordered_json lj;
    lj["name"] = l.name;
    lj["size"] = l.size;
    detail::put_collective_fits(lj, l.link, l.kind_fits, l.collectives);
    j["levels"].push_back(std::move(lj));
  }
  return j.dump(2);
}

namespace detail {

void print_gpu_report(const GpuCalibration& c) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "recsearch calibrate: %d rank(s), backend nccl, %s, %.1f GiB\n",
                c.ranks, c.device.c_str(), c.memory_GiB);
  s += line;
  for (const auto& [d, r] : c.flops_per_s) {
    double fwd_flops = 0, fwd_s = 0, bwd_s = 0;
    for (const auto& g : c.gemms) {
      if (g.dtype != d) continue;
      if (g.pass == "forward") {
        fwd_flops += g.flops;
        fwd_s += g.seconds;
      } else {
        bwd_s += g.seconds;
      }
    }
    std::snprintf(line, sizeof line,
                  "  gemm %-4s: %8.1f TFLOP/s (forward %.1f, backward/forward time %.2f)\n",
                  d.c_str(), r / 1e12, fwd_flops / fwd_s / 1e12, bwd_s / fwd_s);
    s += line;
  }
  std::snprintf(line, sizeof line, "  copy: %.1f GB/s (read + write)\n", c.copy_Bps / 1e9);
  s += line;
  for (const auto& l : c.levels) {
    std::snprintf(line, sizeof line, "  level %s (%lld): latency %.2f us/step, %.2f GB/s\n",
                  l.name.c_str(), static_cast<long long>(l.size), l.link.latency_s * 1e6,
                  l.link.bandwidth_Bps / 1e9);
    s += line;
    for (const auto& [kind, f] : l.kind_fits) {
      std::snprintf(line, sizeof line, "    fit %-14s latency %.2f us/step, %.2f GB/s\n",
                    kind.c_str(), f.latency_s * 1e6, f.bandwidth_Bps / 1e9);
      s += line;
    }
  }
  if (c.levels.empty()) s += "  one rank: no collectives measured\n";
  std::cout << s << std::flush;
}

}  // namespace detail

}  // namespace recsearch::exec
