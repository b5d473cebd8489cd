// SPDX-License-Identifier: Apache-2.0
// Private: how `recsearch exec` and `recsearch calibrate` turn whatever a
// rank's work throws into one message and exit code (recsearch::Error: its
// own code; out of memory and any other exception: 4), and end every rank
// when one fails after the ranks have started talking.
#pragma once

#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "recsearch/error.hpp"
#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec::detail {

// body() returns an exit code; what it throws goes to on_error(message,
// code), whose result is returned.
template <class Body, class OnError>
int guarded(Body&& body, OnError&& on_error) {
  try {
    return body();
  } catch (const Error& e) {
    return on_error(std::string(e.what()), exit_code(e.code()));
  } catch (const std::bad_alloc&) {
    return on_error(std::string("out of memory"), 4);
  } catch (const std::exception& e) {
    return on_error(std::string("internal error: ") + e.what(), 4);
  }
}

// Prints "<tool>: [rank R] <message>" in one write (so that ranks' lines do
// not interleave) and ends every rank with `code` (through comm when there
// is one, else through the runtime).
[[noreturn]] inline void fail_every_rank(Communicator* comm, const char* tool, int rank,
                                         const std::string& message, int code) {
  std::cerr << (std::string(tool) + ": [rank " + std::to_string(rank) + "] " + message + "\n")
            << std::flush;
  if (comm != nullptr) comm->abort_all(code);
  Runtime::abort_all(code);
}

}  // namespace recsearch::exec::detail
