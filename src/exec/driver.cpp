// `recsearch exec` on every rank (exec/driver.hpp): reads and checks the
// graph and plan before any collective, runs the forward pass `steps` times,
// and with --check compares the outputs with a one-device run on rank 0
// and the bytes each rank sent with the bytes predicted from the plan.
#include "recsearch/exec/driver.hpp"

#include <nlohmann/json.hpp>  // reads the plan file's stated redistributions
#include <oneapi/tbb/global_control.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/exec/executor.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"

namespace recsearch::exec {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string source_name(const std::string& p) { return p == "-" ? "<stdin>" : p; }

struct Fault {
  int rank = -1;
  std::string kind;
  std::int64_t op = 0;
};

Fault parse_fault(const std::string& s) {
  Fault f;
  const auto c1 = s.find(':');
  if (c1 == std::string::npos) throw Error(Errc::kUsage, "--fault '" + s + "': expected RANK:KIND[:OP]");
  const auto c2 = s.find(':', c1 + 1);
  try {
    f.rank = std::stoi(s.substr(0, c1));
    f.kind = s.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    if (c2 != std::string::npos) f.op = std::stoll(s.substr(c2 + 1));
  } catch (const std::exception&) {
    throw Error(Errc::kUsage, "--fault '" + s + "': expected RANK:KIND[:OP]");
  }
  if (f.kind != "throw" && f.kind != "kill" && f.kind != "stall") {
    throw Error(Errc::kUsage, "--fault '" + s + "': KIND is throw, kill or stall");
  }
  return f;
}

Cluster cluster_for(const std::string& text, const std::string& source) {
  if (auto c = io::plan_cluster(text, source)) return *c;
  const auto sizes = io::plan_mesh_sizes(text, source);
  if (sizes.empty()) throw Error(Errc::kPlan, "the plan has no mesh", "/mesh", source);
  std::int64_t n = 1;
  for (const auto s : sizes) {
    if (s < 1 || n > kMaxDevices / s) throw Error(Errc::kPlan, "bad mesh axis sizes", "/mesh", source);
    n *= s;
  }
  return sizes == prime_factors(n) ? Cluster::flat(n) : Cluster::mesh(sizes);
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

// Forward bytes per device the cost model counts (layout and output
// events), with every element at the executor's 4 bytes.
double model_forward_bytes(const ir::Graph& g, const plan::Evaluation& ev, bool f32_elements) {
  double sum = 0;
  for (const auto& e : ev.events) {
    if (e.phase != cost::Phase::Forward) continue;
    if (e.reason != plan::CommReason::Layout && e.reason != plan::CommReason::Output) continue;
    const double width = static_cast<double>(ir::dtype_size(g.tensor(e.tensor).dtype));
    sum += f32_elements ? e.bytes * 4.0 / width : e.bytes;
  }
  return sum;
}

// Thrown once the ranks agreed that the input is bad: every rank returns
// this code (the failing one has said why).
struct InputRejected {
  int code;
};

int fail(Communicator* comm, int rank, const std::string& msg, int code) {
  // One write per message, so that ranks' lines do not interleave.
  std::cerr << ("recsearch exec: [rank " + std::to_string(rank) + "] " + msg + "\n") << std::flush;
  if (comm != nullptr) comm->abort_all(code);
  Runtime::abort_all(code);
}

}  // namespace

int run_exec(const ExecArgs& a, int* argc, char*** argv) {
  Runtime rt(argc, argv);
  const int rank = rt.world_rank();
  std::unique_ptr<Communicator> comm;
  // Input is read and checked on every rank without traffic; then the ranks
  // agree (one all-reduce) on whether any failed, so that a bad graph or
  // plan ends every rank with its exit code before the first collective.
  bool input_agreed = false;
  int pre_code = 0;
  std::string pre_msg;
  const auto agree_on_input = [&] {
    const auto [worst, who] = rt.agree(pre_code, a.timeout_s);
    if (worst == 0) return;
    if (who == rank) std::cerr << ("recsearch exec: [rank " + std::to_string(rank) + "] " + pre_msg + "\n") << std::flush;
    throw InputRejected{worst};
  };
  try {
    if (a.steps < 1) throw Error(Errc::kUsage, "--steps must be at least 1");
    std::optional<Fault> fault;
    if (a.fault) fault = parse_fault(*a.fault);
    const std::string gsrc = source_name(a.graph);
    const std::string psrc = source_name(a.plan);
    ir::Graph g = io::read_graph_file(a.graph);
    std::vector<algebra::OpSpace> spaces;
    try {
      spaces = algebra::build_op_spaces(g);
    } catch (const Error& e) {
      throw e.file().empty() ? e.in_file(gsrc) : e;
    }
    const std::string ptext = io::read_text_file(a.plan);
    const Cluster cluster = cluster_for(ptext, psrc);
    plan::Plan p = io::parse_plan(ptext, psrc, g, spaces, cluster.cuts());
    try {
      plan::check_plan(g, spaces, p);
    } catch (const Error& e) {
      throw e.file().empty() ? e.in_file(psrc) : e;
    }
    if (p.num_devices() != rt.world_size()) {
      throw Error(Errc::kPlan,
                  "the plan is for " + std::to_string(p.num_devices()) + " devices but " +
                      std::to_string(rt.world_size()) + " ranks run it (mpirun -np " +
                      std::to_string(p.num_devices()) + ")",
                  "/mesh", psrc);
    }
    const plan::Evaluation ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
    const double model_stated = model_forward_bytes(g, ev, false);
    if (const auto stated = stated_forward_bytes(ptext, psrc)) {
      if (std::abs(*stated - model_stated) > 1e-6 * std::max(1.0, model_stated) + 0.5) {
        throw Error(Errc::kPlan,
                    "the plan states " + fmt("%.0f", *stated) +
                        " forward bytes per device, but its cuts imply " + fmt("%.0f", model_stated),
                    "/redistributions", psrc);
      }
    }
    if (const auto bad = unsupported_operators(g, spaces, p); !bad.empty()) {
      std::string msg = std::to_string(bad.size()) + " operator(s) cannot be executed:";
      for (const auto& b : bad) msg += "\n  " + b;
      throw Error(Errc::kUsage, msg, "", gsrc);
    }
    if (!backend_available(a.backend)) {
      throw Error(Errc::kUsage, std::string("this build has no ") +
                                    (a.backend == Backend::Mpi ? "MPI" : "NCCL/CUDA") + " backend");
    }
    if (std::string why; a.backend == Backend::Nccl && !gpu_usable(&why)) {
      throw Error(Errc::kRuntime, "no usable GPU: " + why);
    }
    agree_on_input();
    input_agreed = true;

    // Ranks sharing a machine share its cores: oneTBB gets this rank's share.
    int local_ranks = 1;
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local_ranks = std::max(1, std::atoi(v));
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const oneapi::tbb::global_control threads(oneapi::tbb::global_control::max_allowed_parallelism,
                                              static_cast<std::size_t>(std::max(1, cores / local_ranks)));
    comm = make_communicator(a.backend, mesh_sizes(p));
    comm->set_timeout(a.timeout_s);
    ExecOptions opts;
    opts.seed = a.seed;
    opts.use_gpu = a.backend == Backend::Nccl;
    if (fault && fault->rank == rank) {
      const Fault f = *fault;
      opts.before_op = [f](ir::OpId o) {
        if (static_cast<std::int64_t>(o) != f.op) return;
        if (f.kind == "throw") throw Error(Errc::kRuntime, "injected failure before operator " + std::to_string(o));
        if (f.kind == "kill") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::hours(1));  // stall
      };
    }
    Executor ex(g, spaces, p, *comm, opts);
    const BytePrediction predicted = predict_exec_bytes(g, ex.layouts());

    double total_s = 0, min_s = 1e300;
    for (int s = 0; s < a.steps; ++s) {
      comm->reset_counters();
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      ex.run();
      const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double slowest = comm->max_over_ranks(local);
      total_s += slowest;
      min_s = std::min(min_s, slowest);
    }
    const double measured = comm->bytes_sent();
    const bool bytes_ok = std::abs(measured - predicted.total) <= 0.5;
    const bool all_bytes_ok = comm->max_over_ranks(bytes_ok ? 0.0 : 1.0) == 0.0;
    const double model = model_forward_bytes(g, ev, true);

    std::ostringstream out;
    std::string mesh_text;
    for (std::size_t i = 0; i < p.mesh.size(); ++i) mesh_text += (i ? "x" : "") + std::to_string(p.mesh[i].size);
    out << "recsearch exec: " << g.name() << " on " << comm->size() << " rank(s), mesh "
        << (mesh_text.empty() ? "1" : mesh_text) << ", backend " << comm->backend_name() << ", "
        << a.steps << " step(s)\n";
    out << "  step time (forward, slowest rank): mean " << fmt("%.3f", total_s / a.steps * 1e3)
        << " ms, min " << fmt("%.3f", min_s * 1e3) << " ms\n";
    out << "  bytes sent per rank, one forward pass, f32 elements:\n"
        << "    measured (rank 0)              " << fmt("%.0f", measured) << "\n"
        << "    predicted from the plan layouts " << fmt("%.0f", predicted.total)
        << (all_bytes_ok ? " (every rank matches)" : " (MISMATCH on some rank)") << "\n"
        << "    cost model forward collectives " << fmt("%.0f", model)
        << (std::abs(model - predicted.total) <= 0.5
                ? " (equal)"
                : " (differs: the model spreads a collective over the devices below its cut and "
                  "moves a dim's inner axes for free)")
        << "\n";
    const auto& calls = comm->calls();
    out << "    collectives: all-gather " << calls[0] << ", all-reduce " << calls[1]
        << ", reduce-scatter " << calls[2] << ", all-to-all " << calls[3] << "\n";
    for (std::size_t ax = 0; ax < p.mesh.size(); ++ax) {
      out << "    axis " << p.mesh[ax].axis << " (size " << p.mesh[ax].size << "): measured "
          << fmt("%.0f", comm->bytes_per_axis()[ax]) << ", predicted " << fmt("%.0f", predicted.per_axis[ax]) << "\n";
    }

    // Traffic the plan does not account for is a failure, check or not.
    int code = all_bytes_ok ? 0 : exit_code(Errc::kRuntime);
    if (a.check) {
      std::unique_ptr<Communicator> solo;
      std::unique_ptr<Executor> ref;
      plan::Plan one = p;
      one.mesh.clear();
      for (auto& c : one.cuts) c.clear();
      if (rank == 0) {
        solo = make_local_communicator();
        ref = std::make_unique<Executor>(g, spaces, one, *solo, ExecOptions{a.seed, false, {}});
        ref->run();
      }
      // Every output, and every activation held without partial sums.
      bool ok = true;
      double inner_worst = 0;
      std::size_t inner_count = 0;
      for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
        if (g.tensor(t).producer == ir::kNone) continue;
        const bool output = g.tensor(t).consumers.empty();
        bool partial = false;
        for (const auto& x : ex.block(t).layout) partial = partial || x.kind == cost::LayoutKind::Partial;
        if (partial) continue;
        const std::vector<float> got = ex.gather_full(t);
        if (rank != 0) continue;
        const auto& want = ref->block(t).data;
        // Normwise: the largest error relative to the tensor's largest value
        // (summation order differs between the runs; cancellation in one
        // element is judged against the size of what was summed).
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
        const double worst = nan_mismatch ? INFINITY : max_abs / (1.0 + scale);
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
      if (!all_bytes_ok) {
        out << "  check bytes: FAILED (a rank sent " << fmt("%.0f", measured)
            << " bytes, the plan predicts " << fmt("%.0f", predicted.total) << ")\n";
      }
      const bool all_ok = comm->max_over_ranks(ok && all_bytes_ok ? 0.0 : 1.0) == 0.0;
      if (!all_ok) code = exit_code(Errc::kRuntime);
      if (rank == 0) out << "  check: " << (all_ok ? "passed" : "FAILED") << "\n";
    }
    if (rank == 0) std::cout << out.str() << std::flush;
    if (!all_bytes_ok && rank != 0) {
      std::cerr << "recsearch exec: [rank " << rank << "] sent " << fmt("%.0f", measured)
                << " bytes, the plan predicts " << fmt("%.0f", predicted.total) << std::endl;
    }
    comm.reset();
    return code;
  } catch (const InputRejected& r) {
    return r.code;
  } catch (const Error& e) {
    if (!input_agreed) {
      pre_code = exit_code(e.code());
      pre_msg = e.what();
      try {
        agree_on_input();
      } catch (const InputRejected& r) {
        return r.code;
      }
    }
    return fail(comm.get(), rank, e.what(), exit_code(e.code()));
  } catch (const std::bad_alloc&) {
    return fail(comm.get(), rank, "out of memory", 4);
  } catch (const std::exception& e) {
    return fail(comm.get(), rank, std::string("internal error: ") + e.what(), 4);
  }
}

}  // namespace recsearch::exec
