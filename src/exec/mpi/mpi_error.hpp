// SPDX-License-Identifier: Apache-2.0
// Private: checks every MPI call and turns a failure into Error(kRuntime)
// naming the call, the MPI error string, and the file and line; and the
// world check both backends make before building their axis groups.
#pragma once

#include <mpi.h>  // MPI: only src/exec sees it

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

[[noreturn]] inline void throw_mpi(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(Errc::kRuntime, std::string(call) +
                                  " failed: " + std::string(text, static_cast<std::size_t>(len)) +
                                  " (" + file + ":" + std::to_string(line) + ")");
}

}  // namespace recsearch::exec::detail

#define RS_MPI_CHECK(call)                                                         \
  do {                                                                             \
    const int rs_mpi_rc_ = (call);                                                 \
    if (rs_mpi_rc_ != MPI_SUCCESS)                                                 \
      ::recsearch::exec::detail::throw_mpi(rs_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

namespace recsearch::exec::detail {

// This process's rank and the world size, after checking that the world
// has exactly as many ranks as the mesh has devices (Error kPlan if not).
inline void world_for_mesh(const std::vector<std::int64_t>& mesh, int& rank, int& size) {
  RS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  RS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::int64_t n = 1;
  for (const auto k : mesh) n *= k;
  if (n != size) {
    throw Error(Errc::kPlan, "the plan's mesh has " + std::to_string(n) + " devices but " +
                                 std::to_string(size) + " MPI ranks run it");
  }
}

}  // namespace recsearch::exec::detail
