// SPDX-License-Identifier: Apache-2.0
// Private: the one polling loop behind every wait of the NCCL backend
// (communicator creation and splits, the enqueue of a collective on a
// non-blocking communicator, its completion event). A wait never blocks in
// CUDA or NCCL: each poll asks once whether the work is done (and throws on
// an error the library reports), so that a peer that died or stalls ends the
// run after the timeout instead of hanging every rank. Pure (no CUDA, no
// NCCL): the timeout path is unit-tested with a fake collective that never
// completes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

// A point in time after which a wait gives up; timeout_s <= 0: never.
class Deadline {
 public:
  explicit Deadline(double timeout_s) : timeout_s_(timeout_s), start_(Clock::now()) {}
  [[nodiscard]] bool passed() const {
    return timeout_s_ > 0 &&
           std::chrono::duration<double>(Clock::now() - start_).count() > timeout_s_;
  }
  [[nodiscard]] double timeout_s() const noexcept { return timeout_s_; }

 private:
  using Clock = std::chrono::steady_clock;
  double timeout_s_;
  Clock::time_point start_;
};

enum class Progress { kDone, kPending };

// Calls step() until it reports kDone; step() throws on a failure. Throws
// Error(kRuntime, "<what> did not finish within T s ...") once the deadline
// has passed; the caller then aborts its communicators. Sleeps between
// polls, doubling from 1 us to 1 ms: short collectives are seen at once, and
// oversubscribed ranks leave the cores to the ones doing the work.
template <class Step>
void poll_until(Step&& step, const Deadline& deadline, const std::string& what) {
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    if (step() == Progress::kDone) return;
    if (deadline.passed()) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", deadline.timeout_s());
      throw Error(Errc::kRuntime, what + " did not finish within " + secs +
                                      " s (a peer died, stalls or runs a different plan)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace recsearch::exec::detail
