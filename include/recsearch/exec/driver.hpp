// SPDX-License-Identifier: Apache-2.0
// `recsearch exec`: runs a plan under mpirun on every rank and reports
// (docs/design.md, Execution layer; options and output: docs/exec.md). Kept in the library so that
// the CLI stays a thin option parser and tests can drive the same code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec {

struct ExecArgs {
  std::string graph;
  std::string plan;
  Backend backend = Backend::Mpi;
  bool check = false;  // compare with a one-device run on rank 0, bytes with the prediction
  int steps = 1;       // forward passes (or training steps) timed
  // Training (--train): each step is a forward pass, the backward pass, the
  // gradient synchronisation and an optimizer step (docs/exec.md, Training).
  bool train = false;
  std::string optimizer = "sgd";  // sgd, sgd-momentum or adam
  double lr = 0.01;
  // Parameter gradients all-reduced together in buckets of this many MiB
  // (ExecOptions::bucket_elements; DDP's default 25); 0: one collective per
  // parameter.
  double bucket_mib = 25;
  // The cluster file (with its "cost" object, as `recsearch calibrate`
  // writes it) on which the cost model's predicted times are computed and
  // printed next to the measured ones; empty: the cluster the plan file saved
  // and the graph's cost settings.
  std::string cluster;
  std::uint64_t seed = 1;  // input values
  double timeout_s = 60;   // per collective; 0 = wait forever
  // Testing failure handling: "RANK:KIND[:OP]" with KIND throw (an error on
  // that rank before operator OP), kill (SIGKILL there) or stall (that rank
  // sleeps there, its peers time out); with --train also grad (operator OP's
  // backward gives doubled gradients on that rank, which --check must catch).
  std::optional<std::string> fault;
};

// Runs on every rank of an MPI job (or alone) and returns the exit code:
// 0 ok; 1 bad input (graph, plan, or a plan whose devices or stated bytes
// do not match), 2 usage (unsupported operators, missing backend), 4 a
// runtime failure (collective error or timeout, device, a check that
// failed). Any failure on one rank ends every rank (MPI_Abort) with that
// code; input errors are found before the first collective.
[[nodiscard]] int run_exec(const ExecArgs& a, int* argc, char*** argv);

}  // namespace recsearch::exec
