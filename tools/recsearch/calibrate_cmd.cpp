// SPDX-License-Identifier: Apache-2.0
// `recsearch calibrate --np N -o cluster.json` under mpirun: measures this
// machine and writes a cluster file (docs/exec.md, Calibration). Only option
// parsing lives here; the measurements are exec::run_calibrate.
#include <memory>

#include "recsearch/exec/calibrate.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {

void add_calibrate_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<exec::CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure GEMM, memory and collective speeds over the ranks of an MPI job (start it with "
      "mpirun) and write a cluster file");
  cmd->add_option("--np", a->expected_ranks, "ranks mpirun started (checked; default: any)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-o,--output", a->output, "cluster JSON file to write (recsearch.cluster)")
      ->type_name("FILE");
  cmd->add_option("--samples", a->samples, "also write every measurement and fit as JSON")
      ->type_name("FILE");
  cmd->add_option("--reps", a->reps, "timed repetitions per measurement, median kept (default 7)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--timeout", a->timeout_s,
                  "seconds a collective may take before every rank stops (default 60, 0 = none)")
      ->check(CLI::Range(0.0, 1e9));
  reg.push_back({cmd, [=] { return exec::run_calibrate(*a, nullptr, nullptr); }});
}

}  // namespace recsearch::cli
