// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's logic that needs no GPU (meson suite `exec`): which
// device a rank binds from its node-local rank, with the device count
// injected, and the refusal when ranks would share a device; and the
// polling loop behind every NCCL wait, driven by fake collectives (one that
// never completes must end with the timeout, one that fails must throw at
// once). The same headers are compiled into the GPU module.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "exec/nccl/device_choice.hpp"
#include "exec/nccl/poll.hpp"
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
