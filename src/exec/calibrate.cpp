// SPDX-License-Identifier: Apache-2.0
// `recsearch calibrate` (docs/exec.md, Calibration): times the executor's
// own MatMul kernels (forward and backward) on the shapes transformer and
// MLP layers give a rank, its own memory-bound kernels (forward and
// backward), square GEMMs and a streaming copy for comparison, and the
// communicator's four collectives on every rank of an MPI job, fits the
// collectives to the cost model's latency + bytes/bandwidth form, and
// writes the figures as a cluster file.
// Every rank runs every measurement at once, as exec's ranks do, so that
// the figures include the contention of N processes on one machine; a
// timed figure is the slowest rank's, the median over repetitions.
#include "recsearch/exec/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include <oneapi/tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "exec/backends.hpp"
#include "exec/calibrate_gpu.hpp"
#include "exec/guard.hpp"
#include "exec/kernels.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::exec {

namespace {

using detail::Buf;
using detail::KernelArgs;
using detail::numel;
using detail::run_backward_kernel;
using detail::run_kernel;

// Threads per rank as the exec driver sets them: the cores shared evenly by
// the ranks on this node, so GEMM figures match what exec's kernels get.
std::size_t threads_per_rank() {
  int local_ranks = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local_ranks = std::max(1, std::atoi(v));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<std::size_t>(std::max(1, cores / local_ranks));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median over reps of the slowest rank's seconds for `op`, after one
// untimed run (first-touch page faults, lazy connection setup).
double time_on_all_ranks(Communicator& comm, int reps, const std::function<void()>& op) {
  comm.barrier();
  op();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(comm.max_over_ranks(dt));
  }
  return median(std::move(times));
}

std::vector<GemmSample> measure_gemm(Communicator& comm, int reps) {
  std::vector<GemmSample> out;
  for (const long long s : {128LL, 256LL, 512LL}) {
    const auto n = static_cast<std::size_t>(s * s);
    std::vector<float> a(n), b(n), c(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i % 7) * 0.25f;
      b[i] = static_cast<float>(i % 5) * 0.5f;
    }
    detail::GemmBatch g;
    g.m = g.n = g.k = s;
    g.a_off = g.b_off = g.c_off = {0};
    GemmSample gs;
    gs.size = s;
    gs.seconds =
        time_on_all_ranks(comm, reps, [&] { detail::gemm_cpu(g, a.data(), b.data(), c.data()); });
    gs.flops_per_s =
        2.0 * static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(s) / gs.seconds;
    out.push_back(gs);
  }
  return out;
}

// A parallel copy over the rank's threads, as the elementwise kernels run.
double measure_copy(Communicator& comm, int reps, double* bytes) {
  const std::size_t n = std::size_t{8} << 20;  // 32 MiB of f32, far past the caches
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  const double s = time_on_all_ranks(comm, reps, [&] {
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<std::size_t>(0, n, std::size_t{1} << 16),
                              [&](const oneapi::tbb::blocked_range<std::size_t>& r) {
                                std::copy(src.begin() + static_cast<std::ptrdiff_t>(r.begin()),
                                          src.begin() + static_cast<std::ptrdiff_t>(r.end()),
                                          dst.begin() + static_cast<std::ptrdiff_t>(r.begin()));
                              });
  });
  *bytes = 2.0 * static_cast<double>(n * sizeof(float));  // read and written
  return *bytes / s;
}

// exec's memory-bound kernels on blocks shaped like the activations of the
// benchmark graphs (tools/exec/calibration_bench.py: the GPT-2 block at batch
// 2, sequence 128, hidden 256, 4 heads, MLP 1024; ffn at batch 512, hidden
// 512): the GPT-2 block's non-GEMM operators, one of each, and ffn's ReLU.
// The copy alone streams far past the caches at the hardware's rate; these
// kernels work on blocks of 0.25 to 1 MiB and compute per element (exp,
// tanh, a row's mean and variance), and their backward re-reads the forward's
// inputs, so they run at their own rate, which is what a step pays.
struct KernelCase {
  std::string type;
  ir::Attrs attrs;
  std::vector<ir::Shape> in;
  std::size_t constants = 0;  // the last inputs take no gradient (a mask, a scale)
  std::vector<ir::Shape> out;
  bool gemm = false;
};

std::vector<KernelCase> kernel_cases() {
  const std::int64_t b = 2, s = 128, h = 256, nh = 4, f = 1024;
  const ir::Shape act{b, s, h}, wide{b, s, f}, scores{b, nh, s, s};
  std::vector<KernelCase> v;
  v.push_back({"LayerNorm",
               {{"axis", std::int64_t{-1}}, {"epsilon", 1e-5}},
               {act, {h}, {h}},
               0,
               {act},
               false});
  v.push_back({"BiasAdd", {}, {wide, {f}}, 0, {wide}, false});
  v.push_back({"GeLU", {{"approximate", std::string("tanh")}}, {wide}, 0, {wide}, false});
  v.push_back({"Mul", {}, {scores, {}}, 1, {scores}, false});
  v.push_back({"Add", {}, {scores, {1, 1, s, s}}, 1, {scores}, false});
  v.push_back({"Softmax", {{"axis", std::int64_t{-1}}}, {scores}, 0, {scores}, false});
  v.push_back({"Transpose",
               {{"perm", std::vector<std::int64_t>{0, 2, 1, 3}}},
               {{b, s, nh, h / nh}},
               0,
               {{b, nh, s, h / nh}},
               false});
  v.push_back({"Add", {}, {act, act}, 0, {act}, false});
  v.push_back({"ReLU", {}, {{512, 512}}, 0, {{512, 512}}, false});
  return v;
}

}  // namespace

std::vector<GemmShape> gemm_shapes() {
  // Tokens x hidden constant (131072): a layer's FLOPs, 8·tokens·h², then
  // grow with h alone, so the widest does not dominate the set's time (9.4
  // GFLOP forward in all: seconds per repetition on a CPU rank). The bench
  // graphs' layers lie among these: gpt2's MLP is (256, 256) with 4h, mlp's
  // layers (256, 1024) with 2h.
  std::vector<GemmShape> v;
  for (const auto& [t, h] :
       {std::pair<std::int64_t, std::int64_t>{512, 256}, {256, 512}, {128, 1024}}) {
    const std::int64_t f = 4 * h;
    // The rank's share: the whole layer, data parallel (tokens split) and
    // tensor parallel (the 4h dimension split, Megatron's column split of
    // the first layer and row split of the second), over 2 and 4 ranks.
    const std::vector<std::pair<std::int64_t, std::int64_t>> shares = {
        {t, f}, {t / 2, f}, {t / 4, f}, {t, f / 2}, {t, f / 4}};
    for (const auto& [m, ff] : shares) {
      v.push_back({m, h, ff});  // [tokens, h] x [h, 4h]: the up projection
      v.push_back({m, ff, h});  // [tokens, 4h] x [4h, h]: the down projection
    }
  }
  return v;
}

namespace {

std::vector<KernelCase> gemm_cases() {
  std::vector<KernelCase> v;
  for (const GemmShape& g : gemm_shapes())
    v.push_back({"MatMul", {}, {{g.m, g.k}, {g.k, g.n}}, 0, {{g.m, g.n}}, true});
  return v;
}

std::string shape_text(const ir::Shape& sh) {
  std::string t = "[";
  for (std::size_t i = 0; i < sh.size(); ++i) t += (i ? "," : "") + std::to_string(sh[i]);
  return t + "]";
}

// Runs each case's forward and backward kernel (run_kernel and
// run_backward_kernel, as the executor calls them on a rank's blocks) on
// every rank at once; each timed run repeats the kernel `inner` times, so
// that a sample of a 0.1 ms kernel is not the barrier's and the clock's
// noise (the GEMMs take milliseconds: once is enough).
std::vector<KernelSample> measure_kernels(Communicator& comm, int reps,
                                          const std::vector<KernelCase>& cases, int inner) {
  std::vector<KernelSample> out;
  for (const KernelCase& kc : cases) {
    const auto constant = [&](std::size_t j) { return j + kc.constants >= kc.in.size(); };
    ir::Graph g("calibrate");
    std::vector<ir::TensorId> ins, outs;
    for (std::size_t j = 0; j < kc.in.size(); ++j)
      ins.push_back(
          g.add_tensor("x" + std::to_string(j), kc.in[j], ir::DType::F32,
                       constant(j) ? ir::TensorKind::Constant : ir::TensorKind::Parameter));
    for (std::size_t j = 0; j < kc.out.size(); ++j)
      outs.push_back(g.add_tensor("y" + std::to_string(j), kc.out[j], ir::DType::F32,
                                  ir::TensorKind::Activation));
    ir::Operator op;
    op.name = "op";
    op.type = kc.type;
    op.inputs = ins;
    op.outputs = outs;
    op.attrs = kc.attrs;
    g.add_operator(std::move(op));
    g.finalize();

    std::vector<Buf> in_bufs, out_bufs, dy_bufs, dx_bufs;
    double elements = 0;
    for (const auto& sh : kc.in) {
      const auto n = static_cast<std::size_t>(numel(sh));
      Buf x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 13) * 0.125f - 0.75f;
      in_bufs.push_back(std::move(x));
      dx_bufs.emplace_back(n, 0.0f);
      elements += static_cast<double>(n);
    }
    for (const auto& sh : kc.out) {
      const auto n = static_cast<std::size_t>(numel(sh));
      out_bufs.emplace_back(n, 0.0f);
      dy_bufs.emplace_back(n, 1e-3f);
      elements += static_cast<double>(n);
    }
    KernelArgs a;
    a.op = &g.op(0);
    for (std::size_t j = 0; j < kc.in.size(); ++j) {
      a.in.push_back(&in_bufs[j]);
      a.in_shapes.push_back(kc.in[j]);
      a.full_in_shapes.push_back(kc.in[j]);
    }
    for (std::size_t j = 0; j < kc.out.size(); ++j) {
      a.out.push_back(&out_bufs[j]);
      a.out_shapes.push_back(kc.out[j]);
    }
    std::vector<const Buf*> dy;
    dy.reserve(dy_bufs.size());
    for (const auto& d : dy_bufs) dy.push_back(&d);
    std::vector<Buf*> dx;
    for (std::size_t j = 0; j < kc.in.size(); ++j)
      dx.push_back(constant(j) ? nullptr : &dx_bufs[j]);

    KernelSample ks;
    ks.name = kc.type + " " + shape_text(kc.in[0]);
    if (kc.gemm) ks.name += " x " + shape_text(kc.in[1]);
    ks.gemm = kc.gemm;
    // The cost model's count: 2mnk for a [m, k] x [k, n] MatMul.
    if (kc.gemm)
      ks.flops = 2.0 * static_cast<double>(kc.in[0][0]) * static_cast<double>(kc.in[0][1]) *
                 static_cast<double>(kc.in[1][1]);
    ks.inputs = kc.in;
    ks.outputs = kc.out;
    ks.bytes = 4.0 * elements;  // f32, every input and output once, as the cost model counts
    ks.forward_s = time_on_all_ranks(comm, reps,
                                     [&] {
                                       for (int i = 0; i < inner; ++i) run_kernel(a);
                                     }) /
                   inner;
    ks.backward_s = time_on_all_ranks(comm, reps,
                                      [&] {
                                        for (int i = 0; i < inner; ++i)
                                          run_backward_kernel(a, dy, dx);
                                      }) /
                    inner;
    out.push_back(std::move(ks));
  }
  return out;
}

std::vector<CollectiveSample> measure_collectives(Communicator& comm, int reps) {
  const int k = comm.size();
  const auto ku = static_cast<std::size_t>(k);
  std::vector<CollectiveSample> out;
  for (const std::string kind : {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}) {
    // 1 KiB to 4 MiB per rank: the tensors the exec benchmarks move (docs/exec.md, Calibration).
    for (const std::size_t count : {std::size_t{256}, std::size_t{4096}, std::size_t{65536},
                                    std::size_t{1} << 18, std::size_t{1} << 20}) {
      std::vector<float> send(count * ku, 1.0f), recv(count * ku, 0.0f);
      const std::function<void()> op = [&] {
        if (kind == "all-reduce") comm.all_reduce(0, send.data(), count);
        else if (kind == "all-gather") comm.all_gather(0, send.data(), recv.data(), count);
        else if (kind == "reduce-scatter") comm.reduce_scatter(0, send.data(), recv.data(), count);
        else comm.all_to_all(0, send.data(), recv.data(), count);
      };
      CollectiveSample cs;
      cs.kind = kind;
      cs.elements = static_cast<double>(count);
      comm.reset_counters();
      cs.seconds = time_on_all_ranks(comm, reps, op);
      cs.bytes = comm.bytes_sent() / static_cast<double>(reps + 1);
      cs.steps = latency_steps(kind, k);
      out.push_back(cs);
    }
  }
  comm.reset_counters();
  return out;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

}  // namespace

double latency_steps(const std::string& kind, int k) {
  const double steps = std::ceil(std::log2(static_cast<double>(k)));
  return kind == "all-reduce" ? 2 * steps : steps;
}

void kernel_rates(Calibration& c) {
  // Sums, not a mean of per-kernel rates: a step pays each kernel's time,
  // so the kernels that take longest must weigh most, as they do in
  // Σ bytes / Σ seconds (a mean of rates would let a fast small kernel
  // count as much as a slow large one).
  double bytes = 0, fwd = 0, bwd = 0;
  for (const auto& k : c.kernels) {
    if (k.gemm) continue;
    bytes += k.bytes;
    fwd += k.forward_s;
    bwd += k.backward_s;
  }
  if (!(bytes > 0 && fwd > 0 && bwd > 0))
    throw Error(Errc::kRuntime, "calibrate: the memory-bound kernels took no time");
  c.kernel_forward_Bps = bytes / fwd;
  c.kernel_backward_ratio = bwd / fwd;
  // The cost model prices a kernel's training step as (1 + factor) times
  // its forward, so the rate that gives the set's measured forward +
  // backward time under that factor is the one to write.
  c.backward_flops_factor = CostParams{}.backward_flops_factor;
  c.memory_Bps = (1.0 + c.backward_flops_factor) * bytes / (fwd + bwd);
}

void gemm_rates(Calibration& c) {
  // Sums, not a mean or median of per-shape rates: a step pays each GEMM's
  // time, so the shapes the kernel runs slowly (and long) must weigh as
  // much as they take, as they do in Σ FLOPs / Σ seconds.
  double flops = 0, fwd = 0, bwd = 0;
  for (const auto& g : c.gemms) {
    flops += g.flops;
    fwd += g.forward_s;
    bwd += g.backward_s;
  }
  if (!(flops > 0 && fwd > 0 && bwd > 0))
    throw Error(Errc::kRuntime, "calibrate: the GEMMs took no time");
  c.gemm_forward_flops_per_s = flops / fwd;
  c.gemm_backward_ratio = bwd / fwd;
  // The model prices a GEMM's training step as (1 + factor) times its
  // forward FLOPs over the peak, so the peak that gives the set's measured
  // forward + backward time under that factor is the one to write (the
  // factor is CostParams' default, as for the memory figure).
  c.gemm_flops_per_s = (1.0 + CostParams{}.backward_flops_factor) * flops / (fwd + bwd);
}

namespace {

void model_check(Calibration& c) {
  // The model charges an operator max(FLOPs / peak, bytes / bandwidth):
  // with both figures written, a GEMM the kernels' bandwidth would price
  // above its FLOPs is priced above its measured time. The set's training
  // price through the model's own formula shows how much.
  DeviceSpec dev;
  dev.peak_TFLOPs = c.gemm_flops_per_s / 1e12;
  dev.memory_bandwidth_GBps = c.memory_Bps / 1e9;
  CostParams p;
  p.compute_efficiency = 1.0;
  c.gemm_measured_s = 0;
  c.gemm_model_s = 0;
  for (const auto& g : c.gemms) {
    c.gemm_measured_s += g.forward_s + g.backward_s;
    c.gemm_model_s += cost::compute_seconds(g.flops, g.bytes, dev, p, Mode::Train);
  }
}

}  // namespace

LinkFit fit_link(const std::vector<CollectiveSample>& samples) {
  // Normal equations of min sum (a·s + beta·x - t)^2 over a and beta = 1/bandwidth.
  // Absolute, not relative, residuals: a step time is a sum of collective
  // times, so the large messages that dominate it must fit best (this
  // machine's MPI is far slower per byte above ~1 MiB than below).
  double ss = 0, sx = 0, xx = 0, st = 0, xt = 0;
  for (const auto& c : samples) {
    if (!(c.seconds > 0)) continue;
    const double w = 1.0;
    ss += w * c.steps * c.steps;
    sx += w * c.steps * c.bytes;
    xx += w * c.bytes * c.bytes;
    st += w * c.steps * c.seconds;
    xt += w * c.bytes * c.seconds;
  }
  if (!(xx > 0)) throw Error(Errc::kRuntime, "calibrate: no collective moved any bytes");
  LinkFit f;
  double beta = xt / xx;  // latency 0
  const double det = ss * xx - sx * sx;
  if (ss > 0 && det > 1e-12 * ss * xx) {
    const double a = (st * xx - sx * xt) / det;
    const double b = (ss * xt - sx * st) / det;
    if (a >= 0 && b > 0) {
      f.latency_s = a;
      beta = b;
    }
  }
  if (!(beta > 0) || !std::isfinite(beta))
    throw Error(Errc::kRuntime, "calibrate: the collective times fit no positive bandwidth");
  f.bandwidth_Bps = 1.0 / beta;
  return f;
}

void fit_collectives(std::vector<CollectiveSample>& samples,
                     std::vector<std::pair<std::string, LinkFit>>& kind_fits, LinkFit& link) {
  kind_fits.clear();
  for (const auto& s : samples) {
    const bool seen = std::any_of(kind_fits.begin(), kind_fits.end(),
                                  [&](const auto& kf) { return kf.first == s.kind; });
    if (seen) continue;
    std::vector<CollectiveSample> of_kind;
    for (const auto& t : samples)
      if (t.kind == s.kind) of_kind.push_back(t);
    kind_fits.emplace_back(s.kind, fit_link(of_kind));
  }
  for (auto& s : samples) {
    for (const auto& [kind, f] : kind_fits)
      if (kind == s.kind) s.fit_seconds = f.latency_s * s.steps + s.bytes / f.bandwidth_Bps;
  }
  link = fit_link(samples);
  for (auto& s : samples)
    s.cluster_seconds = link.latency_s * s.steps + s.bytes / link.bandwidth_Bps;
}

Calibration calibrate(Communicator& comm, int reps) {
  const oneapi::tbb::global_control threads(oneapi::tbb::global_control::max_allowed_parallelism,
                                            threads_per_rank());
  Calibration c;
  c.ranks = comm.size();
  c.gemm = measure_gemm(comm, reps);
  std::vector<double> rates;
  for (const auto& g : c.gemm) rates.push_back(g.flops_per_s);
  c.square_gemm_flops_per_s = median(rates);
  c.gemms = measure_kernels(comm, reps, gemm_cases(), 1);
  gemm_rates(c);
  c.copy_Bps = measure_copy(comm, reps, &c.copy_bytes);
  c.kernels = measure_kernels(comm, reps, kernel_cases(), 8);
  kernel_rates(c);
  model_check(c);
  c.collectives = measure_collectives(comm, reps);
  fit_collectives(c.collectives, c.kind_fits, c.link);
  c.memory_GiB = physical_memory_bytes() / static_cast<double>(c.ranks) / (1024.0 * 1024 * 1024);
  return c;
}

std::string calibration_cluster_json(const Calibration& c) {
  const Level level{"rank", c.ranks, c.link.bandwidth_Bps / 1e9, c.link.latency_s * 1e6};
  const DeviceSpec dev{c.gemm_flops_per_s / 1e12, c.memory_GiB, c.memory_Bps / 1e9};
  char host[256] = "host";
  if (gethostname(host, sizeof host) != 0) std::snprintf(host, sizeof host, "host");
  host[sizeof host - 1] = '\0';
  // Built through Cluster so that the file satisfies the reader's checks.
  const Cluster cluster("calibrated " + std::to_string(c.ranks) + " x " + host + " (mpi)", {level},
                        dev);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::cluster_to_json(cluster));
  // The device figure is what the kernel achieves, not a peak to derate; and
  // the exec layer runs its collectives between the kernels, never behind them.
  j["cost"] = {{"compute_efficiency", 1.0}, {"overlap", false}};
  return j.dump(2);
}

std::string calibration_samples_json(const Calibration& c) {
  nlohmann::ordered_json j;
  j["ranks"] = c.ranks;
  // What the cluster file holds as peak_TFLOPs (times 1e12), and how.
  j["gemm_flops_per_s"] = c.gemm_flops_per_s;
  j["gemm_flops_per_s_from"] =
      "(1 + backward_flops_factor) * sum(flops) / sum(forward_s + backward_s) over gemms";
  j["gemm_forward_flops_per_s"] = c.gemm_forward_flops_per_s;
  j["gemm_backward_ratio"] = c.gemm_backward_ratio;
  j["gemm_measured_s"] = c.gemm_measured_s;
  j["gemm_model_s"] = c.gemm_model_s;
  j["gemms"] = nlohmann::ordered_json::array();
  for (const auto& g : c.gemms)
    j["gemms"].push_back({{"name", g.name},
                          {"inputs", g.inputs},
                          {"outputs", g.outputs},
                          {"flops", g.flops},
                          {"bytes", g.bytes},
                          {"forward_s", g.forward_s},
                          {"backward_s", g.backward_s}});
  // The square GEMMs, for comparison: their median was the figure before.
  j["square_gemm_flops_per_s"] = c.square_gemm_flops_per_s;
  j["gemm"] = nlohmann::ordered_json::array();
  for (const auto& g : c.gemm)
    j["gemm"].push_back({{"size", g.size}, {"seconds", g.seconds}, {"flops_per_s", g.flops_per_s}});
  j["copy_bytes"] = c.copy_bytes;
  j["copy_Bps"] = c.copy_Bps;
  j["kernels"] = nlohmann::ordered_json::array();
  for (const auto& k : c.kernels)
    j["kernels"].push_back({{"name", k.name},
                            {"gemm", k.gemm},
                            {"inputs", k.inputs},
                            {"outputs", k.outputs},
                            {"bytes", k.bytes},
                            {"forward_s", k.forward_s},
                            {"backward_s", k.backward_s}});
  j["kernel_forward_Bps"] = c.kernel_forward_Bps;
  j["kernel_backward_ratio"] = c.kernel_backward_ratio;
  j["backward_flops_factor"] = c.backward_flops_factor;
  // What the cluster file holds as memory_bandwidth_GBps (times 1e9), and how.
  j["memory_Bps"] = c.memory_Bps;
  j["memory_Bps_from"] =
      "(1 + backward_flops_factor) * sum(bytes) / sum(forward_s + backward_s) over the "
      "kernels that are not GEMMs";
  detail::put_collective_fits(j, c.link, c.kind_fits, c.collectives);
  return j.dump(2);
}

void detail::put_collective_fits(nlohmann::ordered_json& j, const LinkFit& link,
                                 const std::vector<std::pair<std::string, LinkFit>>& kind_fits,
                                 const std::vector<CollectiveSample>& collectives) {
  j["link"] = {{"latency_s", link.latency_s}, {"bandwidth_Bps", link.bandwidth_Bps}};
  j["kind_fits"] = nlohmann::ordered_json::object();
  for (const auto& [kind, f] : kind_fits)
    j["kind_fits"][kind] = {{"latency_s", f.latency_s}, {"bandwidth_Bps", f.bandwidth_Bps}};
  j["collectives"] = nlohmann::ordered_json::array();
  for (const auto& s : collectives) {
    j["collectives"].push_back({{"kind", s.kind},
                                {"elements", s.elements},
                                {"bytes", s.bytes},
                                {"steps", s.steps},
                                {"seconds", s.seconds},
                                {"fit_seconds", s.fit_seconds},
                                {"cluster_seconds", s.cluster_seconds}});
  }
}

namespace {

void print_report(const Calibration& c) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line,
                "recsearch calibrate: %d rank(s), backend mpi, %zu thread(s) per rank\n", c.ranks,
                threads_per_rank());
  s += line;
  for (const auto& g : c.gemm) {
    std::snprintf(line, sizeof line, "  gemm %lld^3: %.3f ms, %.2f GFLOP/s per rank\n", g.size,
                  g.seconds * 1e3, g.flops_per_s / 1e9);
    s += line;
  }
  std::snprintf(line, sizeof line, "  square GEMMs: %.2f GFLOP/s (median; not written)\n",
                c.square_gemm_flops_per_s / 1e9);
  s += line;
  s += "  matmul                                   MFLOP   forward ms   backward ms   bwd/fwd"
       "   fwd GFLOP/s\n";
  for (const auto& g : c.gemms) {
    std::snprintf(line, sizeof line, "  %-36s %9.1f %12.3f %13.3f %9.2f %13.2f\n", g.name.c_str(),
                  g.flops / 1e6, g.forward_s * 1e3, g.backward_s * 1e3, g.backward_s / g.forward_s,
                  g.flops / g.forward_s / 1e9);
    s += line;
  }
  std::snprintf(line, sizeof line,
                "  matmuls: forward %.2f GFLOP/s (sum flops / sum seconds), backward/forward "
                "time %.2f (the model assumes %.1f)\n",
                c.gemm_forward_flops_per_s / 1e9, c.gemm_backward_ratio,
                CostParams{}.backward_flops_factor);
  s += line;
  s += "  kernel                      bytes   forward ms   backward ms   bwd/fwd   fwd GB/s\n";
  for (const auto& k : c.kernels) {
    std::snprintf(line, sizeof line, "  %-24s %10.0f %12.4f %13.4f %9.2f %10.2f\n", k.name.c_str(),
                  k.bytes, k.forward_s * 1e3, k.backward_s * 1e3, k.backward_s / k.forward_s,
                  k.bytes / k.forward_s / 1e9);
    s += line;
  }
  std::snprintf(line, sizeof line,
                "  memory-bound kernels: forward %.2f GB/s (sum bytes / sum seconds), "
                "backward/forward time %.2f (the model assumes %.1f)\n",
                c.kernel_forward_Bps / 1e9, c.kernel_backward_ratio, c.backward_flops_factor);
  s += line;
  std::snprintf(line, sizeof line,
                "  device: %.2f GFLOP/s (the matmuls, forward + backward as the model prices "
                "them), memory %.2f GB/s (the kernels, likewise; copy %.2f GB/s), %.1f GiB\n",
                c.gemm_flops_per_s / 1e9, c.memory_Bps / 1e9, c.copy_Bps / 1e9, c.memory_GiB);
  s += line;
  std::snprintf(line, sizeof line,
                "  matmuls' training time: measured %.1f ms, the model at these figures %.1f ms "
                "(max of FLOPs and bytes terms)\n",
                c.gemm_measured_s * 1e3, c.gemm_model_s * 1e3);
  s += line;
  s += "  collective      elements   bytes/rank   measured ms   fit ms   cluster ms\n";
  for (const auto& x : c.collectives) {
    std::snprintf(line, sizeof line, "  %-14s %9.0f %12.0f %13.4f %8.4f %12.4f\n", x.kind.c_str(),
                  x.elements, x.bytes, x.seconds * 1e3, x.fit_seconds * 1e3,
                  x.cluster_seconds * 1e3);
    s += line;
  }
  for (const auto& [kind, f] : c.kind_fits) {
    std::snprintf(line, sizeof line, "  fit %-14s latency %.2f us/step, bandwidth %.3f GB/s\n",
                  kind.c_str(), f.latency_s * 1e6, f.bandwidth_Bps / 1e9);
    s += line;
  }
  std::snprintf(line, sizeof line,
                "  link (all kinds): latency %.2f us/step, bandwidth %.3f GB/s\n",
                c.link.latency_s * 1e6, c.link.bandwidth_Bps / 1e9);
  s += line;
  std::cout << s << std::flush;
}

}  // namespace

namespace {

// Rank 0 prints the report and writes the files; every rank returns the
// largest exit code (1 where a file could not be written).
template <class C>
int report_and_write(Communicator& comm, const CalibrateArgs& a, const C& c,
                     void (*print)(const C&), std::string (*cluster_json)(const C&),
                     std::string (*samples_json)(const C&)) {
  int code = 0;
  if (comm.rank() == 0) {
    print(c);
    try {
      if (!a.output.empty()) io::write_text_file(a.output, cluster_json(c));
      if (!a.samples.empty()) io::write_text_file(a.samples, samples_json(c));
    } catch (const Error& e) {
      std::cerr << "recsearch calibrate: " << e.what() << "\n";
      code = exit_code(e.code());
    }
  }
  return static_cast<int>(comm.max_over_ranks(code));
}

// The usage checks every rank makes alike (each sees the same world size):
// 0, or the exit code after rank 0 said why.
int refuse_usage(const CalibrateArgs& a, int rank, int size) {
  std::string why;
  if (a.expected_ranks > 0 && a.expected_ranks != size) {
    why = "--np " + std::to_string(a.expected_ranks) + " but mpirun started " +
          std::to_string(size) + " rank(s)";
  } else if (size < 2 && a.backend == Backend::Mpi) {
    why = "the collectives need at least 2 ranks (mpirun -np N)";
  } else if (size < 2 && !a.output.empty()) {
    why =
        "a cluster file needs the collectives of at least 2 ranks (mpirun -np N); one rank "
        "measures the GPU alone (--samples)";
  }
  if (why.empty()) return 0;
  if (rank == 0) std::cerr << "recsearch calibrate: " << why << " [E201]\n";
  return exit_code(Errc::kUsage);
}

}  // namespace

int run_calibrate(const CalibrateArgs& a, int* argc, char*** argv) {
  if (!backend_available(Backend::Mpi)) {
    std::cerr << "recsearch calibrate: this build has no MPI backend [E201]\n";
    return exit_code(Errc::kUsage);
  }
  if (a.backend == Backend::Nccl && !backend_available(Backend::Nccl)) {
    std::cerr << "recsearch calibrate: this build has no NCCL/CUDA backend [E201]\n";
    return exit_code(Errc::kUsage);
  }
  Runtime rt(argc, argv);
  const int rank = rt.world_rank();
  const int size = rt.world_size();
  if (const int refused = refuse_usage(a, rank, size); refused != 0) return refused;
  std::unique_ptr<Communicator> comm;
  const auto cpu = [&] {
    comm = make_communicator(Backend::Mpi, {static_cast<std::int64_t>(size)});
    comm->set_timeout(a.timeout_s);
    const Calibration c = calibrate(*comm, a.reps);
    return report_and_write(*comm, a, c, &print_report, &calibration_cluster_json,
                            &calibration_samples_json);
  };
  const auto gpu = [&] {
    const detail::NodeLayout l = detail::node_layout();
    std::vector<LevelCalibration> levels = calibration_levels(size, l.nodes, l.per_node, l.blocked);
    std::vector<std::int64_t> mesh;
    mesh.reserve(levels.size() + 1);
    for (const auto& lv : levels) mesh.push_back(lv.size);
    if (mesh.empty()) mesh.push_back(1);
    comm = make_communicator(Backend::Nccl, mesh);
    comm->set_timeout(a.timeout_s);
    const GpuCalibration c = calibrate_gpu(*comm, std::move(levels), a.reps);
    return report_and_write(*comm, a, c, &detail::print_gpu_report, &gpu_calibration_cluster_json,
                            &gpu_calibration_samples_json);
  };
  const auto work = [&] {
    const int code = a.backend == Backend::Nccl ? gpu() : cpu();
    comm.reset();
    return code;
  };
  return detail::guarded(work, [&](const std::string& msg, int code) -> int {
    detail::fail_every_rank(comm.get(), "recsearch calibrate", rank, msg, code);
  });
}

}  // namespace recsearch::exec
