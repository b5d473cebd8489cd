// SPDX-License-Identifier: Apache-2.0
// The NCCL backend, execution-layer side: one GPU per rank, chosen by the
// rank's node-local rank (MPI_Comm_split_type), refused up front as "no
// usable GPU" on every rank when some node has more ranks than devices; the
// NCCL unique id created on rank 0 and broadcast through MPI; one NCCL
// communicator per mesh-axis group (same colors and keys as the MPI groups).
// The NCCL and CUDA calls themselves live in the GPU module
// (nccl/nccl_device.cpp), reached through exec/gpu_api.h, so that only
// processes that run this backend load NCCL and CUDA.
#include <mpi.h>  // MPI: bootstrap of the NCCL unique id

#include <array>
#include <string>
#include <utility>

#include "exec/backends.hpp"
#include "exec/gpu_module.hpp"
#include "exec/mpi/mpi_error.hpp"
#include "exec/nccl/device_choice.hpp"

namespace recsearch::exec::detail {
namespace {

// This rank's place among the ranks of its node (those that share memory).
struct NodeRanks {
  int rank = 0;
  int size = 1;
};

NodeRanks node_ranks() {
  int world_rank = 0;
  RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Comm node = MPI_COMM_NULL;
  RS_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  NodeRanks r;
  RS_MPI_CHECK(MPI_Comm_rank(node, &r.rank));
  RS_MPI_CHECK(MPI_Comm_size(node, &r.size));
  RS_MPI_CHECK(MPI_Comm_free(&node));
  return r;
}

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
    const auto k = static_cast<std::size_t>(mesh().at(axis));
    run(kRecsearchGpuAllGather, axis, send, recv, n);
    count(axis, static_cast<double>((k - 1) * n * sizeof(float)), kAllGather);
  }
  void all_reduce(std::uint32_t axis, float* buf, std::size_t n) override {
    const auto k = static_cast<double>(mesh().at(axis));
    run(kRecsearchGpuAllReduce, axis, buf, buf, n);
    count(axis, 2 * (k - 1) / k * static_cast<double>(n * sizeof(float)), kAllReduce);
  }
  void reduce_scatter(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const auto k = static_cast<std::size_t>(mesh().at(axis));
    run(kRecsearchGpuReduceScatter, axis, send, recv, n);
    count(axis, static_cast<double>((k - 1) * n * sizeof(float)), kReduceScatter);
  }
  void all_to_all(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const auto k = static_cast<std::size_t>(mesh().at(axis));
    run(kRecsearchGpuAllToAll, axis, send, recv, n);
    count(axis, static_cast<double>((k - 1) * n * sizeof(float)), kAllToAll);
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

 private:
  static void check(int rc, const std::array<char, 1024>& err) {
    if (rc != 0) throw Error(Errc::kRuntime, err.data());
  }
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

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::vector<std::int64_t> mesh) {
  return std::make_unique<NcclCommunicator>(std::move(mesh));
}

}  // namespace recsearch::exec::detail
