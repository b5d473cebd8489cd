// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's logic that needs no GPU (meson suite `exec`): which
// device a rank binds from its node-local rank, with the device count
// injected, and the refusal when ranks would share a device; and the
// polling loop behind every NCCL and MPI wait (exec/poll.hpp), driven by
// fake collectives (one that never completes must end with the timeout, one
// that fails must throw at once) and its pacing (spin, then sleeps). The
// same headers are compiled into the GPU module.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "exec/nccl/device_choice.hpp"
#include "exec/poll.hpp"
#include "recsearch/error.hpp"

namespace rx = recsearch::exec::detail;
using recsearch::Errc;
using recsearch::Error;

namespace {

// The message of the Error f throws, or "" (and a failed check) when it does not.
template <class F>
std::string error_of(F&& f, Errc want = Errc::kRuntime) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == want);
    return e.detail();
  }
  FAIL_CHECK("no Error thrown");
  return {};
}

}  // namespace

TEST_CASE("gpu: each node-local rank binds its own device") {
  CHECK(rx::device_for_local_rank(0, 1, 1) == 0);
  CHECK(rx::device_for_local_rank(0, 2, 2) == 0);
  CHECK(rx::device_for_local_rank(1, 2, 2) == 1);
  CHECK(rx::device_for_local_rank(3, 4, 8) == 3);  // fewer ranks than devices: the first ones
  CHECK(rx::device_for_local_rank(7, 8, 8) == 7);
  // --map-by node: world ranks 0, 2, 4 and 6 on one node of 4 GPUs are its
  // local ranks 0..3, each on its own device (world rank % 4 would put 0 and
  // 4, and 2 and 6, on one device).
  for (int local = 0; local < 4; ++local) CHECK(rx::device_for_local_rank(local, 4, 4) == local);
  CHECK(rx::device_refusal(1, 2, 2).empty());
}

TEST_CASE("gpu: more ranks than devices on a node are refused as no usable GPU") {
  const std::string two_on_one = error_of([] { (void)rx::device_for_local_rank(1, 2, 1); });
  CHECK(two_on_one.rfind("no usable GPU: 2 ranks share 1 device(s) on this node", 0) == 0);
  // Every local rank of the node refuses alike, the first one included
  // (whose device would exist): NCCL would refuse the duplicate anyway.
  CHECK(error_of([] { (void)rx::device_for_local_rank(0, 2, 1); }) == two_on_one);
  CHECK(error_of([] {
          (void)rx::device_for_local_rank(0, 9, 8);
        }).rfind("no usable GPU: 9 ranks share 8 device(s)", 0) == 0);
}

TEST_CASE("gpu: no device, or a rank outside its node, is refused") {
  CHECK(error_of([] { (void)rx::device_for_local_rank(0, 1, 0); }) ==
        "no usable GPU: no CUDA device");
  CHECK(rx::device_refusal(0, 1, -1) == "no CUDA device");
  CHECK(rx::device_refusal(2, 2, 4).find("out of range") != std::string::npos);
  CHECK(rx::device_refusal(-1, 2, 4).find("out of range") != std::string::npos);
  CHECK(rx::device_refusal(0, 0, 4).find("out of range") != std::string::npos);
}

TEST_CASE("gpu: a collective that never completes ends with the timeout") {
  using Clock = std::chrono::steady_clock;
  int polls = 0;
  const auto never = [&] {
    ++polls;
    return rx::Progress::kPending;
  };
  const auto t0 = Clock::now();
  const std::string msg =
      error_of([&] { rx::poll_until(never, rx::Deadline(0.2), "all-gather on mesh axis 1"); });
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(msg ==
        "all-gather on mesh axis 1 did not finish within 0.2 s (a peer died, stalls or "
        "runs a different plan)");
  CHECK(secs >= 0.2);
  CHECK(secs < 5.0);
  CHECK(polls > 10);  // it kept asking (with short sleeps), not one blocking wait
}

TEST_CASE("gpu: a collective that completes is not timed out") {
  int polls = 0;
  rx::poll_until([&] { return ++polls < 5 ? rx::Progress::kPending : rx::Progress::kDone; },
                 rx::Deadline(60), "all-reduce");
  CHECK(polls == 5);
  // Done on the first poll: no wait at all, even with a deadline already passed.
  polls = 0;
  rx::poll_until([&] { return ++polls, rx::Progress::kDone; }, rx::Deadline(1e-9), "x");
  CHECK(polls == 1);
}

TEST_CASE("gpu: an asynchronous error ends the wait at once, not at the timeout") {
  using Clock = std::chrono::steady_clock;
  int polls = 0;
  const auto fails = [&] {
    if (++polls == 3) {
      throw Error(Errc::kRuntime, "ncclCommGetAsyncError failed: remote process exited");
    }
    return rx::Progress::kPending;
  };
  const auto t0 = Clock::now();
  CHECK(error_of([&] { rx::poll_until(fails, rx::Deadline(60), "reduce-scatter"); }) ==
        "ncclCommGetAsyncError failed: remote process exited");
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 5.0);
  CHECK(polls == 3);
}

TEST_CASE("gpu: timeout 0 waits as long as it takes") {
  int polls = 0;
  rx::poll_until([&] { return ++polls < 300 ? rx::Progress::kPending : rx::Progress::kDone; },
                 rx::Deadline(0), "all-to-all");
  CHECK(polls == 300);
  CHECK_FALSE(rx::Deadline(0).passed());
  CHECK_FALSE(rx::Deadline(-1).passed());
}

// The pacing of the MPI backend's waits (mpi_communicator.cpp): polls back
// to back for the spin, then sleeps doubling up to the cap; the NCCL
// backend's default pacing sleeps from the first poll.
TEST_CASE("poll: a wait spins first, then sleeps doubling up to its cap") {
  using us = std::chrono::microseconds;
  rx::PollPacing p;
  p.spin = us(2000);
  p.first_sleep = us(10);
  p.max_sleep = us(200);
  CHECK(rx::next_pause(p, us(0), us(0)) == us(0));
  CHECK(rx::next_pause(p, us(1999), us(0)) == us(0));
  CHECK(rx::next_pause(p, us(2000), us(0)) == us(10));
  CHECK(rx::next_pause(p, us(2500), us(10)) == us(20));
  CHECK(rx::next_pause(p, us(9000), us(160)) == us(200));
  CHECK(rx::next_pause(p, us(9000), us(200)) == us(200));
  const rx::PollPacing sleeps;  // default: no spin, 1 us doubling to 1 ms
  CHECK(rx::next_pause(sleeps, us(0), us(0)) == us(1));
  CHECK(rx::next_pause(sleeps, us(5), us(512)) == us(1000));
}

// A peer that died or stalls is seen inside the spin too: the deadline is
// checked after every poll, so a spin longer than the timeout still ends at it.
TEST_CASE("poll: a spinning wait on a collective that never completes ends with the timeout") {
  using Clock = std::chrono::steady_clock;
  rx::PollPacing p;
  p.spin = std::chrono::seconds(30);
  p.polls_per_yield = 64;
  int polls = 0;
  const auto t0 = Clock::now();
  const std::string msg = error_of([&] {
    rx::poll_until([&] { return ++polls, rx::Progress::kPending; }, rx::Deadline(0.2),
                   "all-reduce on mesh axis 0", p);
  });
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(msg.rfind("all-reduce on mesh axis 0 did not finish within 0.2 s", 0) == 0);
  CHECK(secs >= 0.2);
  CHECK(secs < 5.0);
  CHECK(polls > 1000);  // back to back, not sleeping
}
