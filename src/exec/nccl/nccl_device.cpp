// GPU module, NCCL part: one rank's device, stream, world communicator and
// one ncclCommSplit group per mesh axis (same colors and keys as the MPI
// groups). Host buffers are staged through device memory; each collective
// runs on the one stream, polled against the timeout (ncclCommAbort on
// expiry, so that a dead peer cannot hang the run). The unique id is
// broadcast by the caller (MPI), so the module needs no MPI.
#include <nccl.h>  // NCCL: the GPU collectives

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/cuda/cuda_error.hpp"
#include "exec/cuda/module.hpp"

#define RS_NCCL_CHECK(call)                                                                  \
  do {                                                                                       \
    const ncclResult_t rs_nccl_rc_ = (call);                                                 \
    if (rs_nccl_rc_ != ncclSuccess)                                                          \
      ::recsearch::exec::detail::throw_gpu(ncclGetErrorString(rs_nccl_rc_), #call, __FILE__, \
                                           __LINE__);                                        \
  } while (0)

struct RecsearchGpuNccl {
  cudaStream_t stream = nullptr;
  ncclComm_t world = nullptr;
  std::vector<ncclComm_t> groups;
  float* dev_in = nullptr;
  float* dev_out = nullptr;
  std::size_t cap_in = 0;
  std::size_t cap_out = 0;

  RecsearchGpuNccl() = default;
  RecsearchGpuNccl(const RecsearchGpuNccl&) = delete;
  RecsearchGpuNccl& operator=(const RecsearchGpuNccl&) = delete;
  ~RecsearchGpuNccl() {
    for (ncclComm_t c : groups) (void)ncclCommDestroy(c);
    if (world != nullptr) (void)ncclCommDestroy(world);
    if (dev_in != nullptr) (void)cudaFree(dev_in);
    if (dev_out != nullptr) (void)cudaFree(dev_out);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  void abort() noexcept {
    for (ncclComm_t c : groups) (void)ncclCommAbort(c);
    groups.clear();
  }
};

namespace recsearch::exec::gpu {
namespace {

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

}  // namespace

std::size_t nccl_id_bytes() { return sizeof(ncclUniqueId); }

void nccl_unique_id(void* id) {
  ncclUniqueId u{};
  RS_NCCL_CHECK(ncclGetUniqueId(&u));
  std::copy_n(reinterpret_cast<const unsigned char*>(&u), sizeof(u), static_cast<unsigned char*>(id));
}

RecsearchGpuNccl* nccl_open(const void* id, int size, int rank, std::size_t axes,
                            const int* colors, const int* keys) {
  auto c = std::make_unique<RecsearchGpuNccl>();
  int devices = 0;
  RS_CUDA_CHECK(cudaGetDeviceCount(&devices));
  RS_CUDA_CHECK(cudaSetDevice(rank % devices));
  RS_CUDA_CHECK(cudaStreamCreate(&c->stream));
  ncclUniqueId u{};
  std::copy_n(static_cast<const unsigned char*>(id), sizeof(u), reinterpret_cast<unsigned char*>(&u));
  RS_NCCL_CHECK(ncclCommInitRank(&c->world, size, u, rank));
  for (std::size_t a = 0; a < axes; ++a) {
    ncclComm_t g = nullptr;
    RS_NCCL_CHECK(ncclCommSplit(c->world, colors[a], keys[a], &g, nullptr));
    c->groups.push_back(g);
  }
  return c.release();
}

void nccl_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                     int group_size, const float* send, float* recv, std::size_t n,
                     double timeout_s) {
  if (axis >= c->groups.size()) {
    throw Error(Errc::kRuntime, "no NCCL group for mesh axis " + std::to_string(axis) +
                                    " (the communicators were aborted)");
  }
  const ncclComm_t comm = c->groups[axis];
  const auto k = static_cast<std::size_t>(group_size);
  std::size_t n_in = n, n_out = n;
  switch (kind) {
    case kRecsearchGpuAllGather: n_out = k * n; break;
    case kRecsearchGpuAllReduce: break;
    case kRecsearchGpuReduceScatter: n_in = k * n; break;
    case kRecsearchGpuAllToAll: n_in = n_out = k * n; break;
  }
  reserve(c->dev_in, c->cap_in, std::max<std::size_t>(n_in, 1));
  reserve(c->dev_out, c->cap_out, std::max<std::size_t>(n_out, 1));
  RS_CUDA_CHECK(cudaMemcpyAsync(c->dev_in, send, n_in * sizeof(float), cudaMemcpyHostToDevice, c->stream));
  switch (kind) {
    case kRecsearchGpuAllGather:
      RS_NCCL_CHECK(ncclAllGather(c->dev_in, c->dev_out, n, ncclFloat, comm, c->stream));
      break;
    case kRecsearchGpuAllReduce:
      RS_NCCL_CHECK(ncclAllReduce(c->dev_in, c->dev_out, n, ncclFloat, ncclSum, comm, c->stream));
      break;
    case kRecsearchGpuReduceScatter:
      RS_NCCL_CHECK(ncclReduceScatter(c->dev_in, c->dev_out, n, ncclFloat, ncclSum, comm, c->stream));
      break;
    case kRecsearchGpuAllToAll:
      RS_NCCL_CHECK(ncclGroupStart());
      for (int peer = 0; peer < group_size; ++peer) {
        const std::size_t off = static_cast<std::size_t>(peer) * n;
        RS_NCCL_CHECK(ncclSend(c->dev_in + off, n, ncclFloat, peer, comm, c->stream));
        RS_NCCL_CHECK(ncclRecv(c->dev_out + off, n, ncclFloat, peer, comm, c->stream));
      }
      RS_NCCL_CHECK(ncclGroupEnd());
      break;
  }
  RS_CUDA_CHECK(cudaMemcpyAsync(recv, c->dev_out, n_out * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(c->stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) RS_CUDA_CHECK(q);
    ncclResult_t async = ncclSuccess;
    RS_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    RS_NCCL_CHECK(async);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s) {
      c->abort();
      throw Error(Errc::kRuntime, std::string(collective_name(kind)) + " on mesh axis " +
                                      std::to_string(axis) + " did not finish within " +
                                      std::to_string(timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void nccl_abort(RecsearchGpuNccl* c) noexcept { c->abort(); }

void nccl_close(RecsearchGpuNccl* c) noexcept { delete c; }

}  // namespace recsearch::exec::gpu
