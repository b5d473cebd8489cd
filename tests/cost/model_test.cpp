// SPDX-License-Identifier: Apache-2.0
// Closed-form collective costs, the redistribution table and compute time,
// each checked against numbers worked out by hand.
#include <doctest/doctest.h>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/model.hpp"

using namespace recsearch;
using namespace recsearch::cost;

namespace {

Cut make_cut(std::int64_t k, double gbps, double us) {
  Cut c;
  c.size = k;
  c.bandwidth_Bps = gbps * 1e9;
  c.latency_s = us * 1e-6;
  return c;
}

}  // namespace

TEST_CASE("bytes per device of each collective") {
  const double B = 1 << 20;
  const Cut c4 = make_cut(4, 100, 5);
  CHECK(collective_bytes(Collective::AllGather, B, c4) == doctest::Approx(0.75 * B));
  CHECK(collective_bytes(Collective::ReduceScatter, B, c4) == doctest::Approx(0.75 * B));
  CHECK(collective_bytes(Collective::AllReduce, B, c4) == doctest::Approx(1.5 * B));
  CHECK(collective_bytes(Collective::AllToAll, B, c4) == doctest::Approx(3.0 / 16 * B));
  CHECK(collective_bytes(Collective::Halo, 1234, c4) == 1234);
  CHECK(collective_bytes(Collective::AllReduce, B, make_cut(1, 100, 5)) == 0);
}

TEST_CASE("a cut's parts spread their traffic over the devices below it") {
  // 2 nodes x 8 GPUs: an all-reduce across the node cut of a tensor the
  // nodes hold whole moves 1/8 of it per GPU (2-D / hierarchical
  // all-reduce), so the pair of cuts costs what one ring over 16 would.
  const Cluster c = Cluster::mesh({2, 8});
  REQUIRE(c.cuts().size() == 4);
  CHECK(c.cuts()[0].devices_below == 8);
  CHECK(c.cuts()[1].devices_below == 4);
  CHECK(c.cuts()[3].devices_below == 1);
  const double W = 1 << 24;
  double total = 0;
  for (std::size_t a = 0; a < 4; ++a) {
    // The tensor is replicated: every cut's group holds all of W.
    total += collective_bytes(Collective::AllReduce, W, c.cuts()[a]);
  }
  // 2(16-1)/16 W: the ring all-reduce over all 16 devices.
  CHECK(total == doctest::Approx(2.0 * 15 / 16 * W));
  CostParams p;
  p.count_latency = false;
  CHECK(collective_seconds(Collective::AllReduce, W, c.cuts()[0], p) ==
        doctest::Approx(2.0 * 0.5 * W / 8 / 50e9));
}

TEST_CASE("seconds are bandwidth plus latency steps") {
  CostParams p;
  const Cut c = make_cut(2, 100, 5);
  // all-reduce over 2: 2*(1/2)*1e9 bytes / 100e9 + 2*ceil(log2 2)*5us
  CHECK(collective_seconds(Collective::AllReduce, 1e9, c, p) == doctest::Approx(0.01 + 10e-6));
  CHECK(collective_seconds(Collective::AllGather, 1e9, make_cut(3, 100, 5), p) ==
        doctest::Approx(2.0 / 3 * 1e9 / 100e9 + 2 * 5e-6));
  CHECK(collective_seconds(Collective::Halo, 1e6, make_cut(7, 100, 5), p) ==
        doctest::Approx(1e6 / 100e9 + 5e-6));
  p.count_latency = false;
  CHECK(collective_seconds(Collective::AllReduce, 1e9, c, p) == doctest::Approx(0.01));
  CHECK(collective_seconds(Collective::AllReduce, 1e9, make_cut(1, 100, 5), p) == 0);
}

TEST_CASE("redistribution table, with backward duals only in training") {
  RedistStep s[2];
  const auto S0 = AxisLayout::shard(0), S1 = AxisLayout::shard(1), R = AxisLayout::replicate(),
             P = AxisLayout::partial();
  CHECK(redistribution_steps(S0, S0, Mode::Train, s) == 0);
  REQUIRE(redistribution_steps(S0, R, Mode::Train, s) == 2);
  CHECK(s[0].collective == Collective::AllGather);
  CHECK(s[0].phase == Phase::Forward);
  CHECK(s[1].collective == Collective::ReduceScatter);
  CHECK(s[1].phase == Phase::Backward);
  CHECK(redistribution_steps(S0, R, Mode::Infer, s) == 1);
  REQUIRE(redistribution_steps(R, S1, Mode::Train, s) == 1);
  CHECK(s[0].collective == Collective::AllGather);
  CHECK(s[0].phase == Phase::Backward);
  CHECK(redistribution_steps(R, S1, Mode::Infer, s) == 0);
  REQUIRE(redistribution_steps(S0, S1, Mode::Train, s) == 2);
  CHECK(s[0].collective == Collective::AllToAll);
  CHECK(s[1].collective == Collective::AllToAll);
  REQUIRE(redistribution_steps(P, R, Mode::Train, s) == 1);
  CHECK(s[0].collective == Collective::AllReduce);
  REQUIRE(redistribution_steps(P, S0, Mode::Train, s) == 2);
  CHECK(s[0].collective == Collective::ReduceScatter);
  CHECK(s[1].collective == Collective::AllGather);
  CHECK(redistribution_steps(R, P, Mode::Train, s) == 0);
  CHECK(collective_name(Collective::AllToAll) == "all_to_all");
  CHECK(phase_name(Phase::Backward) == "backward");
}

TEST_CASE("compute time is the roofline maximum, tripled in training") {
  CostParams p;
  DeviceSpec d{100, 80, 1000};  // 100 TFLOPs, 1000 GB/s
  // flops-bound: 1e12 / (100e12 * 0.5) = 0.02 s
  CHECK(compute_seconds(1e12, 1e6, d, p, Mode::Infer) == doctest::Approx(0.02));
  CHECK(compute_seconds(1e12, 1e6, d, p, Mode::Train) == doctest::Approx(0.06));
  // memory-bound: 1e9 bytes / 1e12 B/s = 1 ms
  CHECK(compute_seconds(1e3, 1e9, d, p, Mode::Infer) == doctest::Approx(1e-3));
  CHECK(parameter_state_factor(p, Mode::Train) == 4.0);
  CHECK(parameter_state_factor(p, Mode::Infer) == 1.0);
}

TEST_CASE("parameter gradients are bucketed: bandwidth only") {
  CostParams p;
  const Cut c = make_cut(4, 100, 5);
  const double bw = 1.5 * 1e9 / 100e9;
  CHECK(gradient_seconds(1e9, true, c, p) == doctest::Approx(bw));
  CHECK(gradient_seconds(1e9, false, c, p) == doctest::Approx(bw + 4 * 5e-6));
  p.bucket_gradients = false;
  CHECK(gradient_seconds(1e9, true, c, p) == doctest::Approx(bw + 4 * 5e-6));
  CHECK(gradient_seconds(1e9, true, make_cut(1, 100, 5), p) == 0);
}
