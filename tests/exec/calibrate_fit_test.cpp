// SPDX-License-Identifier: Apache-2.0
// exec::fit_link, the least-squares fit behind `recsearch calibrate`: it
// recovers a latency and bandwidth from exact samples, clamps a negative
// latency to 0 (refitting the bandwidth alone), and refuses samples that
// fit no positive bandwidth, without MPI.
#include <vector>

#include <doctest/doctest.h>

#include "recsearch/error.hpp"
#include "recsearch/exec/calibrate.hpp"

namespace {

using recsearch::exec::CollectiveSample;
using recsearch::exec::fit_link;

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
