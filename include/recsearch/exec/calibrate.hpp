// SPDX-License-Identifier: Apache-2.0
// `recsearch calibrate`: measures the machine an MPI job runs on and writes
// a cluster file (docs/formats.md) whose coefficients are what the exec
// layer achieves there (docs/exec.md, Calibration): per-process GEMM FLOP/s
// of the executor's own MatMul kernels, forward and backward, on the shapes
// transformer and MLP layers give a rank, the memory bandwidth its own non-GEMM
// kernels (elementwise, GeLU, softmax, layer norm and their backward) reach
// in the cost model's terms, beside that of a streaming copy, and the four
// collectives over every rank at a few message sizes, fitted to the cost
// model's form time = steps·latency + bytes/bandwidth.
// With --backend nccl it measures the GPUs instead (calibrate_gpu): cuBLAS
// GEMMs per dtype, the device's copy bandwidth and the NCCL collectives on
// device-resident buffers, per level of the job's nodes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec {

struct CalibrateArgs {
  Backend backend = Backend::Mpi;  // Nccl: the GPUs (calibrate_gpu)
  std::string output;              // cluster file to write (rank 0); empty: none
  std::string samples;             // the measurements and fits as JSON (rank 0); empty: none
  int expected_ranks = 0;          // --np: the world size must equal it (0: any)
  // Timed repetitions per measurement: the median is kept (nccl: R calls
  // back to back, the mean kept).
  int reps = 7;
  double timeout_s = 60;  // per collective; 0 = wait forever
};

// One timed collective: the kind, the f32 elements each rank contributes,
// the bytes each rank sends under the ring algorithms (as the communicator
// counts them and the cost model prices them), the latency steps the cost
// model charges (⌈log2 k⌉, twice for all-reduce), the median over the
// repetitions of the slowest rank's time, and the time the fits give.
struct CollectiveSample {
  std::string kind;  // all-reduce, all-gather, reduce-scatter, all-to-all
  double elements = 0;
  double bytes = 0;
  double steps = 0;
  double seconds = 0;
  double fit_seconds = 0;      // the per-kind fit
  double cluster_seconds = 0;  // the joint fit the cluster file holds
};

// time = latency_s · steps + bytes / bandwidth_Bps, by least squares of the
// absolute error (the large messages, which dominate a step, fit best).
struct LinkFit {
  double latency_s = 0;
  double bandwidth_Bps = 0;
};

struct GemmSample {
  long long size = 0;  // square m = n = k
  double seconds = 0;  // median, slowest rank
  double flops_per_s = 0;
};

// One of exec's kernels timed on a rank's blocks: the bytes the cost model
// counts for it (every input and output, f32), its forward FLOPs as the
// model counts them (2mnk for a MatMul; 0 for a memory-bound kernel), and
// the median over repetitions of the slowest rank's seconds for one run of
// its forward kernel and of its backward kernel (every floating input's
// gradient but the graph's constants: a mask or a scale).
struct KernelSample {
  std::string name;  // e.g. "Softmax [2,4,128,128]", "MatMul [256,256] x [256,1024]"
  bool gemm = false;
  std::vector<std::vector<std::int64_t>> inputs, outputs;  // the block shapes
  double flops = 0;
  double bytes = 0;
  double forward_s = 0;
  double backward_s = 0;
};

// A MatMul [m, k] x [k, n] of the GEMM set.
struct GemmShape {
  std::int64_t m = 0, k = 0, n = 0;
};

// The GEMM set calibrate times (docs/exec.md, Calibration): for (tokens,
// hidden) = (512, 256), (256, 512), (128, 1024), the up projection
// [tokens, h] x [h, 4h] and the down projection [tokens, 4h] x [4h, h] as a
// rank holds them: whole, with the tokens split over 2 and 4 ranks (data
// parallel), and with the 4h dimension split over 2 and 4 (tensor
// parallel). 30 shapes, in that order.
[[nodiscard]] std::vector<GemmShape> gemm_shapes();

struct Calibration {
  int ranks = 1;
  // The square GEMMs (gemm_cpu on 128, 256, 512) and their median rate, for
  // comparison only: cache-sized squares run faster than a graph's shapes.
  std::vector<GemmSample> gemm;
  double square_gemm_flops_per_s = 0;
  // The GEMM set (gemm_shapes(), MatMul through run_kernel and
  // run_backward_kernel), Σ flops / Σ forward seconds, Σ backward /
  // Σ forward seconds, and the figure the cluster file holds as
  // peak_TFLOPs: (1 + factor) · Σ flops / Σ (forward + backward seconds),
  // factor being the cost model's default backward_flops_factor.
  std::vector<KernelSample> gemms;
  double gemm_forward_flops_per_s = 0;
  double gemm_backward_ratio = 0;
  double gemm_flops_per_s = 0;  // per process
  // The set's measured forward + backward seconds, and the model's training
  // price of it at the written figures (max of the FLOPs and bytes terms:
  // above the measured time where the bytes term wins).
  double gemm_measured_s = 0;
  double gemm_model_s = 0;
  double copy_bytes = 0;  // bytes read and written by one copy
  double copy_Bps = 0;    // per process, the copy's read + write bytes per second
  std::vector<KernelSample> kernels;
  // Over the memory-bound kernels (not the GEMM): Σ bytes / Σ forward
  // seconds, and Σ backward seconds / Σ forward seconds.
  double kernel_forward_Bps = 0;
  double kernel_backward_ratio = 0;
  // The backward_flops_factor the cost model trains with (CostParams' default:
  // calibrate writes no other), and the figure the cluster file holds as
  // memory_bandwidth_GBps: the rate at which the model, charging a kernel
  // (1 + factor) · bytes / rate per training step, gives the set's measured
  // forward + backward time: (1 + factor) · Σ bytes / Σ (forward + backward).
  double backward_flops_factor = 0;
  double memory_Bps = 0;
  std::vector<CollectiveSample> collectives;
  std::vector<std::pair<std::string, LinkFit>> kind_fits;  // one per collective kind
  LinkFit link;                                            // all kinds together
  double memory_GiB = 0;                                   // physical memory / ranks
};

// Least-squares fit of t = latency·steps + bytes/bandwidth minimising the
// absolute residuals; latency clamped at 0 (then bandwidth alone is fitted).
// Error(kRuntime) when no positive bandwidth fits the samples.
[[nodiscard]] LinkFit fit_link(const std::vector<CollectiveSample>& samples);

// The latency steps the cost model charges a collective of `kind` over k
// ranks: ceil(log2 k), twice for all-reduce.
[[nodiscard]] double latency_steps(const std::string& kind, int k);

// Fits the samples of each kind (kind_fits, in the order the kinds first
// appear) and all of them together (link), and sets every sample's
// fit_seconds and cluster_seconds from those fits.
void fit_collectives(std::vector<CollectiveSample>& samples,
                     std::vector<std::pair<std::string, LinkFit>>& kind_fits, LinkFit& link);

// Sets the kernel figures of c from c.kernels (the GEMM samples left out):
// kernel_forward_Bps, kernel_backward_ratio, backward_flops_factor (the
// cost model's default) and memory_Bps, as documented on Calibration.
// Error(kRuntime) when the memory-bound kernels took no time.
void kernel_rates(Calibration& c);

// Sets the GEMM figures of c from c.gemms: gemm_forward_flops_per_s,
// gemm_backward_ratio and gemm_flops_per_s, as documented on Calibration.
// Error(kRuntime) when the GEMMs took no time.
void gemm_rates(Calibration& c);

// Runs every measurement on every rank of comm (a one-axis mesh of all
// ranks); the figures are the same on every rank.
[[nodiscard]] Calibration calibrate(Communicator& comm, int reps);

// The cluster file: one level of `ranks` devices at the fitted link, the
// measured device, and a cost object with compute_efficiency 1 (the peak
// is what the kernel achieves) and overlap false (exec does not overlap).
[[nodiscard]] std::string calibration_cluster_json(const Calibration& c);
// The measurements and fits, for tests and benchmarks.
[[nodiscard]] std::string calibration_samples_json(const Calibration& c);

// --backend nccl. One level of the cluster file: a mesh axis of the job,
// its collectives timed on the GPUs and fitted as on the CPU.
struct LevelCalibration {
  std::string name;  // "node", "gpu" or "rank" (a placement not in node blocks)
  std::int64_t size = 1;
  std::vector<CollectiveSample> collectives;
  std::vector<std::pair<std::string, LinkFit>> kind_fits;
  LinkFit link;
};

// The levels calibrate measures for `ranks` ranks placed `per_node` on each
// of `nodes` nodes, outermost first: none for one rank; the nodes and the
// GPUs of a node as two levels where the ranks fill the nodes in blocks
// (mpirun's default); otherwise one level of every rank ("gpu" on one node,
// "node" with one rank per node, "rank" for any other placement, whose fit
// then mixes the links).
[[nodiscard]] std::vector<LevelCalibration> calibration_levels(int ranks, int nodes, int per_node,
                                                               bool blocked);

// One timed cuBLAS GEMM of the GPU set: the dtype, which pass of a layer's
// [m, k] x [k, n] MatMul it is (forward; backward-data, dY [m, n] x W^T;
// backward-weight, X^T x dY), the call's row-major [m, k] x [k, n] and
// transposes, its FLOPs (2mnk) and the slowest rank's seconds per call.
struct GpuGemmSample {
  std::string dtype;  // f32, tf32, bf16
  std::string pass;   // forward, backward-data, backward-weight
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double flops = 0;
  double seconds = 0;
};

// The GPU GEMM set: a layer's up projection [tokens, h] x [h, 4h/t] and down
// projection [tokens, 4h/t] x [4h/t, h] for 4,096 tokens (a microbatch of 2
// sequences of 2,048), h = 1,024, 2,048, 4,096 and 8,192, tensor parallel
// t = 1, 2, 4 and 8: 32 shapes, in that order.
[[nodiscard]] std::vector<GemmShape> gpu_gemm_shapes();

struct GpuCalibration {
  int ranks = 1;
  std::string device;     // the GPU's name (rank 0's)
  double memory_GiB = 0;  // the GPU's memory (the smallest over ranks)
  std::vector<GpuGemmSample> gemms;
  // Per dtype, what the cluster file holds as its peak: (1 + factor) ·
  // Σ forward FLOPs / Σ seconds of the three passes, factor being the cost
  // model's default backward_flops_factor (as gemm_flops_per_s on the CPU).
  std::vector<std::pair<std::string, double>> flops_per_s;
  double copy_bytes = 0;                 // bytes read and written by one device-to-device copy
  double copy_Bps = 0;                   // the slowest rank's; the cluster's memory bandwidth
  std::vector<LevelCalibration> levels;  // outermost first; none with one rank
};

// Sets c.flops_per_s from c.gemms. Error(kRuntime) when a dtype's GEMMs took
// no time.
void gpu_gemm_rates(GpuCalibration& c);

// Runs every GPU measurement on every rank of comm, an NCCL communicator
// whose mesh axes are `levels`' sizes (the levels come back with their
// samples and fits). Collective over every rank.
[[nodiscard]] GpuCalibration calibrate_gpu(Communicator& comm, std::vector<LevelCalibration> levels,
                                           int reps);

// The cluster file of a GPU calibration (at least one level): the levels at
// their fitted links, the device at its bf16 GEMM rate with the f32 and
// tf32 rates by dtype, its copy bandwidth and memory, and compute_efficiency
// 1 (the rates are achieved ones, not peaks to derate).
[[nodiscard]] std::string gpu_calibration_cluster_json(const GpuCalibration& c);
[[nodiscard]] std::string gpu_calibration_samples_json(const GpuCalibration& c);

// Runs under mpirun on every rank; returns the exit code (0 ok, 1 bad
// output path, 2 usage: no MPI (or, for nccl, no NCCL) in this build, --np
// not the world size, or a cluster file asked of one rank, 4 a runtime
// failure, which ends every rank).
[[nodiscard]] int run_calibrate(const CalibrateArgs& a, int* argc, char*** argv);

}  // namespace recsearch::exec
