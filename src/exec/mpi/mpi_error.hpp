// Private: checks every MPI call and turns a failure into Error(kRuntime)
// naming the call, the MPI error string, and the file and line.
#pragma once

#include <mpi.h>  // MPI: only src/exec sees it

#include <string>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

[[noreturn]] inline void throw_mpi(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(Errc::kRuntime, std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(len)) +
                                  " (" + file + ":" + std::to_string(line) + ")");
}

}  // namespace recsearch::exec::detail

#define RS_MPI_CHECK(call)                                                          \
  do {                                                                              \
    const int rs_mpi_rc_ = (call);                                                  \
    if (rs_mpi_rc_ != MPI_SUCCESS)                                                  \
      ::recsearch::exec::detail::throw_mpi(rs_mpi_rc_, #call, __FILE__, __LINE__);  \
  } while (0)
