// SPDX-License-Identifier: Apache-2.0
// exec::fit_link, the least-squares fit behind `recsearch calibrate`: it
// recovers a latency and bandwidth from exact samples, clamps a negative
// latency to 0 (refitting the bandwidth alone), and refuses samples that
// fit no positive bandwidth, without MPI. exec::kernel_rates: the memory
// figure is the memory-bound kernels' bytes over their time, summed (not a
// mean of rates), scaled for the model's backward factor, the GEMM left out.
// exec::gemm_rates likewise for the GEMM figure over the MatMul set, and
// exec::gemm_shapes is the documented set. For --backend nccl:
// fit_collectives per kind and together, the levels of a job's nodes, the
// GPU rates and the GPU GEMM set.
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "recsearch/error.hpp"
#include "recsearch/exec/calibrate.hpp"

namespace {

using recsearch::exec::Calibration;
using recsearch::exec::CollectiveSample;
using recsearch::exec::fit_link;
using recsearch::exec::KernelSample;

CollectiveSample sample(double bytes, double steps, double seconds) {
  CollectiveSample s;
  s.bytes = bytes;
  s.steps = steps;
  s.seconds = seconds;
  return s;
}

}  // namespace

TEST_CASE("calibrate: fit_link recovers latency and bandwidth from exact samples") {
  const double alpha = 20e-6, bw = 2e9;
  std::vector<CollectiveSample> v;
  for (const double steps : {1.0, 2.0})
    for (const double b : {1e3, 1e5, 1e7}) v.push_back(sample(b, steps, alpha * steps + b / bw));
  const auto f = fit_link(v);
  CHECK(f.latency_s == doctest::Approx(alpha).epsilon(1e-6));
  CHECK(f.bandwidth_Bps == doctest::Approx(bw).epsilon(1e-6));
}

TEST_CASE("calibrate: a negative latency is clamped and the bandwidth refitted") {
  // Times that grow faster than the bytes: the line through them crosses
  // zero time at positive bytes.
  const std::vector<CollectiveSample> v = {sample(1e6, 1, 1e-4), sample(2e6, 1, 1e-3)};
  const auto f = fit_link(v);
  CHECK(f.latency_s == 0);
  // Least squares through the origin: beta = sum(x t) / sum(x^2).
  CHECK(f.bandwidth_Bps == doctest::Approx((1e12 + 4e12) / (1e2 + 2e3)).epsilon(1e-9));
}

TEST_CASE("calibrate: samples without bytes fit no bandwidth") {
  CHECK_THROWS_AS((void)fit_link({sample(0, 1, 1e-3)}), recsearch::Error);
  CHECK_THROWS_AS((void)fit_link({}), recsearch::Error);
}

namespace {

KernelSample kernel(double bytes, double fwd, double bwd, bool gemm = false) {
  KernelSample k;
  k.bytes = bytes;
  k.forward_s = fwd;
  k.backward_s = bwd;
  k.gemm = gemm;
  return k;
}

}  // namespace

TEST_CASE("calibrate: kernel_rates sums bytes and seconds over the memory-bound kernels") {
  Calibration c;
  // 1 MB in 1 ms (backward 2 ms) and 4 MB in 3 ms (backward 1 ms): the sums
  // give 5 MB / 4 ms forward, where a mean of the two forward rates would be
  // 1.17 GB/s; the backward takes 0.75 of the forward, not the model's 2.
  c.kernels = {kernel(1e6, 1e-3, 2e-3), kernel(4e6, 3e-3, 1e-3),
               kernel(1e9, 1.0, 10.0, /*gemm=*/true)};
  recsearch::exec::kernel_rates(c);
  CHECK(c.kernel_forward_Bps == doctest::Approx(1.25e9).epsilon(1e-12));
  CHECK(c.kernel_backward_ratio == doctest::Approx(0.75).epsilon(1e-12));
  CHECK(c.backward_flops_factor == 2.0);
  // The model charges (1 + 2) · 5 MB / rate for the pair's training step,
  // which must be their measured 7 ms (not the forward rate's 12 ms).
  CHECK(c.memory_Bps == doctest::Approx(3 * 5e6 / 7e-3).epsilon(1e-12));
  CHECK((1 + c.backward_flops_factor) * 5e6 / c.memory_Bps == doctest::Approx(7e-3));
}

TEST_CASE("calibrate: kernel_rates refuses a set without memory-bound kernels") {
  Calibration c;
  c.kernels = {kernel(1e9, 1.0, 2.0, /*gemm=*/true)};
  CHECK_THROWS_AS(recsearch::exec::kernel_rates(c), recsearch::Error);
  c.kernels = {kernel(1e6, 0.0, 0.0)};
  CHECK_THROWS_AS(recsearch::exec::kernel_rates(c), recsearch::Error);
}

TEST_CASE("calibrate: gemm_rates sums FLOPs and seconds over the GEMM set") {
  Calibration c;
  // 1 GFLOP in 0.1 s (backward 0.1 s) and 1 GFLOP in 0.4 s (backward 0.5
  // s): the sums give 2 GFLOP / 0.5 s = 4 GFLOP/s forward, where a mean of
  // the rates would be 6.25 and a median of three shapes could be either.
  KernelSample a = kernel(0, 0.1, 0.1, true), b = kernel(0, 0.4, 0.5, true);
  a.flops = b.flops = 1e9;
  c.gemms = {a, b};
  recsearch::exec::gemm_rates(c);
  CHECK(c.gemm_forward_flops_per_s == doctest::Approx(4e9).epsilon(1e-12));
  CHECK(c.gemm_backward_ratio == doctest::Approx(1.2).epsilon(1e-12));
  // The model charges (1 + 2) x 2 GFLOP / peak for the set's training step,
  // which must be its measured 1.1 s (not the forward rate's 1.5 s).
  CHECK(c.gemm_flops_per_s == doctest::Approx(3 * 2e9 / 1.1).epsilon(1e-12));
  CHECK(3 * 2e9 / c.gemm_flops_per_s == doctest::Approx(1.1));
}

TEST_CASE("calibrate: gemm_rates refuses a set that took no time") {
  Calibration c;
  CHECK_THROWS_AS(recsearch::exec::gemm_rates(c), recsearch::Error);
  KernelSample k = kernel(0, 0.0, 0.0, true);
  k.flops = 1e9;
  c.gemms = {k};
  CHECK_THROWS_AS(recsearch::exec::gemm_rates(c), recsearch::Error);
}

TEST_CASE("calibrate: the GEMM set is the documented layers' shares over 1, 2 and 4 ranks") {
  const auto v = recsearch::exec::gemm_shapes();
  REQUIRE(v.size() == 30);
  std::multiset<std::tuple<std::int64_t, std::int64_t, std::int64_t>> got, want;
  for (const auto& g : v) got.insert({g.m, g.k, g.n});
  for (const auto& [t, h] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{512, 256}, {256, 512}, {128, 1024}}) {
    for (const std::int64_t s : {1, 2, 4}) {
      want.insert({t / s, h, 4 * h});  // tokens split: up and down projections
      want.insert({t / s, 4 * h, h});
      if (s == 1) continue;
      want.insert({t, h, 4 * h / s});  // the 4h dimension split
      want.insert({t, 4 * h / s, h});
    }
  }
  CHECK(got == want);
  // The bench graphs' gpt2 MLP layer as data parallel over 2 ranks would
  // see it, and mlp's layer as a tensor-parallel rank over 4.
  CHECK(got.count({256, 256, 1024}) == 1);
  CHECK(got.count({128, 1024, 1024}) == 2);
}

TEST_CASE("calibrate: fit_collectives fits each kind and all together") {
  // all-reduce at 2 us per step and 10 GB/s, all-gather at 1 us and 20 GB/s:
  // each kind's fit recovers its own link, the joint fit lies between.
  std::vector<CollectiveSample> v;
  for (const double bytes : {1e3, 1e6, 1e8}) {
    CollectiveSample r = sample(bytes, 2, 2e-6 * 2 + bytes / 1e10);
    r.kind = "all-reduce";
    CollectiveSample g = sample(bytes, 1, 1e-6 + bytes / 2e10);
    g.kind = "all-gather";
    v.push_back(r);
    v.push_back(g);
  }
  std::vector<std::pair<std::string, recsearch::exec::LinkFit>> kinds;
  recsearch::exec::LinkFit link;
  recsearch::exec::fit_collectives(v, kinds, link);
  REQUIRE(kinds.size() == 2);
  CHECK(kinds[0].first == "all-reduce");
  CHECK(kinds[0].second.bandwidth_Bps == doctest::Approx(1e10).epsilon(1e-6));
  CHECK(kinds[0].second.latency_s == doctest::Approx(2e-6).epsilon(1e-4));
  CHECK(kinds[1].second.bandwidth_Bps == doctest::Approx(2e10).epsilon(1e-6));
  CHECK(link.bandwidth_Bps > 1e10);
  CHECK(link.bandwidth_Bps < 2e10);
  for (const auto& s : v) {
    CHECK(s.fit_seconds == doctest::Approx(s.seconds).epsilon(1e-6));
    CHECK(s.cluster_seconds ==
          doctest::Approx(link.latency_s * s.steps + s.bytes / link.bandwidth_Bps));
  }
}

TEST_CASE("calibrate: the levels of a job follow its nodes") {
  using recsearch::exec::calibration_levels;
  const auto names = [](const std::vector<recsearch::exec::LevelCalibration>& v) {
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const auto& l : v) out.emplace_back(l.name, l.size);
    return out;
  };
  using L = std::vector<std::pair<std::string, std::int64_t>>;
  CHECK(calibration_levels(1, 1, 1, true).empty());
  CHECK(names(calibration_levels(8, 1, 8, true)) == L{{"gpu", 8}});
  CHECK(names(calibration_levels(16, 2, 8, true)) == L{{"node", 2}, {"gpu", 8}});
  CHECK(names(calibration_levels(4, 4, 1, true)) == L{{"node", 4}});
  CHECK(names(calibration_levels(16, 2, 8, false)) == L{{"rank", 16}});
}

TEST_CASE("calibrate: the GPU rates are the three passes' time at the model's factor") {
  recsearch::exec::GpuCalibration c;
  // bf16: a 1 TFLOP forward in 2 ms and its two backward products in 3 ms
  // each; f32 and tf32 once each, all passes at one rate.
  const auto add = [&](const char* dtype, const char* pass, double seconds) {
    recsearch::exec::GpuGemmSample g;
    g.dtype = dtype;
    g.pass = pass;
    g.flops = 1e12;
    g.seconds = seconds;
    c.gemms.push_back(g);
  };
  add("bf16", "forward", 2e-3);
  add("bf16", "backward-data", 3e-3);
  add("bf16", "backward-weight", 3e-3);
  for (const char* d : {"f32", "tf32"}) {
    add(d, "forward", 0.1);
    add(d, "backward-data", 0.1);
    add(d, "backward-weight", 0.1);
  }
  recsearch::exec::gpu_gemm_rates(c);
  REQUIRE(c.flops_per_s.size() == 3);
  // The model prices the layer's training at (1 + 2) x 1 TFLOP / rate: the
  // measured 8 ms.
  for (const auto& [d, r] : c.flops_per_s) {
    if (d == "bf16") CHECK(3e12 / r == doctest::Approx(8e-3));
    if (d == "f32") CHECK(r == doctest::Approx(1e13));
  }
  c.gemms.pop_back();  // tf32 keeps its forward: still a rate
  recsearch::exec::gpu_gemm_rates(c);
  c.gemms.erase(c.gemms.begin(), c.gemms.begin() + 3);  // no bf16 left
  CHECK_THROWS_AS(recsearch::exec::gpu_gemm_rates(c), recsearch::Error);
}

TEST_CASE("calibrate: the GPU GEMM set is 4,096 tokens at four widths and four TP shares") {
  const auto v = recsearch::exec::gpu_gemm_shapes();
  REQUIRE(v.size() == 32);
  for (const auto& g : v) CHECK(g.m == 4096);
  CHECK(v.front().k == 1024);
  CHECK(v.front().n == 4096);
  CHECK(v.back().k == 8192 / 2);  // h 8192, t 8: the down projection [4096, 4096] x [4096, 8192]
  CHECK(v.back().n == 8192);
}
