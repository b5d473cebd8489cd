// The NCCL backend: one GPU per rank, the NCCL unique id created on rank 0
// and broadcast through MPI, one NCCL communicator per mesh-axis group
// (ncclCommSplit of the world communicator, same colors and keys as the MPI
// groups). Host buffers are staged through device memory; the collectives
// run on one stream that is polled against the timeout (ncclCommAbort on
// expiry, so that a dead peer cannot hang the run).
#include <mpi.h>   // MPI: bootstrap of the NCCL unique id
#include <nccl.h>  // NCCL: the GPU collectives

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "exec/backends.hpp"
#include "exec/cuda/cuda_error.hpp"
#include "exec/mpi/mpi_error.hpp"

#define RS_NCCL_CHECK(call)                                                                  \
  do {                                                                                       \
    const ncclResult_t rs_nccl_rc_ = (call);                                                 \
    if (rs_nccl_rc_ != ncclSuccess)                                                          \
      ::recsearch::exec::detail::throw_gpu(ncclGetErrorString(rs_nccl_rc_), #call, __FILE__, \
                                           __LINE__);                                        \
  } while (0)

namespace recsearch::exec::detail {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::vector<std::int64_t> mesh) : Communicator(std::move(mesh)) {
    RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    RS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    std::int64_t n = 1;
    for (const auto k : this->mesh()) n *= k;
    if (n != size_) {
      throw Error(Errc::kPlan, "the plan's mesh has " + std::to_string(n) + " devices but " +
                                   std::to_string(size_) + " ranks run it");
    }
    std::string why;
    if (!gpu_usable(&why)) throw Error(Errc::kRuntime, "no usable GPU: " + why);
    int devices = 0;
    RS_CUDA_CHECK(cudaGetDeviceCount(&devices));
    RS_CUDA_CHECK(cudaSetDevice(rank_ % devices));
    RS_CUDA_CHECK(cudaStreamCreate(&stream_));

    ncclUniqueId id{};
    if (rank_ == 0) RS_NCCL_CHECK(ncclGetUniqueId(&id));
    RS_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    RS_NCCL_CHECK(ncclCommInitRank(&world_, size_, id, rank_));
    for (std::size_t a = 0; a < this->mesh().size(); ++a) {
      const AxisSplit s = axis_split(rank_, this->mesh(), a);
      ncclComm_t c = nullptr;
      RS_NCCL_CHECK(ncclCommSplit(world_, s.color, s.key, &c, nullptr));
      groups_.push_back(c);
    }
  }
  ~NcclCommunicator() override {
    for (ncclComm_t c : groups_) (void)ncclCommDestroy(c);
    if (world_ != nullptr) (void)ncclCommDestroy(world_);
    if (dev_in_ != nullptr) (void)cudaFree(dev_in_);
    if (dev_out_ != nullptr) (void)cudaFree(dev_out_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  void all_gather(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const auto k = static_cast<std::size_t>(mesh().at(axis));
    stage(send, n, k * n);
    RS_NCCL_CHECK(ncclAllGather(dev_in_, dev_out_, n, ncclFloat, groups_.at(axis), stream_));
    finish(recv, k * n, "all-gather", axis);
    count(axis, static_cast<double>((k - 1) * n * sizeof(float)), kAllGather);
  }
  void all_reduce(std::uint32_t axis, float* buf, std::size_t n) override {
    const auto k = static_cast<double>(mesh().at(axis));
    stage(buf, n, n);
    RS_NCCL_CHECK(ncclAllReduce(dev_in_, dev_out_, n, ncclFloat, ncclSum, groups_.at(axis), stream_));
    finish(buf, n, "all-reduce", axis);
    count(axis, 2 * (k - 1) / k * static_cast<double>(n * sizeof(float)), kAllReduce);
  }
  void reduce_scatter(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const auto k = static_cast<std::size_t>(mesh().at(axis));
    stage(send, k * n, n);
    RS_NCCL_CHECK(ncclReduceScatter(dev_in_, dev_out_, n, ncclFloat, ncclSum, groups_.at(axis), stream_));
    finish(recv, n, "reduce-scatter", axis);
    count(axis, static_cast<double>((k - 1) * n * sizeof(float)), kReduceScatter);
  }
  void all_to_all(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const auto k = static_cast<int>(mesh().at(axis));
    stage(send, static_cast<std::size_t>(k) * n, static_cast<std::size_t>(k) * n);
    RS_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < k; ++peer) {
      const std::size_t off = static_cast<std::size_t>(peer) * n;
      RS_NCCL_CHECK(ncclSend(dev_in_ + off, n, ncclFloat, peer, groups_.at(axis), stream_));
      RS_NCCL_CHECK(ncclRecv(dev_out_ + off, n, ncclFloat, peer, groups_.at(axis), stream_));
    }
    RS_NCCL_CHECK(ncclGroupEnd());
    finish(recv, static_cast<std::size_t>(k) * n, "all-to-all", axis);
    count(axis, static_cast<double>(static_cast<std::size_t>(k - 1) * n * sizeof(float)), kAllToAll);
  }
  void barrier() override { RS_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  void gather_to_root(const float* send, float* recv, std::size_t n) override {
    RS_MPI_CHECK(MPI_Gather(send, static_cast<int>(n), MPI_FLOAT, recv, static_cast<int>(n),
                            MPI_FLOAT, 0, MPI_COMM_WORLD));
  }
  double max_over_ranks(double v) override {
    double out = v;
    RS_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return out;
  }
  [[noreturn]] void abort_all(int code) override {
    for (ncclComm_t c : groups_) (void)ncclCommAbort(c);
    Runtime::abort_all(code);
  }

 private:
  void reserve(float*& p, std::size_t& cap, std::size_t n) {
    if (n <= cap) return;
    if (p != nullptr) RS_CUDA_CHECK(cudaFree(p));
    p = nullptr;
    RS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)));
    cap = n;
  }
  void stage(const float* host, std::size_t n_in, std::size_t n_out) {
    reserve(dev_in_, cap_in_, std::max<std::size_t>(n_in, 1));
    reserve(dev_out_, cap_out_, std::max<std::size_t>(n_out, 1));
    RS_CUDA_CHECK(cudaMemcpyAsync(dev_in_, host, n_in * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  void finish(float* host, std::size_t n, const char* what, std::uint32_t axis) {
    RS_CUDA_CHECK(cudaMemcpyAsync(host, dev_out_, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) RS_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      RS_NCCL_CHECK(ncclCommGetAsyncError(groups_.at(axis), &async));
      RS_NCCL_CHECK(async);
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout() > 0 && waited > timeout()) {
        for (ncclComm_t c : groups_) (void)ncclCommAbort(c);
        groups_.clear();
        throw Error(Errc::kRuntime, std::string(what) + " on mesh axis " + std::to_string(axis) +
                                        " did not finish within " + std::to_string(timeout()) + " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t world_ = nullptr;
  std::vector<ncclComm_t> groups_;
  float* dev_in_ = nullptr;
  float* dev_out_ = nullptr;
  std::size_t cap_in_ = 0;
  std::size_t cap_out_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::vector<std::int64_t> mesh) {
  return std::make_unique<NcclCommunicator>(std::move(mesh));
}

}  // namespace recsearch::exec::detail
