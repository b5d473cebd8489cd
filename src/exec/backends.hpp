// SPDX-License-Identifier: Apache-2.0
// Private: the backend factories, each compiled only when its library is
// found (meson features mpi, cuda, nccl); the others are stubs that throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec::detail {

#ifdef RECSEARCH_HAVE_MPI
inline constexpr bool kHaveMpi = true;
#else
inline constexpr bool kHaveMpi = false;
#endif
#ifdef RECSEARCH_HAVE_NCCL
inline constexpr bool kHaveNccl = true;
#else
inline constexpr bool kHaveNccl = false;
#endif

// groups > 1: over this rank's block of world size / groups consecutive ranks.
std::unique_ptr<Communicator> make_mpi_communicator(std::vector<std::int64_t> mesh, int groups = 1);
std::unique_ptr<Communicator> make_nccl_communicator(std::vector<std::int64_t> mesh);

// Splits the world into one group per mesh axis (MPI or NCCL alike): the
// color of a rank on axis a is its rank with coordinate a set to 0, its key
// the coordinate.
struct AxisSplit {
  int color;
  int key;
};
[[nodiscard]] AxisSplit axis_split(int rank, const std::vector<std::int64_t>& mesh, std::size_t a);

// The four collectives, and the bytes one rank sends in one over k members
// with n elements per member block under the ring algorithms (all-gather,
// reduce-scatter and all-to-all (k-1)·n, all-reduce 2(k-1)/k·n, f32): what
// every backend counts (communicator.hpp) and the cost model prices.
enum class Collective : std::uint8_t { AllGather, AllReduce, ReduceScatter, AllToAll };
[[nodiscard]] inline double ring_bytes(Collective c, double k, std::size_t n) noexcept {
  const double block = static_cast<double>(n) * sizeof(float);
  return c == Collective::AllReduce ? 2 * (k - 1) / k * block : (k - 1) * block;
}

// This rank's place among the ranks of its node (those that share memory,
// MPI_Comm_split_type); MPI builds, after the Runtime.
struct NodeRanks {
  int rank = 0;
  int size = 1;
};
[[nodiscard]] NodeRanks node_ranks();

// How the job's ranks lie on its nodes: `per_node` ranks on each of `nodes`
// nodes, and whether they fill the nodes in blocks (node j holds world ranks
// j·per_node to (j+1)·per_node - 1, mpirun's default placement), so that the
// mesh {nodes, per_node} puts the node-local ranks on its last axis.
// blocked is false where the nodes hold different counts or any other
// placement. Collective over every rank.
struct NodeLayout {
  int nodes = 1;
  int per_node = 1;
  bool blocked = true;
};
[[nodiscard]] NodeLayout node_layout();

// Whether a GPU is usable here (CUDA builds; false otherwise), with the reason.
[[nodiscard]] bool gpu_usable(std::string* why);

}  // namespace recsearch::exec::detail
