// SPDX-License-Identifier: Apache-2.0
// Collectives of the execution layer over a device mesh, independent of the
// backend (MPI on CPU processes, NCCL on GPUs).
//
// Ranks form the plan's mesh: rank = mixed-radix number of its axis
// coordinates, axis 0 most significant. Each collective runs within one
// mesh-axis group: the ranks that differ only in their coordinate on that
// axis, ordered by it. Buffers are host memory of f32 elements; a backend
// that computes elsewhere stages them. Every backend counts the bytes each
// rank sends under the standard ring algorithms (all-gather (k-1)·n for an
// n-element contribution; reduce-scatter and all-to-all (k-1)/k·n of an
// n-element input; all-reduce 2(k-1)/k·n), which is what the cost model
// prices. Errors are Error(kRuntime) naming the call, file and line; a
// collective that does not finish within the timeout throws too, so that the
// caller can end every rank instead of hanging.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace recsearch::exec {

enum class Backend : std::uint8_t { Mpi, Nccl };

class Communicator {
 public:
  virtual ~Communicator() = default;

  [[nodiscard]] virtual int rank() const noexcept = 0;
  [[nodiscard]] virtual int size() const noexcept = 0;
  [[nodiscard]] virtual std::string backend_name() const = 0;
  // Sizes of the mesh axes the groups were made for.
  [[nodiscard]] const std::vector<std::int64_t>& mesh() const noexcept { return mesh_; }

  // recv (k·count) = every group member's send (count), in axis order.
  virtual void all_gather(std::uint32_t axis, const float* send, float* recv,
                          std::size_t count) = 0;
  // In place sum over the group.
  virtual void all_reduce(std::uint32_t axis, float* buf, std::size_t count) = 0;
  // send holds k blocks of count; recv gets the sum of block `coordinate`.
  virtual void reduce_scatter(std::uint32_t axis, const float* send, float* recv,
                              std::size_t count) = 0;
  // send holds k blocks of count, block i for member i; recv block i from member i.
  virtual void all_to_all(std::uint32_t axis, const float* send, float* recv,
                          std::size_t count) = 0;

  // Over all ranks, not counted as plan traffic (checking, timing).
  virtual void barrier() = 0;
  // Rank 0 receives every rank's count elements, by rank; other ranks pass recv = nullptr.
  virtual void gather_to_root(const float* send, float* recv, std::size_t count) = 0;
  // Maximum over all ranks of a value (e.g. elapsed seconds, error flags).
  [[nodiscard]] virtual double max_over_ranks(double v) = 0;
  // Ends every rank at once with this exit code (MPI_Abort); does not return.
  [[noreturn]] virtual void abort_all(int code) = 0;

  // Point to point between ranks of the whole job (numbered as MPI_COMM_WORLD),
  // for pipeline boundaries: send() returns at once (the buffer must stay
  // alive until finish_sends()), recv() waits against the timeout. Messages
  // between two ranks with the same tag arrive in order. Counted apart from
  // the collectives (p2p_bytes()). Error(kUsage) on backends without them.
  virtual void send(int world_rank, const float* data, std::size_t count, int tag);
  virtual void recv(int world_rank, float* data, std::size_t count, int tag);
  virtual void finish_sends();
  [[nodiscard]] double p2p_bytes() const noexcept { return p2p_bytes_; }

  // Seconds a collective may take before it counts as failed (0: forever).
  void set_timeout(double seconds) noexcept { timeout_s_ = seconds; }
  [[nodiscard]] double timeout() const noexcept { return timeout_s_; }

  // Bytes this rank sent in counted collectives, in total and per axis.
  [[nodiscard]] double bytes_sent() const noexcept;
  [[nodiscard]] const std::vector<double>& bytes_per_axis() const noexcept { return bytes_; }
  // Counted collectives so far, by kind: all-gather, all-reduce,
  // reduce-scatter, all-to-all (with more than one member).
  [[nodiscard]] const std::array<std::int64_t, 4>& calls() const noexcept { return calls_; }
  void reset_counters() noexcept;

 protected:
  explicit Communicator(std::vector<std::int64_t> mesh);
  // Records the ring-algorithm bytes of one collective (see file comment).
  enum CallKind { kAllGather, kAllReduce, kReduceScatter, kAllToAll };
  void count(std::uint32_t axis, double bytes, CallKind kind) noexcept;
  void count_p2p(double bytes) noexcept { p2p_bytes_ += bytes; }

 private:
  std::vector<std::int64_t> mesh_;
  std::vector<double> bytes_;
  std::array<std::int64_t, 4> calls_{};
  double p2p_bytes_ = 0;
  double timeout_s_ = 0;
};

// A communicator of one rank (every mesh axis of size 1): the reference run.
[[nodiscard]] std::unique_ptr<Communicator> make_local_communicator(
    std::vector<std::int64_t> mesh = {});

// Whether this build has the backend (MPI, or NCCL with CUDA).
[[nodiscard]] bool backend_available(Backend b) noexcept;
// Whether a CUDA device is usable here; if not and why is given, the reason.
[[nodiscard]] bool gpu_usable(std::string* why = nullptr);

// Process-wide runtime of a backend: MPI_Init_thread on construction,
// MPI_Finalize on destruction. One per process, before any communicator.
class Runtime {
 public:
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] int world_rank() const noexcept { return rank_; }
  [[nodiscard]] int world_size() const noexcept { return size_; }
  // Ends every process with this code (MPI_Abort); does not return.
  [[noreturn]] static void abort_all(int code) noexcept;
  // Collective over every process: the largest `code` and the lowest rank
  // holding a non-zero one (-1 if none). Lets every rank agree on an input
  // error before any other traffic and end normally, all with that code.
  // Ends every rank (exit 4) if some rank does not arrive within timeout_s
  // (0: wait forever).
  [[nodiscard]] std::pair<int, int> agree(int code, double timeout_s) const;

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Communicator over every process of the Runtime, with one group per axis of
// `mesh`, whose product must be the world size (Error(kPlan) otherwise).
// Nccl: one GPU per rank (rank modulo the visible devices), the NCCL unique
// id broadcast through MPI, one ncclCommSplit per axis; Error(kRuntime) when
// no GPU is usable. Throws Error(kUsage) for a backend this build lacks.
[[nodiscard]] std::unique_ptr<Communicator> make_communicator(Backend b,
                                                              std::vector<std::int64_t> mesh);
// The same over one of `groups` consecutive blocks of ranks (a pipeline's
// device groups): the world splits into blocks of n = product of `mesh`
// ranks (world size = groups·n, Error(kPlan) otherwise) and this rank's
// block gets the mesh; rank() and size() are within the block, barrier,
// gather_to_root and max_over_ranks run over it. Collective over every rank.
// MPI only (Error(kUsage) for NCCL).
[[nodiscard]] std::unique_ptr<Communicator> make_group_communicator(Backend b,
                                                                    std::vector<std::int64_t> mesh,
                                                                    int groups);

}  // namespace recsearch::exec
