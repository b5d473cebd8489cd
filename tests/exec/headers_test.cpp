// SPDX-License-Identifier: Apache-2.0
// The execution layer's public headers are self-contained and keep MPI,
// CUDA, NCCL, oneTBB and nlohmann_json out (they live in src/exec only).
#include "recsearch/error.hpp"
#include "recsearch/exec/calibrate.hpp"
#include "recsearch/exec/communicator.hpp"
#include "recsearch/exec/driver.hpp"
#include "recsearch/exec/executor.hpp"
#include "recsearch/exec/layout.hpp"
#include "recsearch/exec/phases.hpp"
#include "recsearch/exec/recompute.hpp"
#include "recsearch/exec/redistributor.hpp"

#include <doctest/doctest.h>

#ifdef MPI_VERSION
#error "a public exec header included MPI"
#endif
#if defined(CUDART_VERSION) || defined(__CUDA_RUNTIME_H__)
#error "a public exec header included CUDA"
#endif
#ifdef NCCL_MAJOR
#error "a public exec header included NCCL"
#endif
#ifdef TBB_VERSION_MAJOR
#error "a public exec header included oneTBB"
#endif
#ifdef NLOHMANN_JSON_VERSION_MAJOR
#error "a public exec header included nlohmann_json"
#endif

TEST_CASE("exec headers: a one-rank communicator without any backend") {
  auto comm = recsearch::exec::make_local_communicator({1, 1});
  CHECK(comm->size() == 1);
  CHECK(comm->bytes_sent() == 0.0);
  CHECK_THROWS_AS(recsearch::exec::make_local_communicator({2}), recsearch::Error);
}
