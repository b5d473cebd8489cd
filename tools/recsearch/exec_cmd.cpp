// SPDX-License-Identifier: Apache-2.0
// `recsearch exec GRAPH PLAN --backend mpi|nccl`: runs a plan under mpirun
// (docs/exec.md; docs/design.md, Execution layer). Only option parsing lives here; the run,
// the checks and the report are exec::run_exec in the library.
#include <memory>
#include <string>

#include "recsearch/error.hpp"
#include "recsearch/exec/driver.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {

void add_exec_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<exec::ExecArgs>();
  auto backend = std::make_shared<std::string>("mpi");
  auto fault = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "run PLAN for GRAPH on every rank of an MPI job (start it with mpirun)");
  cmd->add_option("GRAPH", a->graph, "graph JSON file")->required();
  cmd->add_option("PLAN", a->plan, "plan JSON file")->required();
  cmd->add_option("--backend", *backend, "mpi (CPU processes, default) or nccl (one GPU per rank)")
      ->check(CLI::IsMember({"mpi", "nccl"}));
  cmd->add_flag("--check", a->check,
                "compare the outputs with a one-device run, and the bytes sent with the plan's");
  cmd->add_option("--steps", a->steps, "forward passes, or training steps, to time (default 1)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--train", a->train,
                "run training steps: forward, backward, gradient synchronisation, optimizer step");
  cmd->add_option("--optimizer", a->optimizer, "with --train: sgd (default), sgd-momentum or adam")
      ->check(CLI::IsMember({"sgd", "sgd-momentum", "adam"}));
  cmd->add_option("--lr", a->lr, "with --train: learning rate (default 0.01)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cluster", a->cluster,
                  "cluster file (e.g. from `recsearch calibrate`) the predicted times are "
                  "computed on (default: the plan's saved cluster)")
      ->type_name("FILE");
  cmd->add_option("--bucket-mb", a->bucket_mib,
                  "with --train: MiB of parameter gradients all-reduced together (default 25, "
                  "0 = one collective per parameter)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--seed", a->seed, "seed of the random inputs and parameters (default 1)");
  cmd->add_option("--timeout", a->timeout_s,
                  "seconds a collective may take before every rank stops (default 60, 0 = none)")
      ->check(CLI::Range(0.0, 1e9));
  CLI::Option* fault_opt =
      cmd->add_option(
             "--fault", *fault,
             "testing: RANK:KIND[:OP], KIND throw, kill or stall before operator OP, or grad (OP's "
             "backward gives doubled gradients), or recompute (OP's recomputed forward doubles "
             "its outputs), boundary (a pipeline stage sends doubled boundary gradients back), or "
             "tied (its share of a tied parameter's gradient sum across pipeline groups is "
             "doubled)")
          ->type_name("RANK:KIND[:OP]");
  reg.push_back({cmd, [=] {
                   if (!a->train && (cmd->count("--optimizer") > 0 || cmd->count("--lr") > 0 ||
                                     cmd->count("--bucket-mb") > 0))
                     throw Error(Errc::kUsage, "--optimizer, --lr and --bucket-mb need --train");
                   a->backend = *backend == "nccl" ? exec::Backend::Nccl : exec::Backend::Mpi;
                   if (fault_opt->count() > 0) a->fault = *fault;
                   return exec::run_exec(*a, nullptr, nullptr);
                 }});
}

}  // namespace recsearch::cli
