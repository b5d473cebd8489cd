// SPDX-License-Identifier: Apache-2.0
// Cut schedules (prime factors, outermost level first), device coordinates
// and cluster validation.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"

using namespace recsearch;

namespace {

std::vector<std::int64_t> sizes(const Cluster& c) {
  std::vector<std::int64_t> s;
  for (const auto& cut : c.cuts()) s.push_back(cut.size);
  return s;
}

}  // namespace

TEST_CASE("prime factors, smallest first") {
  CHECK(prime_factors(1).empty());
  CHECK(prime_factors(12) == std::vector<std::int64_t>{2, 2, 3});
  CHECK(prime_factors(1000) == std::vector<std::int64_t>{2, 2, 2, 5, 5, 5});
  CHECK(prime_factors(2147483647) == std::vector<std::int64_t>{2147483647});
  CHECK(prime_factors(1 << 20) == std::vector<std::int64_t>(20, 2));
}

TEST_CASE("any device count is cut into primes whose product is the count") {
  for (std::int64_t n : {1, 2, 6, 7, 12, 96, 1000, 1 << 20, 999983}) {
    Cluster c = Cluster::flat(n);
    CHECK(c.num_devices() == n);
    auto s = sizes(c);
    CHECK(std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>()) == n);
    for (std::size_t i = 0; i < c.cuts().size(); ++i)
      CHECK(c.cuts()[i].axis == "c" + std::to_string(i));
  }
  CHECK(Cluster::flat(1).cuts().empty());
}

TEST_CASE("mesh cuts the slow outer level first with its own bandwidth") {
  Cluster c = Cluster::mesh({6, 4});
  CHECK(sizes(c) == std::vector<std::int64_t>{2, 3, 2, 2});
  CHECK(c.cuts()[0].level == 0);
  CHECK(c.cuts()[1].level == 0);
  CHECK(c.cuts()[2].level == 1);
  CHECK(c.cuts()[0].bandwidth_Bps == doctest::Approx(50e9));
  CHECK(c.cuts()[3].bandwidth_Bps == doctest::Approx(450e9));
  CHECK(c.cuts()[0].latency_s == doctest::Approx(5e-6));
  CHECK(c.levels()[1].name == "m1");
}

TEST_CASE("device ids are mixed-radix numbers of the cut digits") {
  Cluster c = Cluster::mesh({3, 2});  // cuts 3, 2 (one per level)
  CHECK(c.device_coords(0) == std::vector<std::int64_t>{0, 0});
  CHECK(c.device_coords(1) == std::vector<std::int64_t>{0, 1});
  CHECK(c.device_coords(5) == std::vector<std::int64_t>{2, 1});
}

TEST_CASE("invalid clusters are rejected with a path") {
  auto path_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      CHECK(e.code() == Errc::kCluster);
      return e.json_path();
    }
    FAIL("expected an error");
    return std::string();
  };
  CHECK(path_of([] { Cluster("x", {Level{"a", 0, 1, 1}}); }) == "/levels/0/size");
  CHECK(path_of([] {
          Cluster("x", {Level{"a", 2, 1, 1}, Level{"b", 2, -1, 1}});
        }) == "/levels/1/bandwidth_GBps");
  CHECK(path_of([] {
          Cluster("x", {Level{"a", 2, std::nan(""), 1}});
        }) == "/levels/0/bandwidth_GBps");
  CHECK(path_of([] { Cluster("x", {Level{"a", 2, 1, -1}}); }) == "/levels/0/latency_us");
  CHECK(path_of([] {
          Cluster("x", {Level{"a", 2, 1, 1}, Level{"a", 2, 1, 1}});
        }) == "/levels/1/name");
  CHECK(path_of([] {
          Cluster("x", {Level{"a", 1 << 20, 1, 1}, Level{"b", 1 << 20, 1, 1}});
        }) == "/levels/1/size");
  CHECK(path_of([] { Cluster("x", {}); }) == "/levels");
  CHECK(path_of([] {
          Cluster("x", {Level{"a", 2, 1, 1}}, DeviceSpec{0, 80, 1000});
        }) == "/device/peak_TFLOPs");
  CHECK_THROWS_AS(Cluster::flat(0), Error);
  CHECK_THROWS_AS(Cluster::flat(kMaxDevices + 1), Error);
}
