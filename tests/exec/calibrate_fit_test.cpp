// SPDX-License-Identifier: Apache-2.0
// exec::fit_link, the least-squares fit behind `recsearch calibrate`: it
// recovers a latency and bandwidth from exact samples, clamps a negative
// latency to 0 (refitting the bandwidth alone), and refuses samples that
// fit no positive bandwidth, without MPI. exec::kernel_rates: the memory
// figure is the memory-bound kernels' bytes over their time, summed (not a
// mean of rates), scaled for the model's backward factor, the GEMM left out.
// exec::gemm_rates likewise for the GEMM figure over the MatMul set, and
// exec::gemm_shapes is the documented set.
#include <cstdint>
#include <set>
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
