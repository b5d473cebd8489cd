// SPDX-License-Identifier: Apache-2.0
// `recsearch exec` on every rank (exec/driver.hpp), in four steps: load
// (the graph as a recsearch::Problem, the plan on its own cluster), validate
// (without traffic), agree (one all-reduce, so that bad input ends every
// rank before the first collective), execute (the forward pass, or with
// --train whole training steps, `steps` times; with --check the outputs, or
// the losses and trained parameters, against a one-device run on rank 0 and
// the bytes each rank sent against the bytes predicted from the plan).
#include "recsearch/exec/driver.hpp"

#include <oneapi/tbb/global_control.h>
#include <nlohmann/json.hpp>  // reads the plan file's stated redistributions

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "exec/guard.hpp"
#include "exec/halo.hpp"
#include "recsearch/error.hpp"
#include "recsearch/exec/executor.hpp"
#include "recsearch/exec/layout.hpp"
#include "recsearch/exec/phases.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/training.hpp"
#include "recsearch/problem.hpp"

namespace recsearch::exec {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// measured / predicted, or "-" where the model predicts no time.
std::string ratio_text(double measured, double predicted) {
  return predicted > 0 ? fmt("%.2f", measured / predicted) : std::string("-");
}

struct Fault {
  int rank = -1;
  std::string kind;
  std::int64_t op = 0;
};

Fault parse_fault(const std::string& s) {
  Fault f;
  const auto c1 = s.find(':');
  if (c1 == std::string::npos)
    throw Error(Errc::kUsage, "--fault '" + s + "': expected RANK:KIND[:OP]");
  const auto c2 = s.find(':', c1 + 1);
  try {
    f.rank = std::stoi(s.substr(0, c1));
    f.kind = s.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    if (c2 != std::string::npos) f.op = std::stoll(s.substr(c2 + 1));
  } catch (const std::exception&) {
    throw Error(Errc::kUsage, "--fault '" + s + "': expected RANK:KIND[:OP]");
  }
  if (f.kind != "throw" && f.kind != "kill" && f.kind != "stall" && f.kind != "grad" &&
      f.kind != "halo" && f.kind != "recompute" && f.kind != "boundary" && f.kind != "gather" &&
      f.kind != "tied") {
    throw Error(
        Errc::kUsage,
        "--fault '" + s +
            "': KIND is throw, kill, stall, grad, halo, recompute, boundary, gather or tied");
  }
  return f;
}

// Forward bytes per device of the layout and output collectives the plan
// file states in /redistributions, if it lists any.
std::optional<double> stated_forward_bytes(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::kParse, e.what(), "", source);
  }
  if (!j.is_object() || !j.contains("redistributions")) return std::nullopt;
  const auto& r = j["redistributions"];
  if (!r.is_array()) throw Error(Errc::kSchema, "must be an array", "/redistributions", source);
  double sum = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::string at = "/redistributions/" + std::to_string(i);
    if (!r[i].is_object() || !r[i].contains("bytes") || !r[i]["bytes"].is_number()) {
      throw Error(Errc::kSchema, "needs a numeric 'bytes'", at, source);
    }
    const std::string reason = r[i].value("reason", "layout");
    if (r[i].value("phase", "forward") == "forward" && (reason == "layout" || reason == "output")) {
      sum += r[i]["bytes"].get<double>();
    }
  }
  return sum;
}

// A forward pass alone of a plan with ZeRO stage 3 (on every parameter or
// some) is refused (exit 2): it would not gather as the training step
// does. `at`: the plan's JSON path (a pipeline stage's, or empty).
void refuse_forward_zero3(const ir::Graph& g, const plan::Plan& p, const std::string& source,
                          const std::string& at = "") {
  if (p.mode != Mode::Train) return;
  const std::vector<int> zero = plan::parameter_zero(g, p.training);
  if (std::none_of(zero.begin(), zero.end(), [](int z) { return z >= 3; })) return;
  throw Error(
      Errc::kUsage,
      "exec runs a plan with ZeRO stage 3 only as training steps that gather its "
      "parameters in both passes (--train); search with --zero 2 or lower to run its "
      "forward pass",
      at + (plan::mixed_zero(g, p.training) ? "/training/zero_params" : "/training/zero_stage"),
      source);
}

// A plan exec cannot run as it is priced is refused (exit 2) rather than
// run as something else: ZeRO 3 (and ZeRO stages per parameter) outside
// --train (refuse_forward_zero3), and microbatches outside --train (which
// runs them, accumulating their gradients). Under --train every parameter
// runs its own stage (docs/exec.md, ZeRO). Recomputation runs under --train
// (ExecOptions::recompute); a forward pass alone recomputes nothing.
void refuse_unsupported_training(const ir::Graph& g, const plan::Plan& p, const std::string& source,
                                 bool train) {
  if (p.mode != Mode::Train) return;
  if (!train) refuse_forward_zero3(g, p, source);
  if (p.training.microbatches > 1 && !train)
    throw Error(Errc::kUsage,
                "exec runs a plan with microbatches (it has " +
                    std::to_string(p.training.microbatches) +
                    ") only as training steps that accumulate their gradients (--train); search "
                    "with --microbatches 1 to run its forward pass",
                "/training/microbatches", source);
}

// Forward bytes per device the cost model counts (layout and output
// events), with every element at the executor's 4 bytes.
// With per_step, each event times its occurrences in a step (microbatches).
double model_forward_bytes(const ir::Graph& g, const plan::Evaluation& ev, bool f32_elements,
                           bool per_step = false) {
  double sum = 0;
  for (const auto& e : ev.events) {
    if (e.phase != cost::Phase::Forward) continue;
    if (e.reason != plan::CommReason::Layout && e.reason != plan::CommReason::Output) continue;
    const double width = static_cast<double>(ir::dtype_size(g.tensor(e.tensor).dtype));
    sum += (f32_elements ? e.bytes * 4.0 / width : e.bytes) * (per_step ? e.repeats : 1);
  }
  return sum;
}

// Halo bytes per device the cost model counts in one phase, at 4 bytes an
// element (with per_step, times each event's occurrences in a step).
double model_halo_bytes(const ir::Graph& g, const plan::Evaluation& ev,
                        cost::Phase phase = cost::Phase::Forward, bool per_step = false) {
  double sum = 0;
  for (const auto& e : ev.events) {
    if (e.phase != phase || e.reason != plan::CommReason::Halo) continue;
    sum += e.bytes * 4.0 / static_cast<double>(ir::dtype_size(g.tensor(e.tensor).dtype)) *
           (per_step ? e.repeats : 1);
  }
  return sum;
}

// Everything a rank needs before the first collective, read and checked
// without traffic.
struct Inputs {
  std::optional<Problem> problem;
  std::optional<Cluster> cluster;
  plan::Plan plan;
  plan::Evaluation eval;
  std::optional<Fault> fault;
  // The cost model's time per phase of a step (a forward pass without
  // --train), on the cluster named by `cluster_source`.
  PhaseTimes predicted;
  std::string cluster_source;
  // A plan with a "pipeline" section (docs/pipeline.md): its stages.
  std::optional<plan::PipelinePlan> pipeline;
  // --train of a plan with m > 1 microbatches: the graph of one microbatch
  // (batch / m), which the executor runs m times per step.
  std::optional<plan::MicrobatchView> micro;
};

// The plan's stated redistributions, if it lists any, must be the ones its
// cuts imply: a plan edited by hand (or for another graph) is caught here.
void check_stated_bytes(const ir::Graph& g, const plan::Evaluation& ev, const std::string& text,
                        const std::string& source) {
  const double model_stated = model_forward_bytes(g, ev, false);
  const auto stated = stated_forward_bytes(text, source);
  if (!stated || std::abs(*stated - model_stated) <= 1e-6 * std::max(1.0, model_stated) + 0.5)
    return;
  throw Error(Errc::kPlan,
              "the plan states " + fmt("%.0f", *stated) +
                  " forward bytes per device, but its cuts imply " + fmt("%.0f", model_stated),
              "/redistributions", source);
}

// The operators, backend and device this build and machine can run.
void check_runnable(const ExecArgs& a, const Problem& problem, const plan::Plan& p) {
  if (const auto bad = unsupported_operators(problem.graph(), problem.spaces(), p); !bad.empty()) {
    std::string msg = std::to_string(bad.size()) + " operator(s) cannot be executed:";
    for (const auto& b : bad) msg += "\n  " + b;
    throw Error(Errc::kUsage, msg, "", problem.source());
  }
  // The halo exchange is point to point, which only the MPI backend has.
  for (ir::OpId o = 0; a.backend != Backend::Mpi && o < p.cuts.size(); ++o) {
    for (const int c : p.cuts[o]) {
      if (c == plan::kReplicated) continue;
      const algebra::LoopDim& loop = problem.spaces()[o].loops.at(static_cast<std::size_t>(c));
      if (loop.role == algebra::DimRole::Window && loop.halo > 0)
        throw Error(Errc::kUsage,
                    problem.graph().op(o).name + " (" + problem.graph().op(o).type +
                        ") has a cut window dim, whose halo exchange runs on the MPI backend only",
                    "", problem.source());
    }
  }
  if (!backend_available(a.backend)) {
    throw Error(Errc::kUsage, std::string("this build has no ") +
                                  (a.backend == Backend::Mpi ? "MPI" : "NCCL/CUDA") + " backend");
  }
  if (std::string why; a.backend == Backend::Nccl && !gpu_usable(&why)) {
    throw Error(Errc::kRuntime, "no usable GPU: " + why);
  }
}

// What exec does not train of an interleaved plan (exit 2, before any
// traffic): a parameter read by two stages of one group (each stage's
// executor would hold its own copy and its own share of the gradient; the
// model counts one per stage too). Its forward pass alone runs whatever
// the stages read. The plan reader has checked that the microbatches come
// in rounds of one per group.
void refuse_interleaved(const ExecArgs& a, const ir::Graph& g, const plan::PipelinePlan& pp,
                        const std::string& psrc) {
  if (!a.train) return;
  std::vector<std::size_t> stage_of(g.num_operators(), 0);
  for (std::size_t j = 0; j < pp.stages.size(); ++j)
    for (ir::OpId o = pp.stages[j].first; o < pp.stages[j].last && o < g.num_operators(); ++o)
      stage_of[o] = j;
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(t);
    if (x.kind != ir::TensorKind::Parameter) continue;
    for (const ir::OpId c : x.consumers) {
      for (const ir::OpId d : x.consumers) {
        const plan::Stage& sc = pp.stages[stage_of[c]];
        const plan::Stage& sd = pp.stages[stage_of[d]];
        if (stage_of[c] < stage_of[d] && sc.group == sd.group)
          throw Error(Errc::kUsage,
                      "exec does not train a parameter read by two stages of one device group "
                      "('" +
                          x.name + "' in stages " + std::to_string(stage_of[c]) + " and " +
                          std::to_string(stage_of[d]) + ")",
                      "/pipeline/stages", psrc);
      }
    }
  }
}

// A pipelined plan: its stages on the whole cluster, what exec runs of it
// (the forward passes in the schedule's order, or with --train whole
// training steps, on MPI), the world size and every stage's operators.
void load_pipeline(const ExecArgs& a, Inputs& in, const std::string& ptext, const std::string& psrc,
                   int world_size) {
  const ir::Graph& g = in.problem->graph();
  in.pipeline = io::parse_pipeline(ptext, psrc, g, in.problem->spaces(), *in.cluster);
  const plan::PipelinePlan& pp = *in.pipeline;
  if (pp.virtual_stages > 1) refuse_interleaved(a, g, pp, psrc);
  if (a.backend != Backend::Mpi)
    throw Error(Errc::kUsage, "pipelined plans run on the MPI backend (--backend mpi)");
  if (in.cluster->num_devices() != world_size)
    throw Error(Errc::kPlan,
                "the plan is for " + std::to_string(in.cluster->num_devices()) + " devices but " +
                    std::to_string(world_size) + " ranks run it (mpirun -np " +
                    std::to_string(in.cluster->num_devices()) + ")",
                "/pipeline", psrc);
  if (pp.microbatches > 1 &&
      !plan::microbatch_view(g, in.problem->spaces(), pp.microbatches).has_value())
    throw Error(Errc::kPlan, plan::microbatch_error(g, pp.microbatches), "/pipeline/microbatches",
                psrc);
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    const plan::Stage& st = pp.stages[j];
    const plan::StageGraph sg = plan::stage_graph(g, in.problem->spaces(), st.first, st.last);
    if (!a.train)
      refuse_forward_zero3(sg.graph, st.plan, psrc, "/pipeline/stages/" + std::to_string(j));
    if (const auto bad = unsupported_operators(sg.graph, sg.spaces, st.plan); !bad.empty()) {
      std::string msg = std::to_string(bad.size()) + " operator(s) of stage " + std::to_string(j) +
                        " cannot be executed:";
      for (const auto& b : bad) msg += "\n  " + b;
      throw Error(Errc::kUsage, msg, "", in.problem->source());
    }
  }
}

// Reads the graph (through recsearch::Problem, as every tool does) and the
// plan, on the cluster the plan was made for, and checks that this job can
// run it.
Inputs load_inputs(const ExecArgs& a, int world_size) {
  if (a.steps < 1) throw Error(Errc::kUsage, "--steps must be at least 1");
  Inputs in;
  if (a.fault) in.fault = parse_fault(*a.fault);
  const std::string psrc = a.plan == "-" ? "<stdin>" : a.plan;
  in.problem = Problem::read(a.graph);
  const std::string ptext = io::read_text_file(a.plan);
  CostParams cost = in.problem->cost();
  if (a.cluster.empty()) {
    in.cluster = plan_file_cluster(ptext, psrc);
    if (!in.cluster) throw Error(Errc::kPlan, "the plan has no mesh", "/mesh", psrc);
    in.cluster_source = "the plan's cluster";
  } else {
    in.cluster = io::read_cluster_file(a.cluster, &cost);
    in.cluster_source = "cluster " + a.cluster;
  }
  if (a.train && a.optimizer != "sgd" && a.optimizer != "sgd-momentum" && a.optimizer != "adam")
    throw Error(Errc::kUsage, "--optimizer '" + a.optimizer + "': sgd, sgd-momentum or adam");
  if (a.train && !(a.lr > 0)) throw Error(Errc::kUsage, "--lr must be positive");
  if (!(a.bucket_mib >= 0) || a.bucket_mib > 1e6)
    throw Error(Errc::kUsage, "--bucket-mb must be between 0 and 1e6");
  if (io::plan_has_pipeline(ptext, psrc)) {
    load_pipeline(a, in, ptext, psrc, world_size);
    if (a.train) {
      // The model's 1F1B step (stages, sends, bubble, per-step sync) in training.
      plan::PipelinePlan trained = *in.pipeline;
      for (plan::Stage& st : trained.stages) st.plan.mode = Mode::Train;
      in.predicted.step_s = plan::evaluate_pipeline(in.problem->graph(), in.problem->spaces(),
                                                    *in.cluster, trained, cost)
                                .summary.step_time_s;
    }
    return in;
  }
  in.plan = in.problem->parse_plan(ptext, psrc, *in.cluster);
  refuse_unsupported_training(in.problem->graph(), in.plan, psrc, a.train);
  if (a.train && in.plan.mode == Mode::Train && in.plan.training.microbatches > 1) {
    const std::int64_t m = in.plan.training.microbatches;
    in.micro = plan::microbatch_view(in.problem->graph(), in.problem->spaces(), m);
    if (!in.micro)
      throw Error(Errc::kPlan, plan::microbatch_error(in.problem->graph(), m),
                  "/training/microbatches", psrc);
  }
  if (in.plan.num_devices() != world_size) {
    throw Error(Errc::kPlan,
                "the plan is for " + std::to_string(in.plan.num_devices()) + " devices but " +
                    std::to_string(world_size) + " ranks run it (mpirun -np " +
                    std::to_string(in.plan.num_devices()) + ")",
                "/mesh", psrc);
  }
  // Default coefficients: only the bytes of the evaluation are used here,
  // and they do not depend on them. A training run is compared with the
  // model's training step whatever mode the plan was searched for.
  plan::Plan evaluated = in.plan;
  if (a.train) evaluated.mode = Mode::Train;
  in.eval = plan::evaluate(in.problem->graph(), in.problem->spaces(), *in.cluster, evaluated,
                           CostParams{});
  // The times: a forward pass alone is an inference step's forward.
  plan::Plan timed = in.plan;
  timed.mode = a.train ? Mode::Train : Mode::Infer;
  in.predicted = predicted_phase_times(
      in.problem->graph(),
      plan::evaluate(in.problem->graph(), in.problem->spaces(), *in.cluster, timed, cost),
      timed.mode);
  check_stated_bytes(in.problem->graph(), in.eval, ptext, psrc);
  check_runnable(a, *in.problem, in.plan);
  return in;
}

// The hook that makes one rank fail on purpose (--fault) before an operator.
std::function<void(ir::OpId)> fault_hook(const Fault& f) {
  // A wrong backward, recomputation or boundary gradient, not a failure.
  if (f.kind != "throw" && f.kind != "kill" && f.kind != "stall") return {};
  return [f](ir::OpId o) {
    if (static_cast<std::int64_t>(o) != f.op) return;
    if (f.kind == "throw")
      throw Error(Errc::kRuntime, "injected failure before operator " + std::to_string(o));
    if (f.kind == "kill") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::hours(1));  // stall
  };
}

// Ranks sharing a machine share its cores: oneTBB gets this rank's share.
std::size_t threads_per_rank() {
  int local_ranks = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local_ranks = std::max(1, std::atoi(v));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<std::size_t>(std::max(1, cores / local_ranks));
}

struct Timing {
  double total_s = 0;
  double min_s = 1e300;
};

// Runs the forward pass `steps` times, each timed on the slowest rank.
Timing run_steps(Executor& ex, Communicator& comm, int steps) {
  Timing t;
  for (int s = 0; s < steps; ++s) {
    comm.reset_counters();
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    ex.run();
    const double local =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double slowest = comm.max_over_ranks(local);
    t.total_s += slowest;
    t.min_s = std::min(t.min_s, slowest);
  }
  return t;
}

// The report's header, step times and bytes (measured against predicted).
// `halo` is this rank's point-to-point bytes, measured and predicted (the
// largest predicted on any rank third).
void report_run(std::ostream& out, const ExecArgs& a, const Inputs& in, Communicator& comm,
                const Timing& t, const BytePrediction& predicted, bool all_bytes_ok,
                const std::array<double, 3>& halo, const PlanLayouts& layouts) {
  const plan::Plan& p = in.plan;
  bool sync_batch_norm = false;
  for (ir::OpId o = 0; o < in.problem->graph().num_operators(); ++o) {
    const ir::Operator& op = in.problem->graph().op(o);
    sync_batch_norm =
        sync_batch_norm ||
        (op.kind == ir::OpKind::BatchNorm && detail::batch_norm_batch_stats(op, layouts.train) &&
         !detail::batch_norm_stat_axes(layouts.ops[o].inputs[0]).empty());
  }
  const double measured = comm.bytes_sent();
  const double model = model_forward_bytes(in.problem->graph(), in.eval, true);
  std::string mesh_text;
  for (std::size_t i = 0; i < p.mesh.size(); ++i)
    mesh_text += (i ? "x" : "") + std::to_string(p.mesh[i].size);
  out << "recsearch exec: " << in.problem->graph().name() << " on " << comm.size()
      << " rank(s), mesh " << (mesh_text.empty() ? "1" : mesh_text) << ", backend "
      << comm.backend_name() << ", " << a.steps << " step(s)\n";
  out << "  step time (forward, slowest rank): mean " << fmt("%.3f", t.total_s / a.steps * 1e3)
      << " ms, min " << fmt("%.3f", t.min_s * 1e3) << " ms\n";
  out << "  predicted by the cost model (" << in.cluster_source << "): forward "
      << fmt("%.3f", in.predicted.forward_s * 1e3) << " ms; measured/predicted "
      << ratio_text(t.total_s / a.steps, in.predicted.forward_s) << "\n";
  out << "  bytes sent per rank, one forward pass, f32 elements:\n"
      << "    measured (rank 0)              " << fmt("%.0f", measured) << "\n"
      << "    predicted from the plan layouts " << fmt("%.0f", predicted.total)
      << (all_bytes_ok ? " (every rank matches)" : " (MISMATCH on some rank)") << "\n"
      << "    cost model forward collectives " << fmt("%.0f", model)
      << (std::abs(model - predicted.total) <= 0.5 ? " (equal)"
          : sync_batch_norm
              ? " (differs: exec all-reduces BatchNorm's batch statistics, which the model "
                "keeps per device; and the model spreads a collective over the devices below "
                "its cut and moves a dim's inner axes for free)"
              : " (differs: the model spreads a collective over the devices below its cut and "
                "moves a dim's inner axes for free)")
      << "\n";
  const auto& calls = comm.calls();
  out << "    collectives: all-gather " << calls[0] << ", all-reduce " << calls[1]
      << ", reduce-scatter " << calls[2] << ", all-to-all " << calls[3] << "\n";
  for (std::size_t ax = 0; ax < p.mesh.size(); ++ax) {
    out << "    axis " << p.mesh[ax].axis << " (size " << p.mesh[ax].size << "): measured "
        << fmt("%.0f", comm.bytes_per_axis()[ax]) << ", predicted "
        << fmt("%.0f", predicted.per_axis[ax]) << "\n";
  }
  const double model_halo = model_halo_bytes(in.problem->graph(), in.eval);
  if (halo[2] > 0 || model_halo > 0) {
    // The model charges every rank the rows of an inner rank of the cut
    // (both neighbours'); the ranks at its ends send less.
    out << "    halo (point to point, rank 0): measured " << fmt("%.0f", halo[0]) << ", predicted "
        << fmt("%.0f", halo[1]) << "; largest on a rank " << fmt("%.0f", halo[2]) << ", cost model "
        << fmt("%.0f", model_halo)
        << (std::abs(model_halo - halo[2]) <= 0.5 ? " (equal)" : " (differs)") << "\n";
  }
}

// Normwise error of `got` against `want`: the largest error relative to the
// tensor's largest value (summation order differs between the runs;
// cancellation in one element is judged against the size of what was
// summed). Infinite when NaNs disagree. Also gives the max abs error.
double normwise_error(const std::vector<float>& want, const std::vector<float>& got,
                      double* max_abs_out) {
  double max_abs = 0, scale = 0;
  bool nan_mismatch = false;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], x = got[i];
    if (std::isnan(w) || std::isnan(x)) {
      nan_mismatch = nan_mismatch || std::isnan(w) != std::isnan(x);
      continue;
    }
    max_abs = std::max(max_abs, std::abs(w - x));
    scale = std::max(scale, std::abs(w));
  }
  *max_abs_out = max_abs;
  return nan_mismatch ? INFINITY : max_abs / (1.0 + scale);
}

// --check: every output, and every activation held without partial sums,
// equals a one-device run on rank 0. Returns whether this rank's part passed.
bool check_against_one_device(std::ostream& out, const ExecArgs& a, const Inputs& in, Executor& ex,
                              int rank) {
  const ir::Graph& g = in.problem->graph();
  std::unique_ptr<Communicator> solo;
  std::unique_ptr<Executor> ref;
  plan::Plan one = in.plan;
  one.mesh.clear();
  for (auto& c : one.cuts) c.clear();
  if (rank == 0) {
    solo = make_local_communicator();
    ref = std::make_unique<Executor>(g, in.problem->spaces(), one, *solo,
                                     ExecOptions{a.seed, false, {}, {}});
    ref->run();
  }
  bool ok = true;
  double inner_worst = 0;
  std::size_t inner_count = 0;
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).producer == ir::kNone) continue;
    const bool output = g.tensor(t).consumers.empty();
    bool partial = false;
    for (const auto& x : ex.block(t).layout)
      partial = partial || x.kind == cost::LayoutKind::Partial;
    if (partial) continue;
    const std::vector<float> got = ex.gather_full(t);  // collective: every rank takes part
    if (rank != 0) continue;
    double max_abs = 0;
    const double worst = normwise_error(ref->block(t).data, got, &max_abs);
    const bool pass = worst <= 1e-4;
    ok = ok && pass;
    if (!output && pass) {
      inner_worst = std::max(inner_worst, worst);
      ++inner_count;
      continue;
    }
    out << "  check " << (output ? "output " : "activation ") << g.tensor(t).name << " "
        << ir::shape_to_string(g.tensor(t).shape) << ": max abs error " << fmt("%.3g", max_abs)
        << ", relative to 1+max|ref| " << fmt("%.3g", worst)
        << (pass ? " ok" : " FAILED (tolerance 1e-4)") << "\n";
  }
  if (rank == 0) {
    out << "  check " << inner_count << " other activation(s): max error relative to 1+max|ref| "
        << fmt("%.3g", inner_worst) << "\n";
  }
  return ok;
}

// ---- training (--train) ----

OptimizerSettings optimizer_settings(const ExecArgs& a) {
  OptimizerSettings s;
  s.kind = a.optimizer == "adam"           ? Optimizer::Adam
           : a.optimizer == "sgd-momentum" ? Optimizer::SgdMomentum
                                           : Optimizer::Sgd;
  s.lr = a.lr;
  return s;
}

// What one rank's Communicator counted in one phase of a step.
struct PhaseBytes {
  std::vector<double> per_axis;
  std::array<std::int64_t, 4> calls{};
  double p2p = 0;  // point to point (halo exchanges), apart from the collectives
  [[nodiscard]] double total() const {
    double t = 0;
    for (const double b : per_axis) t += b;
    return t;
  }
};

PhaseBytes counters(const Communicator& c) {
  return {c.bytes_per_axis(), c.calls(), c.p2p_bytes()};
}

PhaseBytes minus(const PhaseBytes& after, const PhaseBytes& before) {
  PhaseBytes d = after;
  for (std::size_t i = 0; i < d.per_axis.size(); ++i) d.per_axis[i] -= before.per_axis[i];
  for (std::size_t i = 0; i < d.calls.size(); ++i) d.calls[i] -= before.calls[i];
  d.p2p -= before.p2p;
  return d;
}

PhaseBytes plus(const PhaseBytes& a, const PhaseBytes& b) {
  PhaseBytes d = a;
  for (std::size_t i = 0; i < d.per_axis.size(); ++i) d.per_axis[i] += b.per_axis[i];
  for (std::size_t i = 0; i < d.calls.size(); ++i) d.calls[i] += b.calls[i];
  d.p2p += b.p2p;
  return d;
}

enum TrainPhase { kForward, kBackward, kSync, kOptimizer, kPhases };
// The phases a training step's bytes are counted in (TrainRun::bytes).
constexpr std::array<const char*, 3> kBytePhases = {"forward", "backward", "gradient sync"};

struct TrainRun {
  std::vector<double> losses;             // per step, on rank 0
  std::array<double, kPhases> seconds{};  // summed over steps, slowest rank per phase
  double min_step_s = 1e300;
  std::array<PhaseBytes, 3> bytes;  // forward, backward, sync: the last step's
  ActivationBytes held;             // the most of any pass
  RecomputeTraffic again;           // the last step's recomputed forwards (every microbatch)
};

float microbatch_value(const ir::Graph& whole, const ir::Graph& part, ir::TensorId t,
                       std::int64_t index, std::int64_t k, std::uint64_t seed);

// The microbatches of a step: the executor runs `part` (the graph of one
// microbatch of `whole`) m times, microbatch k on rows k·B/m on.
struct Microbatches {
  const ir::Graph* whole = nullptr;
  const ir::Graph* part = nullptr;
  std::int64_t m = 1;
  std::uint64_t seed = 1;
};

// An output's weight in the loss of a step of m microbatches: a one-element
// sum over the batch (a summed cross-entropy, a ReduceSum) adds up over the
// microbatches; every other output (a mean loss, ½·mean(y²)) averages.
std::vector<double> microbatch_loss_scale(const ir::Graph& part,
                                          const std::vector<ir::TensorId>& outputs,
                                          std::int64_t m) {
  std::vector<double> scale;
  for (const ir::TensorId t : outputs) {
    const ir::Tensor& y = part.tensor(t);
    bool sum = false;
    if (ir::num_elements(y.shape) == 1 && y.producer != ir::kNone) {
      const ir::Operator& op = part.op(y.producer);
      sum = op.kind == ir::OpKind::ReduceSum || (op.kind == ir::OpKind::SoftmaxCrossEntropy &&
                                                 op.attrs.get_string("reduction", "mean") == "sum");
    }
    scale.push_back(sum ? 1.0 : 1.0 / static_cast<double>(m));
  }
  return scale;
}

// `steps` training steps: forward, backward, gradient synchronisation and
// optimizer step, each timed on the slowest rank and its traffic counted;
// the loss is read after the clock stops (its gather is not plan traffic).
// With microbatches (mb), the forward and backward passes run once per
// microbatch, their gradients accumulating, and the synchronisation and the
// optimizer step once; a microbatch's loss is read between its passes, off
// the clock.
TrainRun run_training(Executor& ex, Communicator& comm, int steps, const OptimizerSettings& opt,
                      const Microbatches* mb = nullptr) {
  TrainRun r;
  const std::int64_t m = mb != nullptr ? mb->m : 1;
  for (int s = 0; s < steps; ++s) {
    comm.reset_counters();
    comm.barrier();
    std::array<double, kPhases> local{};
    std::array<PhaseBytes, kPhases + 1> marks;
    double loss = 0;
    const auto timed = [&](int p, const std::function<void()>& f) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      local[static_cast<std::size_t>(p)] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    PhaseBytes fwd = minus(counters(comm), counters(comm));  // zeros
    PhaseBytes bwd = fwd;
    for (std::int64_t k = 0; k < m; ++k) {
      if (mb != nullptr && k > 0) {
        ex.reseed_inputs([mb, k](ir::TensorId t, std::int64_t i) {
          return microbatch_value(*mb->whole, *mb->part, t, i, k, mb->seed);
        });
      }
      const PhaseBytes c0 = counters(comm);
      timed(0, [&] { ex.run(); });
      const PhaseBytes c1 = counters(comm);
      if (m > 1) loss += ex.loss();
      const PhaseBytes c2 = counters(comm);
      timed(1, [&] { ex.backward(); });
      const PhaseBytes c3 = counters(comm);
      fwd = plus(fwd, minus(c1, c0));
      bwd = plus(bwd, minus(c3, c2));
      r.held.after_forward = std::max(r.held.after_forward, ex.activation_bytes().after_forward);
      r.held.peak = std::max(r.held.peak, ex.activation_bytes().peak);
      if (k == 0) r.again = RecomputeTraffic{};
      r.again.collectives += ex.recompute_traffic().collectives;
      r.again.p2p += ex.recompute_traffic().p2p;
    }
    if (mb != nullptr) {
      // The next step starts from microbatch 0 again.
      ex.reseed_inputs([mb](ir::TensorId t, std::int64_t i) {
        return microbatch_value(*mb->whole, *mb->part, t, i, 0, mb->seed);
      });
    }
    marks[2] = counters(comm);
    timed(2, [&] { ex.sync_gradients(); });
    marks[3] = counters(comm);
    timed(3, [&] { ex.optimizer_step(opt); });
    marks[4] = counters(comm);
    double step = 0;
    for (int p = 0; p < kPhases; ++p) {
      const double slowest = comm.max_over_ranks(local[static_cast<std::size_t>(p)]);
      r.seconds[static_cast<std::size_t>(p)] += slowest;
      step += slowest;
    }
    r.min_step_s = std::min(r.min_step_s, step);
    // The gradient sync includes ZeRO's all-gather of the updated shards,
    // which runs inside the optimizer step.
    r.bytes[0] = fwd;
    r.bytes[1] = bwd;
    r.bytes[2] = minus(marks[4], marks[2]);
    r.losses.push_back(m > 1 ? loss : ex.loss());
  }
  return r;
}

// The cost model's per-device bytes of a training step, at 4 bytes an
// element, beyond the forward's layout and output events: ZeRO 3's
// all-gathers of parameters in the forward pass (phase 0) and in the
// backward pass (phase 1, with layout duals and activation gradients), and
// the parameter gradients' collectives (sync, with ZeRO 1 and 2's
// all-gathers, which the model lists as forward-phase events of the next
// step). `zero`: each tensor's ZeRO stage.
std::array<double, 3> model_train_bytes(const ir::Graph& g, const plan::Evaluation& ev,
                                        const std::vector<int>& zero) {
  std::array<double, 3> out{};
  for (const auto& e : ev.events) {
    if (e.tensor == ir::kNone) continue;
    const ir::Tensor& t = g.tensor(e.tensor);
    const double b = e.bytes * 4.0 / static_cast<double>(ir::dtype_size(t.dtype)) * e.repeats;
    if (t.kind == ir::TensorKind::Parameter && e.reason == plan::CommReason::Gradient) {
      const bool pass_gather = zero[e.tensor] >= 3 && e.collective == cost::Collective::AllGather;
      out[pass_gather ? (e.phase == cost::Phase::Forward ? 0 : 1) : 2] += b;
    } else if (e.phase == cost::Phase::Backward && e.reason != plan::CommReason::Halo) {
      out[1] += b;
    }
  }
  return out;
}

// A training step's halo traffic (point to point) on this rank, forward and
// backward: measured, predicted from the layouts, and the largest predicted
// on any rank.
struct TrainHalo {
  std::array<double, 2> measured{}, predicted{}, largest{};
};

void report_training(std::ostream& out, const ExecArgs& a, const Inputs& in, Communicator& comm,
                     const TrainRun& r, const std::array<BytePrediction, 3>& predicted,
                     const TrainHalo& halo, bool all_bytes_ok) {
  const plan::Plan& p = in.plan;
  const ir::Graph& g = in.problem->graph();
  std::string mesh_text;
  for (std::size_t i = 0; i < p.mesh.size(); ++i)
    mesh_text += (i ? "x" : "") + std::to_string(p.mesh[i].size);
  out << "recsearch exec: " << g.name() << " on " << comm.size() << " rank(s), mesh "
      << (mesh_text.empty() ? "1" : mesh_text) << ", backend " << comm.backend_name() << ", train "
      << a.steps << " step(s), optimizer " << a.optimizer
      << (p.mode != Mode::Train             ? std::string()
          : plan::mixed_zero(g, p.training) ? std::string(", ZeRO stages per parameter")
          : p.training.zero_stage > 0 ? ", ZeRO stage " + std::to_string(p.training.zero_stage)
                                      : std::string())
      << " (lr " << fmt("%g", a.lr) << "), "
      << (in.micro ? std::to_string(p.training.microbatches) +
                         " microbatches accumulated per step (one gradient sync), "
                   : std::string())
      << (a.bucket_mib > 0
              ? "gradients all-reduced in buckets of " + fmt("%g", a.bucket_mib) + " MiB"
              : std::string("one gradient collective per parameter"))
      << "\n";
  out << "  loss (sum of one-element outputs and 1/2 mean(y^2) of the others):";
  for (std::size_t s = 0; s < r.losses.size(); ++s)
    out << (s % 6 == 0 ? "\n   " : "") << " " << fmt("%.7g", r.losses[s]);
  out << "\n";
  const double n = a.steps;
  double total = 0;
  for (const double s : r.seconds) total += s;
  out << "  step time (slowest rank per phase): mean " << fmt("%.3f", total / n * 1e3)
      << " ms, min " << fmt("%.3f", r.min_step_s * 1e3) << " ms; forward "
      << fmt("%.3f", r.seconds[kForward] / n * 1e3) << ", backward "
      << fmt("%.3f", r.seconds[kBackward] / n * 1e3) << ", gradient sync "
      << fmt("%.3f", r.seconds[kSync] / n * 1e3) << ", optimizer "
      << fmt("%.3f", r.seconds[kOptimizer] / n * 1e3) << " ms\n";
  const PhaseTimes& pt = in.predicted;
  out << "  predicted by the cost model (" << in.cluster_source << "): step "
      << fmt("%.3f", pt.step_s * 1e3) << " ms; forward " << fmt("%.3f", pt.forward_s * 1e3)
      << ", backward " << fmt("%.3f", pt.backward_s * 1e3) << ", gradient sync "
      << fmt("%.3f", pt.sync_s * 1e3) << ", optimizer " << fmt("%.3f", pt.optimizer_s * 1e3)
      << " ms\n";
  out << "  measured/predicted: step " << ratio_text(total / n, pt.step_s) << ", forward "
      << ratio_text(r.seconds[kForward] / n, pt.forward_s) << ", backward "
      << ratio_text(r.seconds[kBackward] / n, pt.backward_s) << ", gradient sync "
      << ratio_text(r.seconds[kSync] / n, pt.sync_s) << ", optimizer "
      << ratio_text(r.seconds[kOptimizer] / n, pt.optimizer_s) << "\n";
  std::array<double, 3> model = model_train_bytes(g, in.eval, plan::parameter_zero(g, p.training));
  model[0] += model_forward_bytes(g, in.eval, true, true);
  out << "  bytes sent per rank, one training step, f32 elements (measured on rank 0, predicted "
         "from the plan layouts, cost model):\n";
  for (std::size_t ph = 0; ph < 3; ++ph) {
    const auto& c = r.bytes[ph].calls;
    out << "    " << kBytePhases[ph] << ": measured " << fmt("%.0f", r.bytes[ph].total())
        << ", predicted " << fmt("%.0f", predicted[ph].total) << ", cost model "
        << fmt("%.0f", model[ph])
        << (std::abs(model[ph] - predicted[ph].total) <= 0.5 ? " (equal)" : " (differs)")
        << "; collectives: all-gather " << c[0] << ", all-reduce " << c[1] << ", reduce-scatter "
        << c[2] << ", all-to-all " << c[3] << "\n";
  }
  // The halo is priced by the model per device as an inner rank's rows
  // (docs/exec.md, Convolutions, pools and BatchNorm): an upper bound.
  const std::array<double, 2> model_halo = {
      model_halo_bytes(g, in.eval, cost::Phase::Forward, true),
      model_halo_bytes(g, in.eval, cost::Phase::Backward, true)};
  if (halo.largest[0] + halo.largest[1] + model_halo[0] + model_halo[1] > 0) {
    out << "    halo (point to point, rank 0): forward measured " << fmt("%.0f", halo.measured[0])
        << ", predicted " << fmt("%.0f", halo.predicted[0]) << "; backward measured "
        << fmt("%.0f", halo.measured[1]) << ", predicted " << fmt("%.0f", halo.predicted[1])
        << "; largest on a rank " << fmt("%.0f", halo.largest[0]) << "/"
        << fmt("%.0f", halo.largest[1]) << ", cost model " << fmt("%.0f", model_halo[0]) << "/"
        << fmt("%.0f", model_halo[1]) << " (forward/backward)\n";
  }
  out << "    predicted" << (all_bytes_ok ? ": every rank matches" : ": MISMATCH on some rank")
      << "\n";
  for (std::size_t ax = 0; ax < p.mesh.size(); ++ax) {
    out << "    axis " << p.mesh[ax].axis << " (size " << p.mesh[ax].size << "):";
    for (std::size_t ph = 0; ph < 3; ++ph) {
      out << (ph ? "," : "") << " " << kBytePhases[ph] << " "
          << fmt("%.0f", r.bytes[ph].per_axis[ax]) << "/"
          << fmt("%.0f", predicted[ph].per_axis[ax]);
    }
    out << " (measured/predicted)\n";
  }
}

// What the step recomputed and the activations a rank held for the
// backward pass, against the cost model's (docs/exec.md, Recomputation).
void report_recompute(std::ostream& out, const Inputs& in, const Executor& ex, const TrainRun& r,
                      const RecomputeTraffic& predicted) {
  const plan::Plan& p = in.plan;
  const ir::Graph& g = in.micro ? in.micro->graph : in.problem->graph();
  const RecomputePlan& rp = ex.recompute_plan();
  const std::string mode = p.mode != Mode::Train ? std::string("none")
                           : plan::mixed_recompute(g, p.training)
                               ? std::string("per operator")
                               : std::string(plan::recompute_name(p.training.recompute));
  std::size_t ops = 0, tensors = 0, copies = 0;
  for (const std::uint8_t x : rp.op) ops += x;
  for (std::size_t t = 0; t < rp.dropped.size(); ++t) {
    tensors += rp.dropped[t];
    copies += rp.dropped_copies[t].size();
  }
  out << "  recomputation " << mode << ": " << ops << " operator(s) in " << rp.groups
      << " group(s) run forward again in the backward pass; " << tensors << " tensor(s) and "
      << copies << " redistributed copies not kept after the forward\n";
  if (!rp.empty()) {
    out << "    recomputed forward, bytes sent in the backward (rank 0): collectives measured "
        << fmt("%.0f", r.again.collectives) << ", predicted " << fmt("%.0f", predicted.collectives)
        << ", cost model 0; point to point measured " << fmt("%.0f", r.again.p2p) << ", predicted "
        << fmt("%.0f", predicted.p2p) << "\n";
  }
  out << "  activations held for the backward (rank 0, bytes): after the forward "
      << fmt("%.0f", r.held.after_forward) << ", peak in the backward " << fmt("%.0f", r.held.peak)
      << "; cost model " << fmt("%.0f", in.eval.summary.activation_bytes) << "\n";
}

// The parameters a rank holds and ZeRO 3's gathers, against the cost
// model's weights per device (docs/exec.md, ZeRO 3).
void report_parameters(std::ostream& out, const Inputs& in, const Executor& ex,
                       const Zero3GatherBytes& gathers) {
  const plan::Summary& sum = in.eval.summary;
  const ParameterBytes& held = ex.parameter_bytes();
  std::size_t sharded = 0;
  for (const ir::TensorId t : ex.trained()) {
    sharded += ex.block(t).layout != ex.layouts().holders[t] ? 1 : 0;
  }
  // The model counts the graph's dtype, exec 4 bytes an element: scaled
  // when every parameter has one width.
  const ir::Graph& g = in.problem->graph();
  std::set<std::size_t> widths;
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).kind == ir::TensorKind::Parameter)
      widths.insert(ir::dtype_size(g.tensor(t).dtype));
  }
  const double scale = widths.size() == 1 ? 4.0 / static_cast<double>(*widths.begin()) : 1.0;
  out << "  parameters held (rank 0, bytes): between steps " << fmt("%.0f", held.kept)
      << ", peak in the passes " << fmt("%.0f", held.peak) << "; cost model (weights) "
      << fmt("%.0f", (sum.parameter_bytes - sum.gradient_bytes - sum.optimizer_bytes) * scale)
      << (widths.size() > 1 ? " at the graph's dtypes" : "") << "; " << sharded << " of "
      << ex.trained().size() << " parameter(s) kept as ZeRO-3 shards\n";
  if (sharded > 0) {
    out << "    ZeRO 3 all-gathers of parameters per pass (predicted from the layouts, rank 0): "
           "forward "
        << fmt("%.0f", gathers.forward.total) << ", backward "
        << fmt("%.0f", gathers.backward.total) << "\n";
  }
}

constexpr double kTolerance = 1e-4;
constexpr double kGradTolerance = 1e-3;

// Every step's loss against the one-device run's; prints the worst error
// and each failure. Returns whether all agree.
bool compare_losses(std::ostream& out, const std::vector<double>& losses,
                    const std::vector<double>& ref) {
  bool ok = true;
  double worst = -1;
  int worst_step = 1;
  for (std::size_t s = 0; s < losses.size(); ++s) {
    const double err = std::abs(losses[s] - ref[s]) / (1.0 + std::abs(ref[s]));
    if (!(err <= worst)) {
      worst = err;
      worst_step = static_cast<int>(s) + 1;
    }
    if (!(err <= kTolerance)) {
      ok = false;
      out << "  check loss of step " << s + 1 << ": " << fmt("%.7g", losses[s]) << ", one device "
          << fmt("%.7g", ref[s]) << " FAILED (tolerance 1e-4)\n";
    }
  }
  out << "  check loss of " << losses.size() << " step(s): worst error relative to "
      << "1+|ref| " << fmt("%.3g", worst) << " (step " << worst_step << ")\n";
  return ok;
}

// The largest gradient element of any parameter of the one-device run.
double largest_gradient(Executor& ref, const std::vector<ir::TensorId>& params) {
  double largest = 0;
  for (const ir::TensorId t : params) {
    for (const float v : ref.gradient(t).data) largest = std::max(largest, std::abs(double{v}));
  }
  return largest;
}

// The floor of the gradient check: 1e-3 of the largest gradient element
// (at least 1e-6).
double gradient_floor(double largest) { return std::max(1e-6, 1e-3 * largest); }

// Below this fraction of the largest gradient element of any parameter, a
// gradient element is float noise (adam_noise_matched).
constexpr double kNoiseGradient = 1e-6;

// The elements adam_noise_matched took as agreeing, and how many of them lie
// outside the parameter check's tolerance (those it would otherwise fail).
struct AdamNoise {
  double taken = 0, outside = 0;
};

// Adam divides each gradient element by its own running size, so an element
// whose gradient vanishes analytically (a key bias under softmax, say) and
// is float noise moves by up to the learning rate each step in a direction
// the noise picks: the same step on cuBLAS and on the CPU kernels, or with
// another summation order, moves it elsewhere. Such an element (its last
// reference gradient under kNoiseGradient of the largest gradient element
// of any parameter, `grad_max`: float keeps about 7 digits of the sums that make a
// gradient, so below that no direction is determined) is taken as agreeing
// when the two values lie within lr x steps of each other, the most Adam can
// move it; its gradient is still checked (the gradient check's floor, 1e-3
// of the largest, does not see such an element either). A check of Adam's
// own conditioning (m against sqrt(v)) would be tighter. Returns the values
// to compare; counts the elements taken in `noise`.
std::vector<float> adam_noise_matched(const OptimizerSettings& opt, int steps,
                                      const LocalTensor& ref_grad, const LocalTensor& ref_param,
                                      const std::vector<float>& got, double grad_max,
                                      AdamNoise& noise) {
  std::vector<float> cmp = got;
  if (opt.kind != Optimizer::Adam) return cmp;
  const double travel = opt.lr * steps * (1 + 1e-3);
  double scale = 0;
  for (const float v : ref_param.data) scale = std::max(scale, std::abs(double{v}));
  const double tolerance = kTolerance * (1 + scale);
  for (std::size_t i = 0; i < cmp.size(); ++i) {
    const double diff = std::abs(double{cmp[i]} - ref_param.data[i]);
    const double g = std::abs(double{ref_grad.data[i]});
    // An element no sample reaches (a gradient of exactly 0 that moved no
    // value, an unused embedding row) is no noise.
    if (!(g < kNoiseGradient * grad_max) || (g == 0 && diff == 0)) continue;
    noise.taken += 1;
    if (diff > 0 && diff <= travel) {
      cmp[i] = ref_param.data[i];
      noise.outside += diff > tolerance ? 1 : 0;
    }
  }
  return cmp;
}

// The report's line on adam_noise_matched's elements, where there are any.
void report_adam_noise(std::ostream& out, const AdamNoise& noise) {
  if (noise.taken == 0) return;
  out << "  check " << fmt("%.0f", noise.taken)
      << " parameter element(s) have float-noise gradients (under 1e-6 of the largest), taken"
         " within Adam's reach (lr x steps) of the one-device run: "
      << fmt("%.0f", noise.outside) << " of them outside the tolerance\n";
}

// One trained parameter's last gradient and value after the steps against
// the one-device run's: the gradient against its own size, but at least
// gradient_floor of `grad_max` (a gradient that vanishes analytically is float noise,
// whatever its own size), the parameter against 1 + its largest value
// (Adam's float-noise elements within its reach, adam_noise_matched).
// Prints each failure; keeps the worst errors. Returns whether both agree.
bool compare_parameter(std::ostream& out, const std::string& name, const OptimizerSettings& opt,
                       int steps, const LocalTensor& ref_grad, const LocalTensor& ref_param,
                       const std::vector<float>& grad, const std::vector<float>& got,
                       double grad_max, double& grad_worst, double& param_worst, AdamNoise& noise) {
  const double grad_floor = gradient_floor(grad_max);
  bool ok = true;
  double max_abs = 0, ref_max = 0;
  for (const float v : ref_grad.data) ref_max = std::max(ref_max, std::abs(double{v}));
  const double gerr = normwise_error(ref_grad.data, grad, &max_abs) * (1.0 + ref_max) /
                      std::max(ref_max, grad_floor);
  grad_worst = std::max(grad_worst, gerr);
  if (!(gerr <= kGradTolerance)) {
    ok = false;
    out << "  check gradient of " << name << " in step " << steps << ": max abs error "
        << fmt("%.3g", max_abs) << ", relative to max|ref| " << fmt("%.3g", gerr)
        << " FAILED (tolerance 1e-3)\n";
  }
  const std::vector<float> cmp =
      adam_noise_matched(opt, steps, ref_grad, ref_param, got, grad_max, noise);
  const double err = normwise_error(ref_param.data, cmp, &max_abs);
  param_worst = std::max(param_worst, err);
  if (!(err <= kTolerance)) {
    ok = false;
    out << "  check parameter " << name << " after " << steps << " step(s): max abs error "
        << fmt("%.3g", max_abs) << ", relative to 1+max|ref| " << fmt("%.3g", err)
        << " FAILED (tolerance 1e-4)\n";
  }
  return ok;
}

// The one-device run a training --check compares with: the whole graph's
// steps under `one` (no cuts) on a local communicator, from the same seed.
// The executor refers to the communicator, which the struct keeps alive.
struct Reference {
  std::unique_ptr<Communicator> solo;
  std::unique_ptr<Executor> ex;
  TrainRun run;
};

Reference reference_training(const ExecArgs& a, const Inputs& in, const plan::Plan& one) {
  Reference r;
  r.solo = make_local_communicator();
  r.ex = std::make_unique<Executor>(in.problem->graph(), in.problem->spaces(), one, *r.solo,
                                    ExecOptions{a.seed, false, {}, {}});
  r.run = run_training(*r.ex, *r.solo, a.steps, optimizer_settings(a));
  return r;
}

// --check of a training run: rank 0 runs the same steps on one device; the
// loss of every step and every trained parameter afterwards must agree.
bool check_training(std::ostream& out, const ExecArgs& a, const Inputs& in, Executor& ex,
                    const TrainRun& run, int rank) {
  const ir::Graph& g = in.problem->graph();
  Reference ref;
  if (rank == 0) {
    plan::Plan one = in.plan;
    one.mesh.clear();
    for (auto& c : one.cuts) c.clear();
    ref = reference_training(a, in, one);
  }
  bool ok = true;
  if (rank == 0) ok = compare_losses(out, run.losses, ref.run.losses);
  // The last step's gradients (a wrong gradient times a small learning rate
  // can hide inside the parameters' tolerance; in ResNet-50 the stem
  // BatchNorm's bias gradient is float noise: the batch-statistics
  // BatchNorms after the 1x1 convolutions take each channel's mean out of
  // the gradient, leaving sums of about 1e-6 of the others), then the
  // parameters after every step.
  const double grad_max = rank == 0 ? largest_gradient(*ref.ex, ex.trained()) : 0;
  double grad_worst = 0, param_worst = 0;
  AdamNoise noise;
  const OptimizerSettings opt = optimizer_settings(a);
  for (const ir::TensorId t : ex.trained()) {
    const std::vector<float> grad = ex.gather_gradient(t);  // collectives: every rank
    const std::vector<float> got = ex.gather_full(t);
    if (rank != 0) continue;
    const std::string name = g.tensor(t).name + " " + ir::shape_to_string(g.tensor(t).shape);
    ok = compare_parameter(out, name, opt, a.steps, ref.ex->gradient(t), ref.ex->block(t), grad,
                           got, grad_max, grad_worst, param_worst, noise) &&
         ok;
  }
  if (rank == 0) {
    out << "  check " << ex.trained().size() << " gradient(s) of step " << a.steps
        << ": max error relative to max|ref| " << fmt("%.3g", grad_worst) << "\n";
    out << "  check " << ex.trained().size() << " parameter(s) after " << a.steps
        << " step(s): max error relative to 1+max|ref| " << fmt("%.3g", param_worst) << "\n";
    report_adam_noise(out, noise);
  }
  return ok;
}

// Runs --train: the steps, the byte comparison of every phase on every rank,
// the report and with --check the one-device comparison. Returns the exit code.
int execute_training(const ExecArgs& a, const Inputs& in, Executor& ex, Communicator& comm,
                     int rank) {
  const ir::Graph& g = in.micro ? in.micro->graph : in.problem->graph();
  const std::vector<int> zero = in.plan.mode == Mode::Train
                                    ? plan::parameter_zero(g, in.plan.training)
                                    : std::vector<int>(g.num_tensors(), 0);
  const TrainBytePrediction tp = predict_train_bytes(g, ex.layouts(), zero);
  std::array<BytePrediction, 3> predicted = {predict_exec_bytes(g, ex.layouts()), tp.backward,
                                             tp.gradient_sync};
  // ZeRO 3's all-gathers of parameters, once in each pass.
  const Zero3GatherBytes gathers =
      predict_zero3_gather_bytes(g, ex.layouts(), ex.gradient_layouts(), zero, ex.recompute_plan());
  for (std::size_t ph = 0; ph < 2; ++ph) {
    const BytePrediction& more = ph == 0 ? gathers.forward : gathers.backward;
    predicted[ph].total += more.total;
    for (std::size_t ax = 0; ax < more.per_axis.size(); ++ax)
      predicted[ph].per_axis[ax] += more.per_axis[ax];
  }
  // The recomputed forward runs inside the backward pass.
  const BytePrediction again = predict_recompute_bytes(g, ex.layouts(), ex.recompute_plan());
  predicted[1].total += again.total;
  for (std::size_t ax = 0; ax < again.per_axis.size(); ++ax)
    predicted[1].per_axis[ax] += again.per_axis[ax];
  std::optional<Microbatches> mb;
  if (in.micro) {
    mb =
        Microbatches{&in.problem->graph(), &in.micro->graph, in.plan.training.microbatches, a.seed};
    ex.set_loss_scale(microbatch_loss_scale(in.micro->graph, ex.outputs(), mb->m));
    // The forward and backward passes run once per microbatch; the sync once.
    for (std::size_t ph = 0; ph < 2; ++ph) {
      predicted[ph].total *= static_cast<double>(mb->m);
      for (double& b : predicted[ph].per_axis) b *= static_cast<double>(mb->m);
    }
  }
  // Halo exchanges (point to point) differ between ranks: each rank checks its own.
  const std::vector<std::int64_t> coords = rank_coords(rank, ex.layouts().mesh);
  const double passes = mb ? static_cast<double>(mb->m) : 1.0;
  TrainHalo halo;
  halo.predicted = {predict_halo_bytes(g, ex.layouts(), coords) * passes,
                    (predict_halo_backward_bytes(g, ex.layouts(), ex.gradient_layouts(), coords) +
                     predict_recompute_halo_bytes(g, ex.layouts(), ex.recompute_plan(), coords)) *
                        passes};
  // The recomputed forward's own share of the backward, checked apart too.
  const RecomputeTraffic again_predicted = {
      again.total * passes,
      predict_recompute_halo_bytes(g, ex.layouts(), ex.recompute_plan(), coords) * passes};
  const TrainRun run = run_training(ex, comm, a.steps, optimizer_settings(a), mb ? &*mb : nullptr);
  halo.measured = {run.bytes[0].p2p, run.bytes[1].p2p};
  bool bytes_ok = std::abs(run.again.collectives - again_predicted.collectives) <= 0.5 &&
                  std::abs(run.again.p2p - again_predicted.p2p) <= 0.5;
  for (std::size_t ph = 0; ph < 3; ++ph) {
    for (std::size_t ax = 0; ax < predicted[ph].per_axis.size(); ++ax)
      bytes_ok =
          bytes_ok && std::abs(run.bytes[ph].per_axis[ax] - predicted[ph].per_axis[ax]) <= 0.5;
  }
  for (std::size_t ph = 0; ph < 2; ++ph) {
    bytes_ok = bytes_ok && std::abs(halo.measured[ph] - halo.predicted[ph]) <= 0.5;
    halo.largest[ph] = comm.max_over_ranks(halo.predicted[ph]);
  }
  bytes_ok = bytes_ok && run.bytes[2].p2p == 0;
  const bool all_bytes_ok = comm.max_over_ranks(bytes_ok ? 0.0 : 1.0) == 0.0;
  std::ostringstream out;
  report_training(out, a, in, comm, run, predicted, halo, all_bytes_ok);
  report_recompute(out, in, ex, run, again_predicted);
  report_parameters(out, in, ex, gathers);
  int code = all_bytes_ok ? 0 : exit_code(Errc::kRuntime);
  if (a.check) {
    const bool ok = check_training(out, a, in, ex, run, rank);
    const bool all_ok = comm.max_over_ranks(ok && all_bytes_ok ? 0.0 : 1.0) == 0.0;
    if (!all_ok) code = exit_code(Errc::kRuntime);
    if (rank == 0) out << "  check: " << (all_ok ? "passed" : "FAILED") << "\n";
  }
  if (rank == 0) std::cout << out.str() << std::flush;
  if (!all_bytes_ok && !bytes_ok) {
    std::cerr << ("recsearch exec: [rank " + std::to_string(rank) +
                  "] sent other bytes in a training step than the plan predicts\n")
              << std::flush;
  }
  return code;
}

// ---- pipelined plans: 1F1B over m microbatches ----

// One stage as this rank runs it: its graph (of the microbatch graph), plan,
// device group's communicator, the stages that feed it and that it feeds.
struct StageRun {
  std::size_t index = 0;
  const plan::Stage* stage = nullptr;
  plan::StageGraph sg;
  std::unique_ptr<Communicator> comm;
  std::size_t devices = 1;  // per group
  std::size_t local = 0;    // this rank within its group
};

// The stage whose operators produce full-graph tensor t.
std::size_t stage_of_producer(const plan::PipelinePlan& pp, const ir::Graph& g, ir::TensorId t) {
  const ir::OpId o = g.tensor(t).producer;
  for (std::size_t j = 0; j < pp.stages.size(); ++j)
    if (o >= pp.stages[j].first && o < pp.stages[j].last) return j;
  throw Error(Errc::kInternal, "no stage produces '" + g.tensor(t).name + "'");
}

// The later stages that use full-graph tensor t, in order.
std::vector<std::size_t> stages_using(const plan::PipelinePlan& pp, const ir::Graph& g,
                                      ir::TensorId t, std::size_t after) {
  std::vector<std::size_t> out;
  for (std::size_t j = after + 1; j < pp.stages.size(); ++j) {
    for (const ir::OpId c : g.tensor(t).consumers) {
      if (c >= pp.stages[j].first && c < pp.stages[j].last) {
        out.push_back(j);
        break;
      }
    }
  }
  return out;
}

// Every rank of a group holds one chunk of a boundary tensor's flat
// elements (ceil(n / devices) each, the last padded): the Megatron-LM
// scatter/gather the cost model prices (each device sends its share).
std::int64_t chunk_of(std::int64_t n, std::size_t devices) {
  const auto d = static_cast<std::int64_t>(devices);
  return (n + d - 1) / d;
}

Layout all_axes(std::size_t axes, cost::AxisLayout l) { return Layout(axes, l); }

// The value of element `index` of stage-graph tensor t in microbatch k: the
// whole graph's seeded value, at the microbatch's rows when the tensor's
// batch (its dim 0) is split into microbatches.
float microbatch_value(const ir::Graph& whole, const ir::Graph& part, ir::TensorId t,
                       std::int64_t index, std::int64_t k, std::uint64_t seed) {
  const ir::Tensor& tensor = part.tensor(t);
  const auto id = whole.find_tensor(tensor.name);
  if (!id) throw Error(Errc::kInternal, "no tensor '" + tensor.name + "' in the graph");
  const bool split = whole.tensor(*id).shape != tensor.shape;
  return input_value(whole, *id, split ? k * ir::num_elements(tensor.shape) + index : index, seed);
}

// Bytes one rank sends in a part of a pipelined pass: point to point
// (boundary tensors and halo rows) and its group's collectives, predicted
// from the plan and measured.
struct PipeBytes {
  double p2p_predicted = 0, coll_predicted = 0;
  double p2p_measured = 0, coll_measured = 0;
  [[nodiscard]] bool equal() const {
    return std::abs(p2p_measured - p2p_predicted) <= 0.5 &&
           std::abs(coll_measured - coll_predicted) <= 0.5;
  }
};

// Adds what `c` counted while f ran to b's measured bytes.
void measured(PipeBytes& b, const Communicator& c, const std::function<void()>& f) {
  const double p0 = c.p2p_bytes(), c0 = c.bytes_sent();
  f();
  b.p2p_measured += c.p2p_bytes() - p0;
  b.coll_measured += c.bytes_sent() - c0;
}

// The point-to-point boundary exchange of one stage group (docs/exec.md,
// Pipelines), forward for activations and backward for their gradients:
// the sending group brings the tensor to every rank, rank i sends the i-th
// chunk to rank i of each receiving group, which all-gathers the chunks.
// Messages are tagged with the tensor's id (its gradient's: plus the
// number of tensors), so each pair of ranks matches them in order.
class Boundary {
 public:
  Boundary(StageRun& run, Redistributor& redist, const plan::PipelinePlan& pp)
      : run_(run), redist_(redist), pp_(pp) {}

  // The whole tensor of `shape`, replicated on the group, from stage `from`.
  LocalTensor receive(const ir::Shape& shape, std::size_t from, int tag, PipeBytes& b) {
    Communicator& gc = *run_.comm;
    const std::size_t axes = gc.mesh().size();
    const std::int64_t n = ir::num_elements(shape);
    const std::int64_t c = chunk_of(n, run_.devices);
    LocalTensor flat{{c * static_cast<std::int64_t>(run_.devices)},
                     all_axes(axes, cost::AxisLayout::shard(0)),
                     std::vector<float>(static_cast<std::size_t>(c))};
    gc.recv(rank_of(from), flat.data.data(), flat.data.size(), tag);
    LocalTensor whole = redist_.redistribute(flat, all_axes(axes, cost::AxisLayout::replicate()));
    b.coll_predicted += redistribution_bytes(flat.full, flat.layout, whole.layout, gc.mesh()).total;
    whole.data.resize(static_cast<std::size_t>(n));
    whole.full = shape;
    return whole;
  }

  // This rank's chunk of `block`'s tensor, to each of `to` (times `scale`:
  // a fault injection). The chunk stays alive until finish().
  void send(const LocalTensor& block, const std::vector<std::size_t>& to, int tag, PipeBytes& b,
            float scale = 1.0f) {
    Communicator& gc = *run_.comm;
    const Layout replicated = all_axes(gc.mesh().size(), cost::AxisLayout::replicate());
    b.coll_predicted += redistribution_bytes(block.full, block.layout, replicated, gc.mesh()).total;
    const LocalTensor whole = redist_.redistribute(block, replicated);
    const std::int64_t n = ir::num_elements(block.full);
    const std::int64_t c = chunk_of(n, run_.devices);
    std::vector<float> chunk(static_cast<std::size_t>(c), 0.0f);
    const std::int64_t begin = c * static_cast<std::int64_t>(run_.local);
    for (std::int64_t i = begin; i < std::min(n, begin + c); ++i)
      chunk[static_cast<std::size_t>(i - begin)] = scale * whole.data[static_cast<std::size_t>(i)];
    outgoing_.push_back(std::move(chunk));
    for (const std::size_t j : to) {
      gc.send(rank_of(j), outgoing_.back().data(), outgoing_.back().size(), tag);
      b.p2p_predicted += static_cast<double>(c) * sizeof(float);
    }
  }

  // Waits for every send (their buffers are then free).
  void finish() {
    run_.comm->finish_sends();
    outgoing_.clear();
  }

 private:
  // This rank's counterpart in the group that runs stage j.
  [[nodiscard]] int rank_of(std::size_t j) const {
    return static_cast<int>(pp_.stages.at(j).group * run_.devices + run_.local);
  }

  StageRun& run_;
  Redistributor& redist_;
  const plan::PipelinePlan& pp_;
  std::deque<std::vector<float>> outgoing_;
};

// Point-to-point messages of the tied parameters' all-reduce: a tag of
// their own (boundary tensors are tagged by id, halo rows 32000), sent after
// every boundary message of the step has arrived.
constexpr int kTiedTag = 32001;

// In-place sum of `data` over `peers` (world ranks, ascending, `self` among
// them) in a ring of point-to-point messages: k - 1 steps of reduce-scatter,
// then k - 1 of all-gather, each sending one of k segments of ceil(n / k)
// elements to the next peer (the ring all-reduce the cost model prices:
// 2(k - 1)/k of the data when k divides it). Each outgoing segment is copied,
// so no buffer a send still reads is written; every peer ends with the same
// values (each segment is summed on one rank, then copied).
void ring_all_reduce(Communicator& c, const std::vector<int>& peers, int self,
                     std::vector<float>& data, PipeBytes& b) {
  const std::size_t k = peers.size();
  if (k < 2) return;
  const auto at = std::find(peers.begin(), peers.end(), self);
  if (at == peers.end()) throw Error(Errc::kInternal, "ring_all_reduce: rank not among its peers");
  const auto q = static_cast<std::size_t>(at - peers.begin());
  const int next = peers[(q + 1) % k];
  const int prev = peers[(q + k - 1) % k];
  const std::size_t n = data.size();
  const std::size_t seg = (n + k - 1) / k;
  data.resize(seg * k, 0.0f);
  std::deque<std::vector<float>> outgoing;
  std::vector<float> in(seg);
  const auto step = [&](std::size_t send_seg, std::size_t recv_seg, bool add) {
    const auto from = data.begin() + static_cast<std::ptrdiff_t>(send_seg * seg);
    outgoing.emplace_back(from, from + static_cast<std::ptrdiff_t>(seg));
    c.send(next, outgoing.back().data(), seg, kTiedTag);
    b.p2p_predicted += static_cast<double>(seg) * sizeof(float);
    c.recv(prev, in.data(), seg, kTiedTag);
    float* dst = data.data() + recv_seg * seg;
    for (std::size_t i = 0; i < seg; ++i) dst[i] = add ? dst[i] + in[i] : in[i];
  };
  for (std::size_t s = 0; s + 1 < k; ++s) step((q + k - s) % k, (q + 2 * k - s - 1) % k, true);
  for (std::size_t s = 0; s + 1 < k; ++s) step((q + 1 + k - s) % k, (q + k - s) % k, false);
  c.finish_sends();
  data.resize(n);
}

// A parameter that stages of several device groups read (plan::tied_syncs),
// as one rank of one of those groups holds it: after the group's gradient
// sync its gradient is the group's share alone. The groups sum their shares
// as the cost model prices it (each group's devices share the traffic): the
// group brings the gradient to every rank, rank i all-reduces the i-th chunk
// of its flat elements (chunk_of) with rank i of every other group of the
// parameter, the group all-gathers the summed chunks, and each rank takes
// its block again (docs/exec.md, Tied parameters).
struct TiedParameter {
  ir::TensorId stage_tensor = 0;  // in the stage graph
  std::vector<int> peers;         // world ranks: this rank's place in each group, ascending
  double model_bytes = 0;         // the cost model's bytes per device per step, at f32
};

// The tied parameters this rank's stage reads, in tensor id order.
std::vector<TiedParameter> tied_parameters(const Inputs& in, const plan::PipelinePlan& pp,
                                           const StageRun& run) {
  const ir::Graph& g = in.problem->graph();
  const CostParams params;
  std::vector<TiedParameter> out;
  for (const plan::TiedSync& ts : plan::tied_syncs(g, *in.cluster, pp, Mode::Train, params)) {
    if (!std::binary_search(ts.groups.begin(), ts.groups.end(), run.stage->group)) continue;
    const ir::Tensor& x = g.tensor(ts.tensor);
    // Of the group's stages (v of them when interleaved), the one that reads it.
    const auto t = run.sg.graph.find_tensor(x.name);
    if (!t) continue;
    TiedParameter tp;
    tp.stage_tensor = *t;
    for (const std::size_t j : ts.groups)
      tp.peers.push_back(static_cast<int>(j * run.devices + run.local));
    // The model prices the parameter's gradient bytes; exec sends f32.
    const double gradient =
        x.bytes() *
        plan::parameter_state(params, Mode::Train, static_cast<int>(ir::dtype_size(x.dtype)))
            .gradient;
    if (gradient > 0)
      tp.model_bytes = ts.bytes * static_cast<double>(ir::num_elements(x.shape)) * 4.0 / gradient;
    out.push_back(std::move(tp));
  }
  return out;
}

// What a stage needs to run its part of one microbatch: the pipeline, the
// microbatch graph, this rank's stage and its boundary exchange.
struct StageContext {
  const plan::PipelinePlan& pp;
  const ir::Graph& mg;
  StageRun& run;
  Redistributor& redist;
  Boundary& boundary;

  [[nodiscard]] ir::TensorId stage_id(ir::TensorId full) const {
    const auto t = run.sg.graph.find_tensor(mg.tensor(full).name);
    if (!t) throw Error(Errc::kInternal, "no stage tensor '" + mg.tensor(full).name + "'");
    return *t;
  }
  [[nodiscard]] int grad_tag(ir::TensorId full) const {
    return static_cast<int>(mg.num_tensors() + full);
  }

  // Receives the boundary tensors this stage reads, into ex's input blocks.
  void receive_inputs(Executor& ex, PipeBytes& b) const {
    for (const ir::TensorId full : run.sg.received) {
      const ir::TensorId t = stage_id(full);
      const LocalTensor whole = boundary.receive(
          run.sg.graph.tensor(t).shape, stage_of_producer(pp, mg, full), static_cast<int>(full), b);
      ex.set_input(t, redist.redistribute(whole, ex.layouts().holders[t]).data);
    }
  }

  // Sends the boundary tensors later stages read.
  void send_outputs(Executor& ex, PipeBytes& b) const {
    for (const ir::TensorId full : run.sg.sent) {
      boundary.send(ex.block(stage_id(full)), stages_using(pp, mg, full, run.index),
                    static_cast<int>(full), b);
    }
  }

  // The gradients of the boundary tensors this stage sent (those that get
  // one: `needs`, per full-graph tensor), from every later stage that read
  // them, each in the tensor's gradient layout: the backward's seeds.
  std::vector<std::pair<ir::TensorId, LocalTensor>> receive_gradients(
      Executor& ex, const std::vector<std::uint8_t>& needs, PipeBytes& b) const {
    std::vector<std::pair<ir::TensorId, LocalTensor>> seeds;
    for (const ir::TensorId full : run.sg.sent) {
      if (!needs[full]) continue;
      const ir::TensorId t = stage_id(full);
      for (const std::size_t j : stages_using(pp, mg, full, run.index)) {
        const LocalTensor whole =
            boundary.receive(run.sg.graph.tensor(t).shape, j, grad_tag(full), b);
        seeds.emplace_back(t, redist.redistribute(whole, ex.gradient_layouts().target[t]));
      }
    }
    return seeds;
  }

  // Sums each tied parameter's gradient across the groups that read it
  // (TiedParameter), after sync_gradients(): every group ends with the
  // whole graph's gradient in its own layout. This rank's chunk enters the
  // sum times `scale` (a fault injection).
  void sync_tied(Executor& ex, const std::vector<TiedParameter>& tied, int self, PipeBytes& b,
                 float scale) const {
    Communicator& gc = *run.comm;
    const Layout replicated = all_axes(gc.mesh().size(), cost::AxisLayout::replicate());
    const Layout chunked = all_axes(gc.mesh().size(), cost::AxisLayout::shard(0));
    for (const TiedParameter& tp : tied) {
      const LocalTensor& grad = ex.gradient(tp.stage_tensor);
      const ir::Shape full = grad.full;
      const Layout target = grad.layout;
      b.coll_predicted += redistribution_bytes(full, target, replicated, gc.mesh()).total;
      const LocalTensor whole = redist.redistribute(grad, replicated);
      const std::int64_t n = ir::num_elements(full);
      const std::int64_t c = chunk_of(n, run.devices);
      const std::int64_t begin = c * static_cast<std::int64_t>(run.local);
      std::vector<float> chunk(static_cast<std::size_t>(c), 0.0f);
      for (std::int64_t i = begin; i < std::min(n, begin + c); ++i)
        chunk[static_cast<std::size_t>(i - begin)] =
            scale * whole.data[static_cast<std::size_t>(i)];
      ring_all_reduce(gc, tp.peers, self, chunk, b);
      const LocalTensor flat{
          {c * static_cast<std::int64_t>(run.devices)}, chunked, std::move(chunk)};
      b.coll_predicted += redistribution_bytes(flat.full, chunked, replicated, gc.mesh()).total;
      LocalTensor summed = redist.redistribute(flat, replicated);
      summed.data.resize(static_cast<std::size_t>(n));
      summed.full = full;
      b.coll_predicted += redistribution_bytes(full, replicated, target, gc.mesh()).total;
      ex.set_gradient(tp.stage_tensor, redist.redistribute(summed, target).data);
    }
  }

  // Sends the gradients of the boundary tensors this stage received back
  // to the stages that produced them (times `scale`: a fault injection).
  void send_gradients(Executor& ex, const std::vector<std::uint8_t>& needs, PipeBytes& b,
                      float scale) const {
    for (const ir::TensorId full : run.sg.received) {
      if (!needs[full]) continue;
      boundary.send(ex.input_gradient(stage_id(full)), {stage_of_producer(pp, mg, full)},
                    grad_tag(full), b, scale);
    }
  }
};

// 1F1B's order on stage i of p over m microbatches (Megatron-LM's
// non-interleaved schedule): min(p - i - 1, m) warm-up forwards, then one
// forward and one backward while forwards remain, then the cool-down
// backwards; a stage holds at most p - i microbatches' activations. Each
// entry: (forward?, microbatch).
std::vector<std::pair<bool, std::int64_t>> one_f_one_b(std::size_t p, std::size_t i,
                                                       std::int64_t m) {
  const std::int64_t warmup = std::min(static_cast<std::int64_t>(p - i - 1), m);
  std::vector<std::pair<bool, std::int64_t>> order;
  for (std::int64_t k = 0; k < warmup; ++k) order.emplace_back(true, k);
  for (std::int64_t r = 0; r < m - warmup; ++r) {
    order.emplace_back(true, warmup + r);
    order.emplace_back(false, r);
  }
  for (std::int64_t r = m - warmup; r < m; ++r) order.emplace_back(false, r);
  return order;
}

// The cost model's point-to-point bytes of one rank's stage per step
// (plan::stage_sends times m, at 4 bytes an element): forward and backward.
std::array<double, 2> model_stage_sends(const Inputs& in, const StageRun& run) {
  const ir::Graph& g = in.problem->graph();
  const plan::PipelinePlan& pp = *in.pipeline;
  const plan::StageGraph whole_stage =
      plan::stage_graph(g, in.problem->spaces(), run.stage->first, run.stage->last);
  // The model prices the graph's dtypes; exec sends f32: its count at 4 bytes an element.
  double dtype_bytes = 0, f32_bytes = 0;
  for (const ir::TensorId t : whole_stage.sent) {
    dtype_bytes += g.tensor(t).bytes();
    f32_bytes += ir::num_elements(g.tensor(t).shape) * 4.0;
  }
  for (const ir::TensorId t : whole_stage.received) {
    dtype_bytes += g.tensor(t).bytes();
    f32_bytes += ir::num_elements(g.tensor(t).shape) * 4.0;
  }
  const double scale =
      static_cast<double>(pp.microbatches) * (dtype_bytes > 0 ? f32_bytes / dtype_bytes : 1.0);
  const double fwd = plan::stage_sends(g, whole_stage, *in.cluster, pp, Mode::Infer).bytes;
  const double both = plan::stage_sends(g, whole_stage, *in.cluster, pp, Mode::Train).bytes;
  return {fwd * scale, (both - fwd) * scale};
}

// The --fault hook of a stage (operator ids of the whole graph), if any.
std::function<void(ir::OpId)> stage_fault_hook(const Inputs& in, const StageRun& run, int rank) {
  if (!in.fault || in.fault->rank != rank) return {};
  const auto inner = fault_hook(*in.fault);
  if (!inner) return {};
  const ir::OpId first = run.stage->first;
  return [inner, first](ir::OpId o) { inner(o + first); };
}

// The sum over every rank of v, on rank 0 (uncounted: a report, not plan traffic).
double sum_to_root(Communicator& world, double v) {
  const auto mine = static_cast<float>(v);
  std::vector<float> all(world.rank() == 0 ? static_cast<std::size_t>(world.size()) : 0);
  world.gather_to_root(&mine, world.rank() == 0 ? all.data() : nullptr, 1);
  double total = 0;
  for (const float x : all) total += x;
  return total;
}

// One stage this rank runs in a training run (a group runs v of them under
// the interleaved schedule), with its executor and exchanges. Made once and
// never moved: the context and the boundary refer to the run.
struct StageWork {
  StageRun run;
  std::unique_ptr<Redistributor> redist;
  std::unique_ptr<Boundary> boundary;
  std::unique_ptr<StageContext> ctx;
  std::unique_ptr<Executor> ex;
  std::vector<TiedParameter> tied;
  std::vector<ir::TensorId> grad_inputs;  // ExecOptions::grad_inputs
  std::deque<Executor::PassState> kept;   // forward passes awaiting their backward
};
using StageWorks = std::vector<std::unique_ptr<StageWork>>;

// One pass of the schedule: the forward or backward pass of one of the
// rank's stages (its chunk) on one microbatch.
struct PassStep {
  bool forward = true;
  std::size_t chunk = 0;
  std::int64_t microbatch = 0;
};

// The order of the passes of group i of p with v stages each over m
// microbatches: 1F1B (v = 1, one_f_one_b), or Megatron-LM's interleaved
// 1F1B (v > 1, m a multiple of p): the v·m chunk passes in rounds of p
// microbatches, each round through the chunks in turn (forward: chunk
// 0 first; backward: chunk v - 1 first), 2(p - i - 1) + (v - 1)·p warm-up
// forwards, then one forward and one backward while forwards remain, then
// the cool-down backwards. The group keeps at most min(warm-up + 1, v·m)
// chunk passes' activations, the cost model's in_flight times v.
// (Megatron-LM runs every pass as warm-up when m = p, which its paired
// sends and receives need; with sends that never wait, the same order as
// for other m runs, and keeps what the model counts.)
std::vector<PassStep> pipeline_order(std::size_t p, std::size_t i, std::size_t v, std::int64_t m) {
  std::vector<PassStep> order;
  if (v <= 1) {
    for (const auto& [forward, k] : one_f_one_b(p, i, m)) order.push_back({forward, 0, k});
    return order;
  }
  const auto pi = static_cast<std::int64_t>(p);
  const auto vi = static_cast<std::int64_t>(v);
  const std::int64_t total = m * vi;
  const std::int64_t warmup =
      std::min(total, 2 * (pi - static_cast<std::int64_t>(i) - 1) + (vi - 1) * pi);
  const auto step = [&](std::int64_t k, bool forward) {
    const std::int64_t in_round = k % (pi * vi);
    const std::int64_t c = in_round / pi;
    return PassStep{forward, static_cast<std::size_t>(forward ? c : vi - 1 - c),
                    (k / (pi * vi)) * pi + k % pi};
  };
  for (std::int64_t k = 0; k < warmup; ++k) order.push_back(step(k, true));
  for (std::int64_t r = 0; r < total - warmup; ++r) {
    order.push_back(step(warmup + r, true));
    order.push_back(step(r, false));
  }
  for (std::int64_t r = total - warmup; r < total; ++r) order.push_back(step(r, false));
  return order;
}

// The chunk passes group i keeps at once under pipeline_order.
std::size_t deepest_kept(std::size_t p, std::size_t i, std::size_t v, std::int64_t m) {
  std::size_t kept = 0, most = 0;
  for (const PassStep& s : pipeline_order(p, i, v, m)) {
    kept = s.forward ? kept + 1 : kept - 1;
    most = std::max(most, kept);
  }
  return most;
}

// What one rank measured over the training steps of a pipelined plan.
struct PipelineTrainRun {
  std::vector<double> losses;       // per step, summed over the stages, on rank 0
  std::array<double, 3> seconds{};  // 1F1B passes, gradient sync, optimizer: slowest rank
  double min_step_s = 1e300;        // the fastest step (each phase its slowest rank)
  std::array<PipeBytes, 3> bytes;   // forward, backward, sync: the last step's
  std::size_t in_flight = 0;        // the most chunk passes whose activations were kept
};

// One forward or backward pass of the schedule on its stage.
void run_pass(const ExecArgs& a, const Inputs& in, StageWork& w, const PassStep& s,
              const std::vector<std::uint8_t>& needs, float grad_scale,
              std::array<PipeBytes, 3>& bytes, double& loss, double& off_clock) {
  const ir::Graph& g = in.problem->graph();
  const StageContext& ctx = *w.ctx;
  Communicator& gc = *w.run.comm;
  Executor& ex = *w.ex;
  if (s.forward) {
    const ir::Graph& sgraph = w.run.sg.graph;
    const std::int64_t k = s.microbatch;
    ex.reseed_inputs([&, k](ir::TensorId t, std::int64_t i) {
      return microbatch_value(g, sgraph, t, i, k, a.seed);
    });
    measured(bytes[0], gc, [&] {
      ctx.receive_inputs(ex, bytes[0]);
      ex.run();
    });
    const auto l0 = std::chrono::steady_clock::now();
    loss += ex.loss();  // a gather inside the group, uncounted
    off_clock += std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
    measured(bytes[0], gc, [&] { ctx.send_outputs(ex, bytes[0]); });
    w.kept.push_back(ex.take_pass());
    return;
  }
  ex.restore_pass(std::move(w.kept.front()));
  w.kept.pop_front();
  measured(bytes[1], gc, [&] {
    ex.backward(ctx.receive_gradients(ex, needs, bytes[1]));
    ctx.send_gradients(ex, needs, bytes[1], grad_scale);
  });
  const Executor::PassState spent = ex.take_pass();  // this microbatch is done
}

// Steps of a pipelined plan on this rank's stages: per step, the forward
// and backward passes of every microbatch on each stage in the schedule's
// order (boundary tensors received and sent forward, their gradients
// back), the gradient synchronisation inside the group (and across the
// groups for tied parameters), the optimizer step on the stages'
// parameters. Gradients accumulate over the microbatches
// (Executor::backward).
PipelineTrainRun run_pipeline_training(const ExecArgs& a, const Inputs& in, StageWorks& works,
                                       Communicator& world, const std::vector<std::uint8_t>& needs,
                                       float grad_scale) {
  const plan::PipelinePlan& pp = *in.pipeline;
  const std::size_t group = works.front()->run.stage->group;
  const auto order = pipeline_order(pp.groups, group, pp.virtual_stages, pp.microbatches);
  // --fault RANK:tied: RANK's share of the tied parameters' sum is doubled.
  const float tied_scale =
      in.fault && in.fault->rank == world.rank() && in.fault->kind == "tied" ? 2.0f : 1.0f;
  PipelineTrainRun r;
  for (int s = 0; s < a.steps; ++s) {
    for (auto& w : works) w->run.comm->reset_counters();
    world.barrier();
    std::array<PipeBytes, 3> bytes;
    double loss = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double off_clock = 0;  // reading the loss, not plan work
    std::size_t kept = 0;
    for (const PassStep& p : order) {
      run_pass(a, in, *works.at(p.chunk), p, needs, grad_scale, bytes, loss, off_clock);
      kept = p.forward ? kept + 1 : kept - 1;
      r.in_flight = std::max(r.in_flight, kept);
    }
    for (auto& w : works) w->boundary->finish();
    const auto t1 = std::chrono::steady_clock::now();
    for (auto& w : works) {
      measured(bytes[2], *w->run.comm, [&] {
        w->ex->sync_gradients();
        w->ctx->sync_tied(*w->ex, w->tied, world.rank(), bytes[2], tied_scale);
      });
    }
    const auto t2 = std::chrono::steady_clock::now();
    // (ZeRO's all-gather of the updated shards runs here, counted in the sync.)
    for (auto& w : works)
      measured(bytes[2], *w->run.comm, [&] { w->ex->optimizer_step(optimizer_settings(a)); });
    const auto t3 = std::chrono::steady_clock::now();
    const std::array<double, 3> local = {std::chrono::duration<double>(t1 - t0).count() - off_clock,
                                         std::chrono::duration<double>(t2 - t1).count(),
                                         std::chrono::duration<double>(t3 - t2).count()};
    double step = 0;
    for (std::size_t p = 0; p < 3; ++p) {
      const double slowest = world.max_over_ranks(local[p]);
      r.seconds[p] += slowest;
      step += slowest;
    }
    r.min_step_s = std::min(r.min_step_s, step);
    r.bytes = bytes;
    // The step's loss: each group's first rank holds its stages' share.
    r.losses.push_back(sum_to_root(world, loss));
  }
  return r;
}

// --check of a pipelined training run: each group's first rank runs the
// whole graph's full-batch steps on one device; rank 0 compares every
// step's loss, every group its stages' parameters (their last gradient and
// their values after the steps). Returns whether this rank's part passed.
bool check_pipeline_training(std::ostream& out, const ExecArgs& a, const Inputs& in,
                             StageWorks& works, const PipelineTrainRun& r, Communicator& world,
                             int rank) {
  const ir::Graph& g = in.problem->graph();
  Reference ref;
  const bool root = works.front()->run.local == 0;
  if (root) {
    plan::Plan one;
    one.mode =
        works.front()->run.stage->plan.mode;  // BatchNorm's statistics as the stages take them
    one.cuts.assign(g.num_operators(), {});
    ref = reference_training(a, in, one);
  }
  bool ok = true;
  if (rank == 0) ok = compare_losses(out, r.losses, ref.run.losses);
  const double grad_max = root ? largest_gradient(*ref.ex, ref.ex->trained()) : 0;
  double grad_worst = 0, param_worst = 0;
  AdamNoise noise;
  const OptimizerSettings opt = optimizer_settings(a);
  std::ostringstream failures;
  std::size_t params = 0;
  for (auto& w : works) {
    Executor& ex = *w->ex;
    const ir::Graph& sgraph = w->run.sg.graph;
    for (const ir::TensorId t : ex.trained()) {
      const std::vector<float> grad = ex.gather_gradient(t);  // collectives within the group
      const std::vector<float> got = ex.gather_full(t);
      if (!root) continue;
      ++params;
      const auto full = g.find_tensor(sgraph.tensor(t).name);
      if (!full) throw Error(Errc::kInternal, "no tensor '" + sgraph.tensor(t).name + "'");
      const std::string name = g.tensor(*full).name + " " +
                               ir::shape_to_string(g.tensor(*full).shape) + " (stage " +
                               std::to_string(w->run.index) + ")";
      ok = compare_parameter(failures, name, opt, a.steps, ref.ex->gradient(*full),
                             ref.ex->block(*full), grad, got, grad_max, grad_worst, param_worst,
                             noise) &&
           ok;
    }
  }
  if (rank == 0) {
    out << failures.str();
  } else if (!failures.str().empty()) {
    std::cerr << "recsearch exec: [rank " + std::to_string(rank) + "]\n" + failures.str()
              << std::flush;
  }
  const double checked = sum_to_root(world, static_cast<double>(params));
  grad_worst = world.max_over_ranks(grad_worst);
  param_worst = world.max_over_ranks(param_worst);
  const AdamNoise noise_all{sum_to_root(world, noise.taken), sum_to_root(world, noise.outside)};
  if (rank == 0) {
    out << "  check " << fmt("%.0f", checked) << " gradient(s) of step " << a.steps
        << " (each on its stage's group): max error relative to max|ref| "
        << fmt("%.3g", grad_worst) << "\n";
    out << "  check " << fmt("%.0f", checked) << " parameter(s) after " << a.steps
        << " step(s): max error relative to 1+max|ref| " << fmt("%.3g", param_worst) << "\n";
    report_adam_noise(out, noise_all);
  }
  return ok;
}

// The cost model's point-to-point bytes of a stage rank per phase (forward,
// backward, and the tied parameters' all-reduce in the gradient sync), and
// the most any rank differs from them.
struct ModelSends {
  std::array<double, 3> bytes;
  std::array<double, 3> off;
};

// Values each rank reports to rank 0 after a pipelined training run.
constexpr std::size_t kPerRank = 5;

// Rank 0's report of a pipelined training run. `per_rank` holds, per rank,
// the chunk passes kept at once, the point-to-point bytes sent forward and
// backward, the operators its backward passes recompute and the parameters
// it keeps as ZeRO-3 shards; `tied`: some parameter is tied across groups
// (its all-reduce is reported).
void report_pipeline_training(std::ostream& out, const ExecArgs& a, const Inputs& in,
                              const StageRun& run, const Communicator& world,
                              const PipelineTrainRun& r, const ModelSends& model,
                              const std::vector<float>& per_rank, bool all_bytes_ok, bool tied) {
  const ir::Graph& g = in.problem->graph();
  const plan::PipelinePlan& pp = *in.pipeline;
  const std::int64_t m = pp.microbatches;
  const bool interleaved = pp.virtual_stages > 1;
  out << "recsearch exec: " << g.name() << " on " << world.size() << " rank(s), pipeline of "
      << pp.stages.size() << " stage(s) on " << pp.groups << " group(s) of " << run.devices << ", "
      << (interleaved ? "interleaved 1F1B (v " + std::to_string(pp.virtual_stages) + ")" : "1F1B")
      << " training over " << m << " microbatch(es), " << a.steps << " step(s), optimizer "
      << a.optimizer << " (lr " << fmt("%g", a.lr) << "), backend mpi\n";
  out << "  loss (sum of one-element outputs and 1/2 mean(y^2) of the others):";
  for (std::size_t s = 0; s < r.losses.size(); ++s)
    out << (s % 6 == 0 ? "\n   " : "") << " " << fmt("%.7g", r.losses[s]);
  out << "\n";
  const double n = a.steps;
  out << "  step time (slowest rank per phase): mean "
      << fmt("%.3f", (r.seconds[0] + r.seconds[1] + r.seconds[2]) / n * 1e3) << " ms, min "
      << fmt("%.3f", r.min_step_s * 1e3) << " ms; 1F1B forward and backward "
      << fmt("%.3f", r.seconds[0] / n * 1e3) << ", gradient sync "
      << fmt("%.3f", r.seconds[1] / n * 1e3) << ", optimizer "
      << fmt("%.3f", r.seconds[2] / n * 1e3) << " ms\n";
  out << "  predicted by the cost model (" << in.cluster_source << "): step "
      << fmt("%.3f", in.predicted.step_s * 1e3) << " ms; measured/predicted "
      << ratio_text((r.seconds[0] + r.seconds[1] + r.seconds[2]) / n, in.predicted.step_s) << "\n";
  // Per group (v = 1: per stage, which is the group's one stage).
  const auto per_group = [&](const char* what, std::size_t at) {
    out << what;
    for (std::size_t j = 0; j < pp.groups; ++j)
      out << (interleaved ? " group " : " stage ") << j << " "
          << fmt("%.0f", per_rank[kPerRank * j * run.devices + at]);
    out << "\n";
  };
  per_group(interleaved ? "  chunk passes whose activations a group kept at once (interleaved: "
                          "min(2(p - i - 1) + (v - 1)p + 1, v m)):"
                        : "  microbatches whose activations a stage kept at once (1F1B: "
                          "min(p - i, m)):",
            0);
  per_group("  operators recomputed in each backward pass:", 3);
  per_group("  parameters kept as ZeRO-3 shards between the passes:", 4);
  out << "  bytes sent per rank, one training step, f32 elements (rank 0; every rank checks "
         "its own):\n";
  for (std::size_t ph = 0; ph < 3; ++ph) {
    const PipeBytes& b = r.bytes[ph];
    out << "    " << kBytePhases[ph] << ":";
    if (ph < 2 || tied) {
      out << (ph < 2 ? "" : " tied parameters") << " point to point measured "
          << fmt("%.0f", b.p2p_measured) << ", predicted " << fmt("%.0f", b.p2p_predicted)
          << ", cost model " << fmt("%.0f", model.bytes[ph])
          << (model.off[ph] <= 0.5 ? " (equal on every rank);" : " (differs on some rank);");
    }
    out << " stage collectives measured " << fmt("%.0f", b.coll_measured) << ", predicted "
        << fmt("%.0f", b.coll_predicted) << "\n";
  }
  out << "    point to point per rank (forward/backward):";
  for (int i = 0; i < world.size(); ++i) {
    const auto k = kPerRank * static_cast<std::size_t>(i);
    out << (i ? ", " : " ") << i << " " << fmt("%.0f", per_rank[k + 1]) << "/"
        << fmt("%.0f", per_rank[k + 2]);
  }
  out << "\n";
  out << "    predicted" << (all_bytes_ok ? ": every rank matches" : ": MISMATCH on some rank")
      << "\n";
}

// One rank's line when its bytes or its schedule depth differ from the prediction.
std::string pipeline_mismatch(int rank, const PipelineTrainRun& r, std::size_t deepest) {
  std::string msg = "recsearch exec: [rank " + std::to_string(rank) + "]";
  for (std::size_t ph = 0; ph < 3; ++ph) {
    const PipeBytes& b = r.bytes[ph];
    msg += " " + std::string(kBytePhases[ph]) + " sent " + fmt("%.0f", b.p2p_measured) +
           " point-to-point and " + fmt("%.0f", b.coll_measured) + " collective bytes, predicted " +
           fmt("%.0f", b.p2p_predicted) + " and " + fmt("%.0f", b.coll_predicted) + ";";
  }
  msg += " kept " + std::to_string(r.in_flight) + " passes, the schedule keeps " +
         std::to_string(deepest) + "\n";
  return msg;
}

// The executor options of a stage's training run: values of the whole
// graph's microbatch 0 (reseeded per microbatch), gradients of the received
// tensors downstream of a parameter (`needs`, whole-graph ids) kept for the
// earlier stages, and this rank's --fault on an operator of its stage.
ExecOptions stage_train_options(const ExecArgs& a, const Inputs& in, const StageContext& ctx,
                                const std::vector<std::uint8_t>& needs, int rank) {
  const StageRun& run = ctx.run;
  const ir::Graph& g = in.problem->graph();
  const ir::Graph& sgraph = run.sg.graph;
  ExecOptions opts;
  opts.seed = a.seed;
  opts.before_op = stage_fault_hook(in, run, rank);
  opts.world_rank_base = rank - static_cast<int>(run.local);
  opts.value = [&g, &sgraph, seed = a.seed](ir::TensorId t, std::int64_t i) {
    return microbatch_value(g, sgraph, t, i, 0, seed);
  };
  opts.bucket_elements = static_cast<std::size_t>(a.bucket_mib * 1024 * 1024 / sizeof(float));
  opts.recompute = true;
  for (const ir::TensorId full : run.sg.received) {
    if (needs[full]) opts.grad_inputs.push_back(ctx.stage_id(full));
  }
  if (in.fault && in.fault->rank == rank) {
    // Operator ids of the whole graph, on the stage that runs them.
    const auto first = static_cast<std::int64_t>(run.stage->first);
    const bool here = in.fault->op >= first && in.fault->op < run.stage->last;
    const auto local_op = static_cast<ir::OpId>(in.fault->op - first);
    if (in.fault->kind == "grad" && here) opts.corrupt_backward_op = local_op;
    if (in.fault->kind == "halo" && here) opts.drop_halo_return_op = local_op;
    if (in.fault->kind == "recompute" && here) opts.corrupt_recompute_op = local_op;
    if (in.fault->kind == "gather" && here) opts.corrupt_gather_op = local_op;
  }
  return opts;
}

// This rank's stages (StageWork without executors, chunk order) on the
// whole job's communicator, made here; each stage's group communicator is
// collective over every rank, so every rank makes its v in the same order.
StageWorks make_stage_works(const ExecArgs& a, const Inputs& in,
                            std::unique_ptr<Communicator>& comm, int rank, const ir::Graph& mg,
                            const std::vector<algebra::OpSpace>& mspaces) {
  const plan::PipelinePlan& pp = *in.pipeline;
  comm = make_communicator(Backend::Mpi, {static_cast<std::int64_t>(in.cluster->num_devices())});
  comm->set_timeout(a.timeout_s);
  const std::size_t devices = in.cluster->num_devices() / pp.groups;
  const std::size_t group = static_cast<std::size_t>(rank) / devices;
  StageWorks works;
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    if (pp.stages[j].group != group) continue;
    auto w = std::make_unique<StageWork>();
    StageRun& run = w->run;
    run.devices = devices;
    run.index = j;
    run.local = static_cast<std::size_t>(rank) % devices;
    run.stage = &pp.stages[j];
    run.sg = plan::stage_graph(mg, mspaces, run.stage->first, run.stage->last);
    works.push_back(std::move(w));
  }
  for (std::size_t c = 0; c < pp.virtual_stages; ++c) {
    // Every group has v stages (the plan reader checks it); a rank short of
    // one would leave the others waiting in the split below.
    if (c >= works.size())
      throw Error(Errc::kInternal,
                  "group " + std::to_string(group) + " has no stage " + std::to_string(c));
    StageRun& run = works[c]->run;
    run.comm = make_group_communicator(Backend::Mpi, mesh_sizes(run.stage->plan),
                                       static_cast<int>(pp.groups));
    run.comm->set_timeout(a.timeout_s);
  }
  for (auto& w : works) {
    StageRun& run = w->run;
    w->redist = std::make_unique<Redistributor>(*run.comm);
    w->boundary = std::make_unique<Boundary>(run, *w->redist, pp);
    w->ctx = std::make_unique<StageContext>(StageContext{pp, mg, run, *w->redist, *w->boundary});
  }
  return works;
}

// The training executor of each of this rank's stages, with its loss
// weights and tied parameters.
void add_stage_executors(const ExecArgs& a, const Inputs& in, StageWorks& works,
                         const ir::Graph& mg, const std::vector<std::uint8_t>& needs, int rank) {
  const plan::PipelinePlan& pp = *in.pipeline;
  const std::int64_t m = pp.microbatches;
  for (auto& w : works) {
    StageRun& run = w->run;
    const ir::Graph& sgraph = run.sg.graph;
    const ExecOptions opts = stage_train_options(a, in, *w->ctx, needs, rank);
    w->grad_inputs = opts.grad_inputs;
    w->ex = std::make_unique<Executor>(sgraph, run.sg.spaces, run.stage->plan, *run.comm, opts);
    // The loss counts the whole graph's outputs; a boundary tensor that no
    // operator of the stage reads gets its gradient from the later stages.
    std::vector<double> scale = microbatch_loss_scale(sgraph, w->ex->outputs(), m);
    for (std::size_t i = 0; i < scale.size(); ++i) {
      const auto full = mg.find_tensor(sgraph.tensor(w->ex->outputs()[i]).name);
      if (full && !mg.tensor(*full).consumers.empty()) scale[i] = 0;
    }
    w->ex->set_loss_scale(scale);
    w->tied = tied_parameters(in, pp, run);
  }
}

// What a stage adds to its rank's prediction per step, beyond what the
// boundary exchange adds as it runs: its forward and backward passes, m
// times (collectives with ZeRO 3's gathers and the recomputed forward, and
// halo rows), and one gradient sync.
void add_stage_prediction(const StageWork& w, std::int64_t m, std::array<PipeBytes, 3>& bytes) {
  const Executor& ex = *w.ex;
  const ir::Graph& sgraph = w.run.sg.graph;
  const auto passes = static_cast<double>(m);
  const std::vector<std::int64_t> coords =
      rank_coords(static_cast<std::int64_t>(w.run.local), w.run.comm->mesh());
  // Each parameter's own ZeRO stage; ZeRO 3's all-gathers in both passes.
  const std::vector<int> zero = plan::parameter_zero(sgraph, w.run.stage->plan.training);
  const TrainBytePrediction tp =
      predict_train_bytes(sgraph, ex.layouts(), zero, 4.0, w.grad_inputs);
  const Zero3GatherBytes gathers = predict_zero3_gather_bytes(
      sgraph, ex.layouts(), ex.gradient_layouts(), zero, ex.recompute_plan());
  // The recomputed forward runs inside the backward pass.
  const double again = predict_recompute_bytes(sgraph, ex.layouts(), ex.recompute_plan()).total;
  bytes[0].coll_predicted +=
      passes * (predict_exec_bytes(sgraph, ex.layouts()).total + gathers.forward.total);
  bytes[1].coll_predicted += passes * (tp.backward.total + again + gathers.backward.total);
  bytes[2].coll_predicted += tp.gradient_sync.total;
  bytes[0].p2p_predicted += passes * predict_halo_bytes(sgraph, ex.layouts(), coords);
  bytes[1].p2p_predicted +=
      passes * (predict_halo_backward_bytes(sgraph, ex.layouts(), ex.gradient_layouts(), coords) +
                predict_recompute_halo_bytes(sgraph, ex.layouts(), ex.recompute_plan(), coords));
}

// --train of a pipelined plan (docs/exec.md, Pipelines): the steps, every
// rank's bytes against the prediction, the report and with --check the
// one-device comparison. Returns the exit code.
int execute_pipeline_training(const ExecArgs& a, const Inputs& in,
                              std::unique_ptr<Communicator>& comm, int rank) {
  const ir::Graph& g = in.problem->graph();
  const plan::PipelinePlan& pp = *in.pipeline;
  const std::int64_t m = pp.microbatches;
  std::optional<plan::MicrobatchView> mv;
  if (m > 1) mv = plan::microbatch_view(g, in.problem->spaces(), m);
  const ir::Graph& mg = mv ? mv->graph : g;
  // A boundary tensor carries a gradient back when, in the whole graph, it
  // is downstream of a parameter (the producing stage's layouts say the same).
  const std::vector<std::uint8_t> needs = ir::gradient_tensors(mg);
  StageWorks works =
      make_stage_works(a, in, comm, rank, mg, mv ? mv->spaces : in.problem->spaces());
  add_stage_executors(a, in, works, mg, needs, rank);
  // --fault RANK:boundary: the gradients RANK sends back are doubled.
  const float grad_scale =
      in.fault && in.fault->rank == rank && in.fault->kind == "boundary" ? 2.0f : 1.0f;
  PipelineTrainRun r = run_pipeline_training(a, in, works, *comm, needs, grad_scale);
  std::array<PipeBytes, 3> predicted;
  for (const auto& w : works) add_stage_prediction(*w, m, predicted);
  bool bytes_ok = true;
  for (std::size_t ph = 0; ph < 3; ++ph) {
    r.bytes[ph].coll_predicted += predicted[ph].coll_predicted;
    r.bytes[ph].p2p_predicted += predicted[ph].p2p_predicted;
    bytes_ok = bytes_ok && r.bytes[ph].equal();
  }
  const StageRun& first = works.front()->run;
  const std::size_t deepest = deepest_kept(pp.groups, first.stage->group, pp.virtual_stages, m);
  const bool depth_ok = r.in_flight == deepest;
  const bool all_bytes_ok = comm->max_over_ranks(bytes_ok && depth_ok ? 0.0 : 1.0) == 0.0;
  std::array<double, 3> model{};
  for (const auto& w : works) {
    const std::array<double, 2> sends = model_stage_sends(in, w->run);
    model[0] += sends[0];
    model[1] += sends[1];
    for (const TiedParameter& t : w->tied) model[2] += t.model_bytes;
  }
  std::array<double, 3> model_off{};
  for (std::size_t ph = 0; ph < 3; ++ph)
    model_off[ph] = comm->max_over_ranks(std::abs(r.bytes[ph].p2p_measured - model[ph]));
  bool has_tied = false;
  for (const auto& w : works) has_tied = has_tied || !w->tied.empty();
  const bool any_tied = comm->max_over_ranks(has_tied ? 1.0 : 0.0) > 0;
  // Per rank (kPerRank values): chunk passes kept at once, point-to-point
  // bytes forward and backward, operators its backward passes recompute,
  // parameters it keeps as ZeRO-3 shards.
  std::size_t recomputed = 0, sharded = 0;
  for (const auto& w : works) {
    for (const std::uint8_t x : w->ex->recompute_plan().op) recomputed += x;
    for (const ir::TensorId t : w->ex->trained())
      sharded += w->ex->block(t).layout != w->ex->layouts().holders[t] ? 1 : 0;
  }
  const std::array<float, kPerRank> mine = {
      static_cast<float>(r.in_flight), static_cast<float>(r.bytes[0].p2p_measured),
      static_cast<float>(r.bytes[1].p2p_measured), static_cast<float>(recomputed),
      static_cast<float>(sharded)};
  std::vector<float> per_rank(rank == 0 ? kPerRank * static_cast<std::size_t>(comm->size()) : 0);
  comm->gather_to_root(mine.data(), rank == 0 ? per_rank.data() : nullptr, kPerRank);

  std::ostringstream out;
  if (rank == 0) {
    report_pipeline_training(out, a, in, first, *comm, r, {model, model_off}, per_rank,
                             all_bytes_ok, any_tied);
  }
  int code = all_bytes_ok ? 0 : exit_code(Errc::kRuntime);
  if (a.check) {
    const bool ok = check_pipeline_training(out, a, in, works, r, *comm, rank);
    const bool all_ok = comm->max_over_ranks(ok && all_bytes_ok ? 0.0 : 1.0) == 0.0;
    if (!all_ok) code = exit_code(Errc::kRuntime);
    if (rank == 0) out << "  check: " << (all_ok ? "passed" : "FAILED") << "\n";
  }
  if (rank == 0) std::cout << out.str() << std::flush;
  if (!bytes_ok || !depth_ok) std::cerr << pipeline_mismatch(rank, r, deepest) << std::flush;
  works.clear();
  comm.reset();
  return code;
}

int execute_pipeline(const ExecArgs& a, const Inputs& in, std::unique_ptr<Communicator>& comm,
                     int rank) {
  if (a.train) return execute_pipeline_training(a, in, comm, rank);
  const ir::Graph& g = in.problem->graph();
  const plan::PipelinePlan& pp = *in.pipeline;
  const std::int64_t m = pp.microbatches;
  std::optional<plan::MicrobatchView> mv;
  if (m > 1) mv = plan::microbatch_view(g, in.problem->spaces(), m);
  const ir::Graph& mg = mv ? mv->graph : g;
  const std::vector<algebra::OpSpace>& mspaces = mv ? mv->spaces : in.problem->spaces();
  StageWorks works = make_stage_works(a, in, comm, rank, mg, mspaces);
  const StageRun& first = works.front()->run;
  PipeBytes r;
  // Per stage of this rank (chunk), per microbatch: the executor that ran it.
  std::vector<std::vector<std::unique_ptr<Executor>>> done(works.size());
  for (auto& d : done) d.resize(static_cast<std::size_t>(m));
  comm->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  // The schedule's forward passes in its order: each stage runs microbatch
  // 0, 1, ... as its inputs arrive (interleaved: in rounds of p microbatches
  // through the group's chunks).
  for (const PassStep& step : pipeline_order(pp.groups, first.stage->group, pp.virtual_stages, m)) {
    if (!step.forward) continue;
    StageWork& w = *works.at(step.chunk);
    const StageRun& run = w.run;
    const ir::Graph& sgraph = run.sg.graph;
    const std::int64_t k = step.microbatch;
    ExecOptions opts;
    opts.seed = a.seed;
    opts.before_op = stage_fault_hook(in, run, rank);
    opts.world_rank_base = rank - static_cast<int>(run.local);
    opts.value = [&g, &sgraph, k, seed = a.seed](ir::TensorId t, std::int64_t i) {
      return microbatch_value(g, sgraph, t, i, k, seed);
    };
    auto ex = std::make_unique<Executor>(sgraph, run.sg.spaces, run.stage->plan, *run.comm, opts);
    w.ctx->receive_inputs(*ex, r);
    r.coll_predicted += predict_exec_bytes(sgraph, ex->layouts()).total;
    r.p2p_predicted += predict_halo_bytes(
        sgraph, ex->layouts(), rank_coords(static_cast<std::int64_t>(run.local), run.comm->mesh()));
    ex->run();
    w.ctx->send_outputs(*ex, r);
    done[step.chunk][static_cast<std::size_t>(k)] = std::move(ex);
  }
  for (auto& w : works) w->boundary->finish();
  const double seconds = comm->max_over_ranks(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  double model_p2p = 0;
  for (const auto& w : works) {
    r.p2p_measured += w->run.comm->p2p_bytes();
    r.coll_measured += w->run.comm->bytes_sent();
    model_p2p += model_stage_sends(in, w->run)[0];
  }
  const bool bytes_ok = r.equal();
  const bool all_bytes_ok = comm->max_over_ranks(bytes_ok ? 0.0 : 1.0) == 0.0;
  const double worst_p2p = comm->max_over_ranks(std::abs(r.p2p_measured - model_p2p));

  std::ostringstream out;
  if (rank == 0) {
    out << "recsearch exec: " << g.name() << " on " << comm->size() << " rank(s), pipeline of "
        << pp.stages.size() << " stage(s) on " << pp.groups << " group(s) of " << first.devices
        << ", "
        << (pp.virtual_stages > 1 ? "interleaved 1F1B (v " + std::to_string(pp.virtual_stages) + ")"
                                  : std::string("1F1B"))
        << " forward over " << m << " microbatch(es), backend mpi\n";
    out << "  forward time (slowest rank, every microbatch): " << fmt("%.3f", seconds * 1e3)
        << " ms\n";
    out << "  bytes sent per rank, one forward pass, f32 elements (rank 0):\n"
        << "    point to point: measured " << fmt("%.0f", r.p2p_measured) << ", predicted "
        << fmt("%.0f", r.p2p_predicted) << ", cost model " << fmt("%.0f", model_p2p)
        << (worst_p2p <= 0.5 ? " (equal on every rank)" : " (differs on some rank)") << "\n"
        << "    stage collectives: measured " << fmt("%.0f", r.coll_measured) << ", predicted "
        << fmt("%.0f", r.coll_predicted) << "\n"
        << "    predicted" << (all_bytes_ok ? ": every rank matches" : ": MISMATCH on some rank")
        << "\n";
  }
  int code = all_bytes_ok ? 0 : exit_code(Errc::kRuntime);
  if (a.check) {
    // Each group's first rank runs every microbatch of the unpipelined
    // microbatch graph on one device and compares its stages' graph outputs.
    bool ok = true;
    double worst = 0;
    std::size_t compared = 0;
    for (std::int64_t k = 0; k < m; ++k) {
      std::unique_ptr<Communicator> solo;
      std::unique_ptr<Executor> ref;
      if (first.local == 0) {
        plan::Plan one;
        one.cuts.assign(mg.num_operators(), {});
        solo = make_local_communicator();
        ExecOptions ro;
        ro.seed = a.seed;
        ro.value = [&, k](ir::TensorId t, std::int64_t i) {
          return microbatch_value(g, mg, t, i, k, a.seed);
        };
        ref = std::make_unique<Executor>(mg, mspaces, one, *solo, ro);
        ref->run();
      }
      for (std::size_t c = 0; c < works.size(); ++c) {
        Executor& ex = *done[c][static_cast<std::size_t>(k)];
        const ir::Graph& sgraph = works[c]->run.sg.graph;
        for (const ir::TensorId t : ex.outputs()) {
          const auto full = mg.find_tensor(sgraph.tensor(t).name);
          if (!full || !mg.tensor(*full).consumers.empty()) continue;  // sent, not an output
          const std::vector<float> got = ex.gather_full(t);  // collective within the group
          if (first.local != 0) continue;
          double max_abs = 0;
          const double err = normwise_error(ref->block(*full).data, got, &max_abs);
          worst = std::max(worst, err);
          ++compared;
          if (!(err <= kTolerance)) {
            ok = false;
            std::cerr << ("recsearch exec: [rank " + std::to_string(rank) + "] check output " +
                          mg.tensor(*full).name + " of microbatch " + std::to_string(k) +
                          ": max abs error " + fmt("%.3g", max_abs) + " FAILED (tolerance 1e-4)\n")
                      << std::flush;
          }
        }
      }
    }
    const double all_worst = comm->max_over_ranks(worst);
    const double all_compared = comm->max_over_ranks(static_cast<double>(compared));
    const bool all_ok = comm->max_over_ranks(ok && all_bytes_ok ? 0.0 : 1.0) == 0.0;
    if (!all_ok) code = exit_code(Errc::kRuntime);
    if (rank == 0) {
      out << "  check every output of every microbatch against a one-device run: max error "
          << "relative to 1+max|ref| " << fmt("%.3g", all_worst) << " (up to "
          << fmt("%.0f", all_compared) << " output block(s) on a group)\n";
      out << "  check: " << (all_ok ? "passed" : "FAILED") << "\n";
    }
  }
  if (rank == 0) std::cout << out.str() << std::flush;
  if (!bytes_ok) {
    std::cerr << ("recsearch exec: [rank " + std::to_string(rank) + "] sent " +
                  fmt("%.0f", r.p2p_measured) + " point-to-point and " +
                  fmt("%.0f", r.coll_measured) + " collective bytes, the plan predicts " +
                  fmt("%.0f", r.p2p_predicted) + " and " + fmt("%.0f", r.coll_predicted) + "\n")
              << std::flush;
  }
  done.clear();
  works.clear();
  comm.reset();
  return code;
}

// Executes the agreed inputs and reports on rank 0; returns the exit code.
// Traffic the plan does not account for is a failure, check or not.
int execute(const ExecArgs& a, const Inputs& in, std::unique_ptr<Communicator>& comm, int rank) {
  const oneapi::tbb::global_control threads(oneapi::tbb::global_control::max_allowed_parallelism,
                                            threads_per_rank());
  if (in.pipeline) return execute_pipeline(a, in, comm, rank);
  comm = make_communicator(a.backend, mesh_sizes(in.plan));
  comm->set_timeout(a.timeout_s);
  ExecOptions opts;
  opts.seed = a.seed;
  opts.use_gpu = a.backend == Backend::Nccl;
  opts.bucket_elements = static_cast<std::size_t>(a.bucket_mib * 1024 * 1024 / sizeof(float));
  opts.recompute = a.train;
  if (in.fault && in.fault->rank == rank) {
    opts.before_op = fault_hook(*in.fault);
    if (in.fault->kind == "grad") opts.corrupt_backward_op = static_cast<ir::OpId>(in.fault->op);
    if (in.fault->kind == "halo") opts.drop_halo_return_op = static_cast<ir::OpId>(in.fault->op);
    if (in.fault->kind == "recompute")
      opts.corrupt_recompute_op = static_cast<ir::OpId>(in.fault->op);
    if (in.fault->kind == "gather") opts.corrupt_gather_op = static_cast<ir::OpId>(in.fault->op);
  }
  if (in.micro) {
    // Microbatch 0's rows; run_training moves to the next ones.
    const ir::Graph* whole = &in.problem->graph();
    const ir::Graph* part = &in.micro->graph;
    opts.value = [whole, part, seed = a.seed](ir::TensorId t, std::int64_t i) {
      return microbatch_value(*whole, *part, t, i, 0, seed);
    };
  }
  Executor ex(in.micro ? in.micro->graph : in.problem->graph(),
              in.micro ? in.micro->spaces : in.problem->spaces(), in.plan, *comm, opts);
  if (a.train) {
    const int code = execute_training(a, in, ex, *comm, rank);
    comm.reset();
    return code;
  }
  const BytePrediction predicted = predict_exec_bytes(in.problem->graph(), ex.layouts());
  const double halo_predicted =
      predict_halo_bytes(in.problem->graph(), ex.layouts(), rank_coords(rank, ex.layouts().mesh));

  const Timing timing = run_steps(ex, *comm, a.steps);
  const double measured = comm->bytes_sent();
  const double halo_measured = comm->p2p_bytes();
  const bool bytes_ok = std::abs(measured - predicted.total) <= 0.5 &&
                        std::abs(halo_measured - halo_predicted) <= 0.5;
  const bool all_bytes_ok = comm->max_over_ranks(bytes_ok ? 0.0 : 1.0) == 0.0;
  const double halo_largest = comm->max_over_ranks(halo_predicted);

  std::ostringstream out;
  report_run(out, a, in, *comm, timing, predicted, all_bytes_ok,
             {halo_measured, halo_predicted, halo_largest}, ex.layouts());
  int code = all_bytes_ok ? 0 : exit_code(Errc::kRuntime);
  if (a.check) {
    const bool ok = check_against_one_device(out, a, in, ex, rank);
    if (!all_bytes_ok) {
      out << "  check bytes: FAILED (a rank sent other bytes than the plan predicts; rank 0: "
          << fmt("%.0f", measured) << " in collectives, " << fmt("%.0f", halo_measured)
          << " point to point, predicted " << fmt("%.0f", predicted.total) << " and "
          << fmt("%.0f", halo_predicted) << ")\n";
    }
    const bool all_ok = comm->max_over_ranks(ok && all_bytes_ok ? 0.0 : 1.0) == 0.0;
    if (!all_ok) code = exit_code(Errc::kRuntime);
    if (rank == 0) out << "  check: " << (all_ok ? "passed" : "FAILED") << "\n";
  }
  if (rank == 0) std::cout << out.str() << std::flush;
  if (!all_bytes_ok && rank != 0) {
    std::cerr << "recsearch exec: [rank " << rank << "] sent " << fmt("%.0f", measured)
              << " bytes in collectives and " << fmt("%.0f", halo_measured)
              << " point to point, the plan predicts " << fmt("%.0f", predicted.total) << " and "
              << fmt("%.0f", halo_predicted) << std::endl;
  }
  comm.reset();
  return code;
}

}  // namespace

int run_exec(const ExecArgs& a, int* argc, char*** argv) {
  Runtime rt(argc, argv);
  const int rank = rt.world_rank();
  std::unique_ptr<Communicator> comm;
  // Input is read and checked on every rank without traffic; then the ranks
  // agree (one all-reduce) on whether any failed, so that a bad graph or
  // plan ends every rank with its exit code before the first collective.
  const auto agree_on_input = [&](int code, const std::string& msg) {
    const auto [worst, who] = rt.agree(code, a.timeout_s);
    if (worst != 0 && who == rank)
      std::cerr << ("recsearch exec: [rank " + std::to_string(rank) + "] " + msg + "\n")
                << std::flush;
    return worst;
  };
  Inputs in;
  // A rank that failed to read has told the others in agree_on_input (a non-zero result).
  const int read = detail::guarded(
      [&] {
        in = load_inputs(a, rt.world_size());
        return 0;
      },
      [&](const std::string& msg, int code) { return agree_on_input(code, msg); });
  if (read != 0) return read;
  if (const int worst = agree_on_input(0, {}); worst != 0) return worst;
  return detail::guarded([&] { return execute(a, in, comm, rank); },
                         [&](const std::string& msg, int code) -> int {
                           detail::fail_every_rank(comm.get(), "recsearch exec", rank, msg, code);
                         });
}

}  // namespace recsearch::exec
