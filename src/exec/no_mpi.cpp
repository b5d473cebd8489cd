// SPDX-License-Identifier: Apache-2.0
// Builds without MPI: one process, no MPI backend (make_communicator says
// so); the reference run and the layout arithmetic still work.
#include <cstdio>
#include <cstdlib>

#include "exec/backends.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec {

Runtime::Runtime(int*, char***) {}
Runtime::~Runtime() = default;

std::pair<int, int> Runtime::agree(int code, double) const { return {code, code != 0 ? 0 : -1}; }

void Runtime::abort_all(int code) noexcept {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

namespace detail {
std::unique_ptr<Communicator> make_mpi_communicator(std::vector<std::int64_t>, int) {
  throw Error(Errc::kUsage, "this build has no MPI backend");
}
NodeRanks node_ranks() { return {}; }
NodeLayout node_layout() { return {}; }
}  // namespace detail

}  // namespace recsearch::exec
