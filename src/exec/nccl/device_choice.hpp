// SPDX-License-Identifier: Apache-2.0
// Private: which CUDA device a rank of the NCCL backend binds. The rule is
// the node-local rank (from MPI_Comm_split_type, never the world rank: with
// --map-by node or uneven ranks per node the world rank modulo the device
// count makes two ranks of one node collide). NCCL refuses one device twice
// in a communicator ("Duplicate GPU detected", ncclInvalidUsage), so a node
// with more ranks than devices is refused up front as "no usable GPU", which
// the tests read as a skip. Pure (no CUDA, no MPI): the rule and its refusal
// are unit-tested with the device count injected; both the execution layer
// (before any collective) and the GPU module (before cudaSetDevice) apply it.
#pragma once

#include <string>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

// The refusal, or "" when node-local rank local_rank of local_size ranks on a
// node that shows `devices` CUDA devices can have one to itself.
[[nodiscard]] inline std::string device_refusal(int local_rank, int local_size, int devices) {
  if (devices <= 0) return "no CUDA device";
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    return "node-local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size) +
           " is out of range";
  }
  if (local_size > devices) {
    return std::to_string(local_size) + " ranks share " + std::to_string(devices) +
           " device(s) on this node (NCCL needs a device of its own for each rank: run at most " +
           std::to_string(devices) + " rank(s) per node, or --backend mpi)";
  }
  return {};
}

// The device of that rank: its node-local rank. Throws Error(kRuntime,
// "no usable GPU: ...") with the refusal.
[[nodiscard]] inline int device_for_local_rank(int local_rank, int local_size, int devices) {
  const std::string why = device_refusal(local_rank, local_size, devices);
  if (!why.empty()) throw Error(Errc::kRuntime, "no usable GPU: " + why);
  return local_rank;
}

}  // namespace recsearch::exec::detail
