// SPDX-License-Identifier: Apache-2.0
// GPU module, NCCL part: one rank's device, stream, world communicator and
// one ncclCommSplit group per mesh axis (same colors and keys as the MPI
// groups). The unique id is broadcast by the caller (MPI), so the module
// needs no MPI.
//
// Nothing here blocks without a bound, so that a peer that died or stalls
// ends the run after the timeout instead of hanging every rank:
// - the communicators are non-blocking (ncclConfig_t::blocking = 0): the
//   world is created by nccl_open, which returns at once; the first
//   collective, which knows the timeout, polls its creation and then makes
//   and polls the splits (NCCL requires a non-blocking communicator to be
//   ready, ncclCommGetAsyncError == ncclSuccess, before the next call on it);
// - a collective on a non-blocking communicator may return ncclInProgress
//   before it is enqueued: its enqueue is polled, then an event recorded
//   after it, together with ncclCommGetAsyncError;
// - results are copied to the host only once that event has completed (a
//   device-to-host cudaMemcpyAsync into pageable memory returns only when
//   the copy is done, so issued earlier it would block on the collective).
// On every failure or expiry every communicator is aborted (ncclCommAbort),
// never destroyed: ncclCommDestroy would wait for the stalled work.
// calibrate times the same collectives on the device buffers alone
// (nccl_time_collective): no host copy, CUDA events around back-to-back calls.
#include <nccl.h>  // NCCL: the GPU collectives

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda/cuda_error.hpp"
#include "exec/cuda/module.hpp"
#include "exec/cuda/timing.hpp"
#include "exec/nccl/device_choice.hpp"
#include "exec/poll.hpp"

#define RS_NCCL_CHECK(call)                                                                  \
  do {                                                                                       \
    const ncclResult_t rs_nccl_rc_ = (call);                                                 \
    if (rs_nccl_rc_ != ncclSuccess)                                                          \
      ::recsearch::exec::detail::throw_gpu(ncclGetErrorString(rs_nccl_rc_), #call, __FILE__, \
                                           __LINE__);                                        \
  } while (0)

// A call on a non-blocking communicator: ncclInProgress means started (its
// end is polled with ncclCommGetAsyncError), anything else but success fails.
#define RS_NCCL_START(call)                                                                  \
  do {                                                                                       \
    const ncclResult_t rs_nccl_rc_ = (call);                                                 \
    if (rs_nccl_rc_ != ncclSuccess && rs_nccl_rc_ != ncclInProgress)                         \
      ::recsearch::exec::detail::throw_gpu(ncclGetErrorString(rs_nccl_rc_), #call, __FILE__, \
                                           __LINE__);                                        \
  } while (0)

struct RecsearchGpuNccl {
  int device = -1;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;  // recorded after each collective, polled
  ncclComm_t world = nullptr;
  std::vector<ncclComm_t> groups;
  std::vector<int> colors, keys;  // the splits, made by the first collective
  bool ready = false;             // world and every group created
  bool aborted = false;           // after abort(): no collective runs again
  double timeout_s = 0;           // the last collective's, bounds the finalize on close
  float* dev_in = nullptr;
  float* dev_out = nullptr;
  std::size_t cap_in = 0;
  std::size_t cap_out = 0;

  RecsearchGpuNccl() = default;
  RecsearchGpuNccl(const RecsearchGpuNccl&) = delete;
  RecsearchGpuNccl& operator=(const RecsearchGpuNccl&) = delete;
  ~RecsearchGpuNccl() {
    // Healthy communicators are finalized and destroyed; any other (a
    // failure, a creation never waited for) is aborted.
    if (!(ready && !aborted && finalize_all())) abort();
    if (dev_in != nullptr) (void)cudaFree(dev_in);
    if (dev_out != nullptr) (void)cudaFree(dev_out);
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  // Every communicator, groups before the world they were split from.
  std::vector<ncclComm_t> comms() const {
    std::vector<ncclComm_t> all = groups;
    if (world != nullptr) all.push_back(world);
    return all;
  }
  void abort() noexcept {
    for (ncclComm_t c : groups) (void)ncclCommAbort(c);
    if (world != nullptr) (void)ncclCommAbort(world);
    groups.clear();
    world = nullptr;
    aborted = true;
  }
  // ncclCommFinalize flushes and, on a non-blocking communicator, returns
  // ncclInProgress until done: polled, then destroyed. False on any failure
  // (the caller aborts).
  bool finalize_all() noexcept;
};

namespace recsearch::exec::gpu {
namespace {

using detail::Deadline;
using detail::Progress;

// The configuration of every communicator: non-blocking, so that creation,
// splits and enqueues return at once and are polled against the timeout.
ncclConfig_t nonblocking_config() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

// Whether the last call on comm has finished; throws its asynchronous error.
Progress comm_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  RS_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
  if (state == ncclInProgress) return Progress::kPending;
  if (state != ncclSuccess) {
    detail::throw_gpu(std::string(ncclGetErrorString(state)) + ": " + ncclGetLastError(comm),
                      "ncclCommGetAsyncError", __FILE__, __LINE__);
  }
  return Progress::kDone;
}

// An NCCL group (ncclGroupStart/End) that is ended on every path: a failed
// ncclSend/ncclRecv inside it must not leave the thread in an open group
// (the abort that follows would run inside it).
class NcclGroup {
 public:
  NcclGroup() { RS_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    RS_NCCL_START(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

void reserve(float*& p, std::size_t& cap, std::size_t n) {
  if (n <= cap) return;
  if (p != nullptr) RS_CUDA_CHECK(cudaFree(p));
  p = nullptr;
  cap = 0;
  RS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)));
  cap = n;
}

const char* collective_name(RecsearchGpuCollective kind) {
  switch (kind) {
    case kRecsearchGpuAllGather: return "all-gather";
    case kRecsearchGpuAllReduce: return "all-reduce";
    case kRecsearchGpuReduceScatter: return "reduce-scatter";
    case kRecsearchGpuAllToAll: return "all-to-all";
  }
  return "collective";
}

// Waits for the world's creation, then makes and waits for one split per
// mesh axis, each phase bounded by timeout_s. A split is collective over
// the world: the parent and the child are both polled until neither is in
// progress.
void make_ready(RecsearchGpuNccl* c, double timeout_s) {
  if (c->ready) return;
  poll_until([&] { return comm_state(c->world); }, Deadline(timeout_s),
             "creating the NCCL world communicator (ncclCommInitRankConfig)");
  for (std::size_t a = 0; a < c->colors.size(); ++a) {
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t g = nullptr;
    const ncclResult_t rc = ncclCommSplit(c->world, c->colors[a], c->keys[a], &g, &cfg);
    if (g != nullptr) c->groups.push_back(g);  // aborted with the rest if anything fails
    RS_NCCL_START(rc);
    poll_until(
        [&] {
          const Progress parent = comm_state(c->world);
          const Progress child = comm_state(g);
          return parent == Progress::kDone && child == Progress::kDone ? Progress::kDone
                                                                       : Progress::kPending;
        },
        Deadline(timeout_s), "splitting the NCCL communicator for mesh axis " + std::to_string(a));
  }
  c->ready = true;
}

// Enqueues one collective (or the send/recv group of an all-to-all) on the
// rank's stream; on a non-blocking communicator it may still be in progress.
void enqueue(RecsearchGpuNccl* c, RecsearchGpuCollective kind, ncclComm_t comm, int group_size,
             std::size_t n) {
  switch (kind) {
    case kRecsearchGpuAllGather:
      RS_NCCL_START(ncclAllGather(c->dev_in, c->dev_out, n, ncclFloat, comm, c->stream));
      break;
    case kRecsearchGpuAllReduce:
      RS_NCCL_START(ncclAllReduce(c->dev_in, c->dev_out, n, ncclFloat, ncclSum, comm, c->stream));
      break;
    case kRecsearchGpuReduceScatter:
      RS_NCCL_START(
          ncclReduceScatter(c->dev_in, c->dev_out, n, ncclFloat, ncclSum, comm, c->stream));
      break;
    case kRecsearchGpuAllToAll: {
      NcclGroup group;
      for (int peer = 0; peer < group_size; ++peer) {
        const std::size_t off = static_cast<std::size_t>(peer) * n;
        RS_NCCL_START(ncclSend(c->dev_in + off, n, ncclFloat, peer, comm, c->stream));
        RS_NCCL_START(ncclRecv(c->dev_out + off, n, ncclFloat, peer, comm, c->stream));
      }
      group.end();
      break;
    }
  }
}

// Whether the event recorded after the collective has completed; meanwhile
// the communicator's asynchronous error (a failed peer, a network error).
Progress collective_state(cudaEvent_t done, ncclComm_t comm) {
  const cudaError_t q = cudaEventQuery(done);
  if (q == cudaSuccess) return Progress::kDone;
  if (q != cudaErrorNotReady) RS_CUDA_CHECK(q);
  (void)comm_state(comm);
  return Progress::kPending;
}

// The group of a collective, its device buffers grown to the elements it
// reads (n_in) and writes (n_out) per rank, the world and the splits made
// first.
struct Scratch {
  ncclComm_t comm = nullptr;
  std::size_t n_in = 0;
  std::size_t n_out = 0;
};

Scratch prepare(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis, int group_size,
                std::size_t n, double timeout_s) {
  if (c->aborted) {
    throw Error(Errc::kRuntime, "the NCCL communicators were aborted (an earlier failure)");
  }
  c->timeout_s = timeout_s;
  RS_CUDA_CHECK(cudaSetDevice(c->device));
  make_ready(c, timeout_s);
  if (axis >= c->groups.size()) {
    throw Error(Errc::kInternal, "no NCCL group for mesh axis " + std::to_string(axis));
  }
  Scratch s;
  s.comm = c->groups[axis];
  const auto k = static_cast<std::size_t>(group_size);
  s.n_in = s.n_out = n;
  switch (kind) {
    case kRecsearchGpuAllGather: s.n_out = k * n; break;
    case kRecsearchGpuAllReduce: break;
    case kRecsearchGpuReduceScatter: s.n_in = k * n; break;
    case kRecsearchGpuAllToAll: s.n_in = s.n_out = k * n; break;
  }
  reserve(c->dev_in, c->cap_in, std::max<std::size_t>(s.n_in, 1));
  reserve(c->dev_out, c->cap_out, std::max<std::size_t>(s.n_out, 1));
  return s;
}

}  // namespace

std::size_t nccl_id_bytes() { return sizeof(ncclUniqueId); }

void nccl_unique_id(void* id) {
  ncclUniqueId u{};
  RS_NCCL_CHECK(ncclGetUniqueId(&u));
  std::copy_n(reinterpret_cast<const unsigned char*>(&u), sizeof(u),
              static_cast<unsigned char*>(id));
}

RecsearchGpuNccl* nccl_open(const void* id, int size, int rank, int local_rank, int local_size,
                            std::size_t axes, const int* colors, const int* keys) {
  auto c = std::make_unique<RecsearchGpuNccl>();  // aborts whatever was made if this throws
  int devices = 0;
  RS_CUDA_CHECK(cudaGetDeviceCount(&devices));
  c->device = detail::device_for_local_rank(local_rank, local_size, devices);
  RS_CUDA_CHECK(cudaSetDevice(c->device));
  RS_CUDA_CHECK(cudaStreamCreate(&c->stream));
  RS_CUDA_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
  c->colors.assign(colors, colors + axes);
  c->keys.assign(keys, keys + axes);
  ncclUniqueId u{};
  std::copy_n(static_cast<const unsigned char*>(id), sizeof(u),
              reinterpret_cast<unsigned char*>(&u));
  ncclConfig_t cfg = nonblocking_config();
  RS_NCCL_START(ncclCommInitRankConfig(&c->world, size, u, rank, &cfg));
  return c.release();
}

void nccl_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                     int group_size, const float* send, float* recv, std::size_t n,
                     double timeout_s) {
  try {
    const Scratch s = prepare(c, kind, axis, group_size, n, timeout_s);
    // Host to device from pageable memory returns once staged; the stream
    // is idle here (the previous collective completed).
    RS_CUDA_CHECK(cudaMemcpyAsync(c->dev_in, send, s.n_in * sizeof(float), cudaMemcpyHostToDevice,
                                  c->stream));
    const std::string what =
        std::string(collective_name(kind)) + " on mesh axis " + std::to_string(axis);
    // One deadline for the enqueue (which may set up connections lazily on
    // the first use of a group) and the completion.
    const Deadline deadline(timeout_s);
    enqueue(c, kind, s.comm, group_size, n);
    poll_until([&] { return comm_state(s.comm); }, deadline, what + " (enqueue)");
    RS_CUDA_CHECK(cudaEventRecord(c->done, c->stream));
    poll_until([&] { return collective_state(c->done, s.comm); }, deadline, what);
    // Complete on the device: this copy does not wait on any peer.
    RS_CUDA_CHECK(cudaMemcpyAsync(recv, c->dev_out, s.n_out * sizeof(float), cudaMemcpyDeviceToHost,
                                  c->stream));
    RS_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  } catch (...) {
    c->abort();
    throw;
  }
}

double nccl_time_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                            int group_size, std::size_t n, int iters, double timeout_s) {
  try {
    const Scratch s = prepare(c, kind, axis, group_size, n, timeout_s);
    const std::string what =
        "timing " + std::string(collective_name(kind)) + " on mesh axis " + std::to_string(axis);
    // The untimed call first (connections are set up lazily on a group's
    // first use), each enqueue polled as in nccl_collective; the timed
    // calls are enqueued back to back between two events and waited for
    // against one deadline.
    const auto run = [&](int calls, cudaEvent_t before, cudaEvent_t after) {
      const Deadline deadline(timeout_s);
      if (before != nullptr) RS_CUDA_CHECK(cudaEventRecord(before, c->stream));
      for (int i = 0; i < calls; ++i) {
        enqueue(c, kind, s.comm, group_size, n);
        poll_until([&] { return comm_state(s.comm); }, deadline, what + " (enqueue)");
      }
      RS_CUDA_CHECK(cudaEventRecord(after, c->stream));
      poll_until([&] { return collective_state(after, s.comm); }, deadline, what);
    };
    run(1, nullptr, c->done);
    const TimingEvents ev;
    const int calls = std::max(iters, 1);
    run(calls, ev.start(), ev.stop());
    return ev.seconds_per(calls);
  } catch (...) {
    c->abort();
    throw;
  }
}

int nccl_device(const RecsearchGpuNccl* c) noexcept { return c->device; }

cudaStream_t nccl_stream(const RecsearchGpuNccl* c) noexcept { return c->stream; }

void nccl_abort(RecsearchGpuNccl* c) noexcept { c->abort(); }

void nccl_close(RecsearchGpuNccl* c) noexcept { delete c; }

}  // namespace recsearch::exec::gpu

bool RecsearchGpuNccl::finalize_all() noexcept {
  using recsearch::exec::detail::Deadline;
  try {
    const std::vector<ncclComm_t> all = comms();
    for (ncclComm_t comm : all) {
      RS_NCCL_START(ncclCommFinalize(comm));
      poll_until([&] { return recsearch::exec::gpu::comm_state(comm); }, Deadline(timeout_s),
                 "finalizing an NCCL communicator");
    }
    // Quiescent everywhere: destroying frees local resources without blocking.
    for (ncclComm_t comm : all) (void)ncclCommDestroy(comm);
  } catch (...) {
    return false;
  }
  groups.clear();
  world = nullptr;
  return true;
}
