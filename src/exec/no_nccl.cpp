// SPDX-License-Identifier: Apache-2.0
// Builds without NCCL/CUDA: the NCCL backend reports that it is missing and
// no GPU is ever usable.
#include "exec/backends.hpp"
#include "exec/device_timer.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

std::unique_ptr<Communicator> make_nccl_communicator(std::vector<std::int64_t>) {
  throw Error(Errc::kUsage, "this build has no NCCL/CUDA backend");
}

std::unique_ptr<DeviceTimer> device_timer(Communicator&) {
  throw Error(Errc::kUsage, "this build has no NCCL/CUDA backend");
}

}  // namespace recsearch::exec::detail
