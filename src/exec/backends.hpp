// SPDX-License-Identifier: Apache-2.0
// Private: the backend factories, each compiled only when its library is
// found (meson features mpi, cuda, nccl); the others are stubs that throw.
#pragma once

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

// Whether a GPU is usable here (CUDA builds; false otherwise), with the reason.
[[nodiscard]] bool gpu_usable(std::string* why);

}  // namespace recsearch::exec::detail
