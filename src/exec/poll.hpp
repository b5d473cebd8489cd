// SPDX-License-Identifier: Apache-2.0
// Private: the one polling loop behind every wait of the MPI and NCCL
// backends (a non-blocking MPI collective; NCCL communicator creation and
// splits, the enqueue of a collective on a non-blocking communicator, its
// completion event). A wait never blocks in MPI, CUDA or NCCL: each poll
// asks once whether the work is done (and throws on an error the library
// reports), so that a peer that died or stalls ends the run after the
// timeout instead of hanging every rank. Pure (no MPI, no CUDA, no NCCL):
// the pacing and the timeout path are unit-tested with fake collectives.
#pragma once

#include <sched.h>

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

// How a wait spaces its polls: back to back (yielding the core between
// them) for the first `spin` of the wait, then sleeps doubling from
// `first_sleep` up to `max_sleep`. A library that moves data only inside a
// poll (Open MPI's shared-memory path pipelines a large message in
// fragments, one batch per poll) needs the spin; one whose work runs
// elsewhere (NCCL on the GPU) needs only the sleeps. The sleeps leave the
// cores to oversubscribed ranks that compute while this one waits.
struct PollPacing {
  std::chrono::microseconds spin{0};
  int polls_per_yield = 1;  // inside the spin: polls between two yields
  std::chrono::microseconds first_sleep{1};
  std::chrono::microseconds max_sleep{1000};
};

// The pause after a poll that found the work pending, `waited` into the
// wait, the previous pause being `last` (zero for none): zero (a yield)
// inside the spin, else twice the last sleep within [first_sleep, max_sleep].
[[nodiscard]] inline std::chrono::microseconds next_pause(const PollPacing& p,
                                                          std::chrono::microseconds waited,
                                                          std::chrono::microseconds last) {
  if (waited < p.spin) return std::chrono::microseconds(0);
  const auto doubled = last.count() > 0 ? last * 2 : p.first_sleep;
  return std::clamp(doubled, p.first_sleep, std::max(p.first_sleep, p.max_sleep));
}

// Calls step() until it reports kDone; step() throws on a failure. Throws
// Error(kRuntime, "<what> did not finish within T s ...") once the deadline
// has passed; the caller then aborts its communicators. Between polls it
// yields or sleeps as `pacing` says (by default sleeps doubling from 1 us
// to 1 ms: short work is seen at once).
template <class Step>
void poll_until(Step&& step, const Deadline& deadline, const std::string& what,
                const PollPacing& pacing = {}) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(0);
  for (int polls = 1;; ++polls) {
    if (step() == Progress::kDone) return;
    if (deadline.passed()) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", deadline.timeout_s());
      throw Error(Errc::kRuntime, what + " did not finish within " + secs +
                                      " s (a peer died, stalls or runs a different plan)");
    }
    pause = next_pause(
        pacing, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start), pause);
    if (pause.count() == 0) {
      if (polls % std::max(1, pacing.polls_per_yield) == 0) sched_yield();
    } else {
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace recsearch::exec::detail
