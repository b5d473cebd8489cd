// SPDX-License-Identifier: Apache-2.0
// Backend-independent parts of the Communicator: byte counters, the
// one-rank communicator of the reference run, and the choice of backend.
#include <algorithm>
#include <numeric>
#include <utility>

#include "exec/backends.hpp"
#include "recsearch/error.hpp"
#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec {

Communicator::Communicator(std::vector<std::int64_t> mesh)
    : mesh_(std::move(mesh)), bytes_(mesh_.size(), 0.0) {}

double Communicator::bytes_sent() const noexcept {
  return std::accumulate(bytes_.begin(), bytes_.end(), 0.0);
}

void Communicator::reset_counters() noexcept {
  bytes_.assign(mesh_.size(), 0.0);
  calls_.fill(0);
  p2p_bytes_ = 0;
}

void Communicator::send(int, const float*, std::size_t, int) {
  throw Error(Errc::kUsage, "point-to-point sends need the MPI backend");
}
void Communicator::recv(int, float*, std::size_t, int) {
  throw Error(Errc::kUsage, "point-to-point sends need the MPI backend");
}
void Communicator::finish_sends() {}

void Communicator::count(std::uint32_t axis, double bytes, CallKind kind) noexcept {
  if (axis >= bytes_.size() || mesh_[axis] < 2) return;
  bytes_[axis] += bytes;
  ++calls_[kind];
}

namespace detail {

AxisSplit axis_split(int rank, const std::vector<std::int64_t>& mesh, std::size_t a) {
  std::int64_t below = 1;
  for (std::size_t b = a + 1; b < mesh.size(); ++b) below *= mesh[b];
  const std::int64_t digit = (rank / below) % mesh[a];
  return {static_cast<int>(rank - digit * below), static_cast<int>(digit)};
}

}  // namespace detail

namespace {

// Every axis has size 1: each collective is a copy.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::vector<std::int64_t> mesh) : Communicator(std::move(mesh)) {
    for (const auto k : this->mesh()) {
      if (k != 1) throw Error(Errc::kPlan, "a one-rank run needs every mesh axis of size 1");
    }
  }
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  std::string backend_name() const override { return "local"; }
  void all_gather(std::uint32_t, const float* send, float* recv, std::size_t n) override {
    std::copy(send, send + n, recv);
  }
  void all_reduce(std::uint32_t, float*, std::size_t) override {}
  void reduce_scatter(std::uint32_t, const float* send, float* recv, std::size_t n) override {
    std::copy(send, send + n, recv);
  }
  void all_to_all(std::uint32_t, const float* send, float* recv, std::size_t n) override {
    std::copy(send, send + n, recv);
  }
  void barrier() override {}
  void gather_to_root(const float* send, float* recv, std::size_t n) override {
    std::copy(send, send + n, recv);
  }
  double max_over_ranks(double v) override { return v; }
  [[noreturn]] void abort_all(int code) override { Runtime::abort_all(code); }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(std::vector<std::int64_t> mesh) {
  return std::make_unique<LocalCommunicator>(std::move(mesh));
}

bool backend_available(Backend b) noexcept {
  switch (b) {
    case Backend::Mpi: return detail::kHaveMpi;
    case Backend::Nccl: return detail::kHaveNccl;
  }
  return false;
}

bool gpu_usable(std::string* why) { return detail::gpu_usable(why); }

std::unique_ptr<Communicator> make_communicator(Backend b, std::vector<std::int64_t> mesh) {
  if (!backend_available(b)) {
    throw Error(Errc::kUsage, std::string("this build has no ") +
                                  (b == Backend::Mpi ? "MPI" : "NCCL/CUDA") + " backend");
  }
  return b == Backend::Mpi ? detail::make_mpi_communicator(std::move(mesh))
                           : detail::make_nccl_communicator(std::move(mesh));
}

std::unique_ptr<Communicator> make_group_communicator(Backend b, std::vector<std::int64_t> mesh,
                                                      int groups) {
  if (b != Backend::Mpi)
    throw Error(Errc::kUsage, "pipelined plans run on the MPI backend (--backend mpi)");
  if (!backend_available(b)) throw Error(Errc::kUsage, "this build has no MPI backend");
  return detail::make_mpi_communicator(std::move(mesh), groups);
}

}  // namespace recsearch::exec
