// SPDX-License-Identifier: Apache-2.0
// The NCCL backend, execution-layer side: one GPU per rank, chosen by the
// rank's node-local rank (MPI_Comm_split_type), refused up front as "no
// usable GPU" on every rank when some node has more ranks than devices; the
// NCCL unique id created on rank 0 and broadcast through MPI; one NCCL
// communicator per mesh-axis group (same colors and keys as the MPI groups).
// The NCCL and CUDA calls themselves live in the GPU module
// (nccl/nccl_device.cpp), reached through exec/gpu_api.h, so that only
// processes that run this backend load NCCL and CUDA. Its device timer
// (exec/device_timer.hpp) reaches the module's timings for calibrate.
#include <mpi.h>  // MPI: bootstrap of the NCCL unique id

#include <array>
#include <string>
#include <utility>

#include "exec/backends.hpp"
#include "exec/device_timer.hpp"
#include "exec/gpu_module.hpp"
#include "exec/mpi/mpi_error.hpp"
#include "exec/nccl/device_choice.hpp"

namespace recsearch::exec::detail {
namespace {

// Every rank refuses when any rank has no device of its own (so that all
// of them end with "no usable GPU" before any NCCL call, instead of the
// others waiting in NCCL for the one that left): one all-reduce of the
// lowest refusing rank.
void refuse_unless_every_rank_has_a_device(const std::string& mine, int rank, int size) {
  int first = mine.empty() ? size : rank;
  int lowest = first;
  RS_MPI_CHECK(MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!mine.empty()) throw Error(Errc::kRuntime, "no usable GPU: " + mine);
  if (lowest < size) {
    throw Error(Errc::kRuntime, "no usable GPU: rank " + std::to_string(lowest) +
                                    " has no device of its own (see its message)");
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::vector<std::int64_t> mesh) : Communicator(std::move(mesh)) {
    world_for_mesh(this->mesh(), rank_, size_);
    std::string why;
    if (!gpu_usable(&why)) throw Error(Errc::kRuntime, "no usable GPU: " + why);
    api_ = gpu_api(&why);
    if (api_->has_nccl == 0) throw Error(Errc::kUsage, "the GPU module has no NCCL backend");

    std::array<char, 1024> err{};
    int devices = 0;
    check(api_->device_count(&devices, err.data(), err.size()), err);
    const NodeRanks node = node_ranks();
    refuse_unless_every_rank_has_a_device(device_refusal(node.rank, node.size, devices), rank_,
                                          size_);

    std::vector<unsigned char> id(api_->nccl_id_bytes);
    if (rank_ == 0) check(api_->nccl_unique_id(id.data(), err.data(), err.size()), err);
    RS_MPI_CHECK(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD));
    std::vector<int> colors, keys;
    for (std::size_t a = 0; a < this->mesh().size(); ++a) {
      const AxisSplit s = axis_split(rank_, this->mesh(), a);
      colors.push_back(s.color);
      keys.push_back(s.key);
    }
    check(api_->nccl_open(id.data(), size_, rank_, node.rank, node.size, colors.size(),
                          colors.data(), keys.data(), &nccl_, err.data(), err.size()),
          err);
  }
  ~NcclCommunicator() override {
    if (nccl_ != nullptr) api_->nccl_close(nccl_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  void all_gather(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    run(kRecsearchGpuAllGather, axis, send, recv, n);
    count(axis, ring_bytes(Collective::AllGather, group(axis), n), kAllGather);
  }
  void all_reduce(std::uint32_t axis, float* buf, std::size_t n) override {
    run(kRecsearchGpuAllReduce, axis, buf, buf, n);
    count(axis, ring_bytes(Collective::AllReduce, group(axis), n), kAllReduce);
  }
  void reduce_scatter(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    run(kRecsearchGpuReduceScatter, axis, send, recv, n);
    count(axis, ring_bytes(Collective::ReduceScatter, group(axis), n), kReduceScatter);
  }
  void all_to_all(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    run(kRecsearchGpuAllToAll, axis, send, recv, n);
    count(axis, ring_bytes(Collective::AllToAll, group(axis), n), kAllToAll);
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
    if (nccl_ != nullptr) api_->nccl_abort(nccl_);
    Runtime::abort_all(code);
  }

  // The device timings of exec/device_timer.hpp, through the module.
  const RecsearchGpuApi& api() const noexcept { return *api_; }
  RecsearchGpuNccl* handle() const noexcept { return nccl_; }
  static void check(int rc, const std::array<char, 1024>& err) {
    if (rc != 0) throw Error(Errc::kRuntime, err.data());
  }

 private:
  double group(std::uint32_t axis) const { return static_cast<double>(mesh().at(axis)); }
  void run(RecsearchGpuCollective kind, std::uint32_t axis, const float* send, float* recv,
           std::size_t n) {
    std::array<char, 1024> err{};
    check(api_->nccl_collective(nccl_, kind, axis, static_cast<int>(mesh().at(axis)), send, recv, n,
                                timeout(), err.data(), err.size()),
          err);
  }

  int rank_ = 0;
  int size_ = 1;
  const RecsearchGpuApi* api_ = nullptr;
  RecsearchGpuNccl* nccl_ = nullptr;
};

class NcclDeviceTimer final : public DeviceTimer {
 public:
  explicit NcclDeviceTimer(NcclCommunicator& comm) : comm_(comm) {}

  GpuDeviceInfo info() override {
    std::array<char, 1024> err{};
    std::array<char, 256> name{};
    std::size_t memory = 0;
    NcclCommunicator::check(comm_.api().device_info(comm_.handle(), name.data(), name.size(),
                                                    &memory, err.data(), err.size()),
                            err);
    return {name.data(), static_cast<double>(memory)};
  }
  double gemm(RecsearchGpuDtype dtype, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
              bool trans_b, int iters) override {
    std::array<char, 1024> err{};
    double s = 0;
    NcclCommunicator::check(
        comm_.api().time_gemm(comm_.handle(), dtype, m, n, k, trans_a ? 1 : 0, trans_b ? 1 : 0,
                              iters, &s, err.data(), err.size()),
        err);
    return s;
  }
  double copy(std::size_t bytes, int iters) override {
    std::array<char, 1024> err{};
    double s = 0;
    NcclCommunicator::check(
        comm_.api().time_copy(comm_.handle(), bytes, iters, &s, err.data(), err.size()), err);
    return s;
  }
  double collective(Collective kind, std::uint32_t axis, std::size_t n, int iters) override {
    std::array<char, 1024> err{};
    double s = 0;
    NcclCommunicator::check(
        comm_.api().time_collective(comm_.handle(), gpu_collective(kind), axis,
                                    static_cast<int>(comm_.mesh().at(axis)), n, iters,
                                    comm_.timeout(), &s, err.data(), err.size()),
        err);
    return s;
  }

 private:
  static RecsearchGpuCollective gpu_collective(Collective kind) {
    switch (kind) {
      case Collective::AllGather: return kRecsearchGpuAllGather;
      case Collective::AllReduce: return kRecsearchGpuAllReduce;
      case Collective::ReduceScatter: return kRecsearchGpuReduceScatter;
      case Collective::AllToAll: break;
    }
    return kRecsearchGpuAllToAll;
  }
  NcclCommunicator& comm_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::vector<std::int64_t> mesh) {
  return std::make_unique<NcclCommunicator>(std::move(mesh));
}

std::unique_ptr<DeviceTimer> device_timer(Communicator& comm) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  if (nccl == nullptr) {
    throw Error(Errc::kUsage, "device timings need the NCCL backend, not " + comm.backend_name());
  }
  return std::make_unique<NcclDeviceTimer>(*nccl);
}

}  // namespace recsearch::exec::detail
