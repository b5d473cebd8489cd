// SPDX-License-Identifier: Apache-2.0
// The MPI backend: CPU processes, one MPI communicator per mesh-axis group
// (MPI_Comm_split), every collective non-blocking and polled against the
// timeout so that a peer that died or stalls ends the run instead of
// hanging it. Also the process runtime (MPI_Init_thread / MPI_Finalize).
#include <mpi.h>  // MPI: only src/exec sees it

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <utility>

#include "exec/backends.hpp"
#include "exec/mpi/mpi_error.hpp"
#include "exec/poll.hpp"

namespace recsearch::exec {

Runtime::Runtime(int* argc, char*** argv) {
  int initialized = 0;
  RS_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized == 0) {
    int provided = 0;
    RS_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  }
  // Errors come back as codes (checked) instead of aborting inside MPI.
  RS_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  RS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

Runtime::~Runtime() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized == 0) (void)MPI_Finalize();
}

std::pair<int, int> Runtime::agree(int code, double timeout_s) const {
  // Polled like every collective: a rank that never arrives must not hang the others.
  const auto wait = [&](MPI_Request& r) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      int done = 0;
      RS_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
      if (done != 0) return;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (timeout_s > 0 && waited > timeout_s) {
        std::fprintf(stderr,
                     "recsearch exec: [rank %d] the ranks did not all finish reading the graph and "
                     "plan within %g s (a rank stalls or is missing) [E401]\n",
                     rank_, timeout_s);
        abort_all(4);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  int in[2] = {code, -(code != 0 ? rank_ : size_)};  // max of -rank: the lowest failing rank
  int out[2] = {0, 0};
  MPI_Request r = MPI_REQUEST_NULL;
  RS_MPI_CHECK(MPI_Iallreduce(in, out, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r));
  wait(r);
  return {out[0], -out[1] == size_ ? -1 : -out[1]};
}

void Runtime::abort_all(int code) noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  // Open MPI's launcher can crash when many ranks abort at the same
  // instant (several peers timing out together): later ranks wait a little,
  // and are usually ended by the first one's abort before their own.
  int rank = 0;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS && rank > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + 50 * std::min(rank, 40)));
  }
  int initialized = 0;
  if (MPI_Initialized(&initialized) == MPI_SUCCESS && initialized != 0) {
    (void)MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

namespace detail {

namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::vector<std::int64_t> mesh, int groups) : Communicator(std::move(mesh)) {
    if (groups <= 1) {
      world_for_mesh(this->mesh(), rank_, size_);
    } else {
      // A pipeline's device group: the world's block of consecutive ranks.
      int world_rank = 0, world_size = 0;
      RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
      RS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
      std::int64_t n = 1;
      for (const auto k : this->mesh()) n *= k;
      if (n * groups != world_size)
        throw Error(Errc::kPlan, std::to_string(groups) + " device groups of " + std::to_string(n) +
                                     " devices but " + std::to_string(world_size) +
                                     " MPI ranks run them");
      RS_MPI_CHECK(
          MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(world_rank / n), world_rank, &base_));
      RS_MPI_CHECK(MPI_Comm_set_errhandler(base_, MPI_ERRORS_RETURN));
      rank_ = static_cast<int>(world_rank % n);
      size_ = static_cast<int>(n);
    }
    for (std::size_t a = 0; a < this->mesh().size(); ++a) {
      const AxisSplit s = axis_split(rank_, this->mesh(), a);
      MPI_Comm c = MPI_COMM_NULL;
      RS_MPI_CHECK(MPI_Comm_split(base_, s.color, s.key, &c));
      RS_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
      groups_.push_back(c);
    }
  }
  ~MpiCommunicator() override {
    for (MPI_Request& r : sends_) (void)MPI_Request_free(&r);
    for (MPI_Comm& c : groups_) (void)MPI_Comm_free(&c);
    if (base_ != MPI_COMM_WORLD) (void)MPI_Comm_free(&base_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  void all_gather(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const double k = group_size(axis);
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Iallgather(send, to_int(n), MPI_FLOAT, recv, to_int(n), MPI_FLOAT,
                                groups_.at(axis), &r));
    const double bytes = ring_bytes(Collective::AllGather, k, n);
    wait(r, "all-gather", axis, bytes);
    count(axis, bytes, kAllGather);
  }
  void all_reduce(std::uint32_t axis, float* buf, std::size_t n) override {
    const double k = group_size(axis);
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, buf, to_int(n), MPI_FLOAT, MPI_SUM, groups_.at(axis), &r));
    const double bytes = ring_bytes(Collective::AllReduce, k, n);
    wait(r, "all-reduce", axis, bytes);
    count(axis, bytes, kAllReduce);
  }
  void reduce_scatter(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const double k = group_size(axis);
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(
        MPI_Ireduce_scatter_block(send, recv, to_int(n), MPI_FLOAT, MPI_SUM, groups_.at(axis), &r));
    const double bytes = ring_bytes(Collective::ReduceScatter, k, n);
    wait(r, "reduce-scatter", axis, bytes);
    count(axis, bytes, kReduceScatter);
  }
  void all_to_all(std::uint32_t axis, const float* send, float* recv, std::size_t n) override {
    const double k = group_size(axis);
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Ialltoall(send, to_int(n), MPI_FLOAT, recv, to_int(n), MPI_FLOAT,
                               groups_.at(axis), &r));
    const double bytes = ring_bytes(Collective::AllToAll, k, n);
    wait(r, "all-to-all", axis, bytes);
    count(axis, bytes, kAllToAll);
  }
  void barrier() override {
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Ibarrier(base_, &r));
    wait(r, "barrier", kWorld);
  }
  void gather_to_root(const float* send, float* recv, std::size_t n) override {
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Igather(send, to_int(n), MPI_FLOAT, recv, to_int(n), MPI_FLOAT, 0, base_, &r));
    wait(r, "gather", kWorld, static_cast<double>(n) * sizeof(float));
  }
  double max_over_ranks(double v) override {
    double out = v;
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, base_, &r));
    wait(r, "max over ranks", kWorld);
    return out;
  }
  [[noreturn]] void abort_all(int code) override { Runtime::abort_all(code); }

  void send(int world_rank, const float* data, std::size_t n, int tag) override {
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Isend(data, to_int(n), MPI_FLOAT, world_rank, tag, MPI_COMM_WORLD, &r));
    sends_.push_back(r);
    count_p2p(static_cast<double>(n) * sizeof(float));
  }
  void recv(int world_rank, float* data, std::size_t n, int tag) override {
    MPI_Request r = MPI_REQUEST_NULL;
    RS_MPI_CHECK(MPI_Irecv(data, to_int(n), MPI_FLOAT, world_rank, tag, MPI_COMM_WORLD, &r));
    wait(r, ("receive from rank " + std::to_string(world_rank)).c_str(), kWorld,
         static_cast<double>(n) * sizeof(float));
  }
  void finish_sends() override {
    for (MPI_Request& r : sends_) wait(r, "send", kWorld);
    sends_.clear();
  }

 private:
  static constexpr std::uint32_t kWorld = 0xFFFFFFFFu;

  double group_size(std::uint32_t axis) const {
    if (axis >= mesh().size()) throw Error(Errc::kInternal, "no mesh axis " + std::to_string(axis));
    return static_cast<double>(mesh()[axis]);
  }
  static int to_int(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error(Errc::kRuntime,
                  "buffer of " + std::to_string(n) + " elements exceeds MPI's count");
    }
    return static_cast<int>(n);
  }
  // Polls the request until done; gives up after the timeout (poll.hpp).
  // Open MPI's shared-memory path moves a large message in fragments, a
  // batch per MPI_Test: sleeping between polls (as this loop did, backing
  // off to 2 ms) made collectives above ~1 MiB ten times slower per byte.
  // So the wait spins (MPI_Test, then sched_yield) for as long as moving
  // `bytes` should take at a pessimistic 100 MB/s, plus 2 ms for a peer
  // that arrives a little late; past that the peer is busy elsewhere and
  // sleeps of at most 200 us leave the cores to oversubscribed ranks that
  // compute, while a transfer that then starts still progresses every
  // 200 us. MPI_Wait would spin without a timeout, so a stalled peer would
  // hang every rank.
  void wait(MPI_Request& r, const char* what, std::uint32_t axis, double bytes = 0) {
    constexpr double kPessimisticBytesPerUs = 100.0;  // 100 MB/s
    PollPacing pacing;
    pacing.spin =
        std::chrono::microseconds(2000) +
        std::chrono::microseconds(static_cast<std::int64_t>(bytes / kPessimisticBytesPerUs));
    pacing.polls_per_yield = 64;
    pacing.first_sleep = std::chrono::microseconds(10);
    pacing.max_sleep = std::chrono::microseconds(200);
    poll_until(
        [&] {
          int done = 0;
          RS_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
          return done != 0 ? Progress::kDone : Progress::kPending;
        },
        Deadline(timeout()),
        std::string(what) + (axis == kWorld ? std::string(" over all ranks")
                                            : " on mesh axis " + std::to_string(axis)),
        pacing);
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Comm base_ = MPI_COMM_WORLD;  // the world, or this rank's device group
  std::vector<MPI_Comm> groups_;
  std::vector<MPI_Request> sends_;  // point-to-point sends not yet waited for
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(std::vector<std::int64_t> mesh, int groups) {
  return std::make_unique<MpiCommunicator>(std::move(mesh), groups);
}

NodeRanks node_ranks() {
  int world_rank = 0;
  RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Comm node = MPI_COMM_NULL;
  RS_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  NodeRanks r;
  const int rank_rc = MPI_Comm_rank(node, &r.rank);
  const int size_rc = MPI_Comm_size(node, &r.size);
  RS_MPI_CHECK(MPI_Comm_free(&node));
  RS_MPI_CHECK(rank_rc);
  RS_MPI_CHECK(size_rc);
  return r;
}

NodeLayout node_layout() {
  int world_rank = 0, world_size = 1;
  RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  RS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  const NodeRanks mine = node_ranks();
  // Blocked placement, checked on every rank: every node holds the same
  // count L, and this rank is number world_rank mod L of node world_rank / L
  // (the node's local ranks are ordered by world rank, so this fixes the
  // node's whole block).
  const int per_node = mine.size;
  int in[3] = {per_node, -per_node, mine.rank == world_rank % per_node ? 1 : 0};
  int lowest[3] = {0, 0, 0};
  RS_MPI_CHECK(MPI_Allreduce(in, lowest, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  NodeLayout l;
  const bool equal = lowest[0] == -lowest[1] && world_size % per_node == 0;
  l.per_node = equal ? per_node : 1;
  l.nodes = equal ? world_size / per_node : world_size;
  l.blocked = equal && lowest[2] == 1;
  return l;
}

}  // namespace detail
}  // namespace recsearch::exec
