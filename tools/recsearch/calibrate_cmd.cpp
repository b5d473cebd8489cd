// SPDX-License-Identifier: Apache-2.0
// `recsearch calibrate --np N -o cluster.json` under mpirun: measures this
// machine (its CPU ranks, or with --backend nccl its GPUs) and writes a
// cluster file (docs/exec.md, Calibration). Only option parsing lives here;
// the measurements are exec::run_calibrate.
#include <memory>
#include <string>

#include "recsearch/exec/calibrate.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {

void add_calibrate_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<exec::CalibrateArgs>();
  auto backend = std::make_shared<std::string>("mpi");
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure GEMM, memory and collective speeds over the ranks of an MPI job (start it with "
      "mpirun) and write a cluster file");
  cmd->add_option("--backend", *backend,
                  "mpi (the CPU ranks and MPI, default) or nccl (one GPU per rank: cuBLAS GEMMs, "
                  "device copies and NCCL collectives on device buffers)")
      ->check(CLI::IsMember({"mpi", "nccl"}));
  cmd->add_option("--np", a->expected_ranks, "ranks mpirun started (checked; default: any)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-o,--output", a->output, "cluster JSON file to write (recsearch.cluster)")
      ->type_name("FILE");
  cmd->add_option("--samples", a->samples, "also write every measurement and fit as JSON")
      ->type_name("FILE");
  cmd->add_option("--reps", a->reps,
                  "timed repetitions per measurement, median kept (nccl: back-to-back calls, mean "
                  "kept; default 7)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--timeout", a->timeout_s,
                  "seconds a collective may take before every rank stops (default 60, 0 = none)")
      ->check(CLI::Range(0.0, 1e9));
  reg.push_back({cmd, [=] {
                   a->backend = *backend == "nccl" ? exec::Backend::Nccl : exec::Backend::Mpi;
                   return exec::run_calibrate(*a, nullptr, nullptr);
                 }});
}

}  // namespace recsearch::cli
