// SPDX-License-Identifier: Apache-2.0
// exec::fit_link, the least-squares fit behind `recsearch calibrate`: it
// recovers a latency and bandwidth from exact samples, clamps a negative
// latency to 0 (refitting the bandwidth alone), and refuses samples that
// fit no positive bandwidth, without MPI. exec::kernel_rates: the memory
// figure is the memory-bound kernels' bytes over their time, summed (not a
// mean of rates), scaled for the model's backward factor, the GEMM left out.
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
