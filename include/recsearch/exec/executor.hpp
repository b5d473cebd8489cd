// SPDX-License-Identifier: Apache-2.0
// The executor: runs the forward pass (inference semantics: Dropout is the
// identity) of a planned graph on each rank's blocks, and in training the
// backward pass, the gradient synchronisation and an optimizer step.
//
// Every tensor lives in its holder's layout (exec/layout.hpp), but a ZeRO-3
// parameter, kept as a shard and gathered into it for each pass. Before an
// operator runs, each input is brought to the layout the operator's cuts
// require (once per distinct layout; later uses reuse it), the local kernel
// runs on the blocks, and its outputs stay as the operator leaves them:
// partial sums where a Reduction loop was cut, reduced only when a consumer
// (or the user, for a graph output) needs them otherwise. Graph inputs,
// parameters and constants are seeded random values, generated per element
// from the seed, the tensor and the element's index in the full tensor, so
// that every rank and the one-device run see the same numbers.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/exec/communicator.hpp"
#include "recsearch/exec/layout.hpp"
#include "recsearch/exec/recompute.hpp"
#include "recsearch/exec/redistributor.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::exec {
namespace detail {
struct KernelArgs;
}

// Operators the executor cannot run under `p`, one line each ("name (Type):
// why"): kinds without a kernel, and cuts whose blocks a kernel cannot
// combine (e.g. ReduceMax cut on a reduced dim, an operand that maps one
// cut loop to two of its dims).
[[nodiscard]] std::vector<std::string> unsupported_operators(
    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p);

// The value of element `index` (row-major in the full tensor) of tensor t.
[[nodiscard]] float input_value(const ir::Graph& g, ir::TensorId t, std::int64_t index,
                                std::uint64_t seed);

struct ExecOptions {
  std::uint64_t seed = 1;
  bool use_gpu = false;  // GEMMs on the GPU (cuBLAS), elementwise kernels in CUDA
  // Called before each operator runs (tests inject failures through it).
  std::function<void(ir::OpId)> before_op;
  // Testing: this operator's backward doubles the gradients it gives its
  // inputs on this rank (a wrong gradient that --check must catch).
  std::optional<ir::OpId> corrupt_backward_op = std::nullopt;
  // Testing: this operator's backward on this rank drops the gradients of
  // its rows that come back from the halo exchange (the traffic still runs).
  std::optional<ir::OpId> drop_halo_return_op = std::nullopt;
  // Testing: this operator's recomputed forward on this rank doubles its
  // outputs (a recomputation that does not reproduce the forward pass).
  std::optional<ir::OpId> corrupt_recompute_op = std::nullopt;
  // Testing: on this rank, the ZeRO-3 parameters this operator reads are
  // gathered doubled in the forward pass (a corrupted gathered shard).
  std::optional<ir::OpId> corrupt_gather_op = std::nullopt;
  // Training: parameter gradients that only need all-reduces (data
  // parallelism) are fused into buckets of up to this many f32 elements,
  // one all-reduce per bucket and axis, as DDP fuses them and the cost
  // model prices them (CostParams::bucket_gradients); 0: one collective
  // per parameter. The bytes are the same either way.
  std::size_t bucket_elements = 0;
  // The value of element `index` (row-major in the full tensor) of input or
  // parameter t; empty: input_value(g, t, index, seed). A pipeline stage
  // reads its microbatch's slice of the whole graph's values through it.
  std::function<float(ir::TensorId, std::int64_t)> value = {};
  // The world rank (MPI_COMM_WORLD) of the communicator's rank 0: a
  // pipeline group's first rank. Halo exchanges send point to point to
  // world ranks.
  int world_rank_base = 0;
  // Training: recompute as the plan says (exec/recompute.hpp): the forward
  // pass drops what its recomputed operators would not keep, and the
  // backward pass runs their forward again, redistributions included.
  bool recompute = false;
  // Training in a pipeline stage: the graph inputs received from earlier
  // stages whose gradients go back to them (input_gradient()).
  std::vector<ir::TensorId> grad_inputs = {};
};

// Bytes (f32 elements) of the data tensors a rank holds for the backward
// pass: activations and graph inputs, each in its holder layout and every
// redistributed copy of them the forward pass made (exec keeps what its
// backward kernels read: every input of an operator). `after_forward`:
// at the end of the forward pass (what recomputation dropped gone); `peak`:
// the most during the backward pass, with a recomputed group's tensors.
struct ActivationBytes {
  double after_forward = 0;
  double peak = 0;
};

// Bytes (f32 elements) of parameters a rank holds: `kept` between steps
// (after the optimizer step: a ZeRO-3 parameter's shard, every other
// parameter's block), `peak` the most at any point of the passes since the
// executor was made (with the gathered ZeRO-3 parameters and the copies
// their readers made).
struct ParameterBytes {
  double kept = 0;
  double peak = 0;
};

// Bytes a rank sent in the recomputed forward of the last backward pass
// (part of the backward's traffic): collectives and point to point (halo).
struct RecomputeTraffic {
  double collectives = 0;
  double p2p = 0;
};

// The optimizer step of exec --train, applied elementwise to each rank's
// block of every parameter with the synchronised gradient (so a sharded
// parameter's update is its block of the one-device update).
enum class Optimizer : std::uint8_t { Sgd, SgdMomentum, Adam };
struct OptimizerSettings {
  Optimizer kind = Optimizer::Sgd;
  double lr = 0.01;
  double momentum = 0.9;                          // SgdMomentum: v = momentum·v + g; w -= lr·v
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, bias-corrected
};

class Executor {
 public:
  // Throws Error(kUsage) listing unsupported_operators, and Error(kPlan)
  // when the plan's mesh does not match the communicator's, before any
  // collective runs.
  Executor(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p,
           Communicator& comm, ExecOptions options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One forward pass (the inputs' blocks are made once, by the constructor);
  // graph outputs left partial are all-reduced at the end.
  void run();
  // Graph outputs (produced tensors nobody consumes), in tensor id order.
  [[nodiscard]] const std::vector<ir::TensorId>& outputs() const noexcept { return outputs_; }
  // This rank's block of a tensor after run().
  [[nodiscard]] const LocalTensor& block(ir::TensorId t) const;
  // The full tensor on rank 0 (empty elsewhere), assembled from every
  // rank's block; collective (uncounted).
  [[nodiscard]] std::vector<float> gather_full(ir::TensorId t);
  // The same for a trained parameter's synchronised gradient (after sync_gradients()).
  [[nodiscard]] std::vector<float> gather_gradient(ir::TensorId t);
  // This rank's block of that gradient.
  [[nodiscard]] const LocalTensor& gradient(ir::TensorId t) const;
  // Replaces this rank's block of that gradient before optimizer_step(): a
  // pipeline's tied parameter, its gradients summed across device groups.
  // Error(kInternal) when t has no gradient or the size differs.
  void set_gradient(ir::TensorId t, std::vector<float> data);
  [[nodiscard]] const PlanLayouts& layouts() const noexcept { return layouts_; }
  // Replaces this rank's block of graph input t (in its holder layout, as
  // block(t) holds it) before run(): a pipeline stage's received boundary
  // tensor. Error(kInternal) when t is not an input or the size differs.
  void set_input(ir::TensorId t, std::vector<float> data);
  // Makes every graph input block again (parameters keep theirs) from
  // value(t, index): the next microbatch's rows.
  void reseed_inputs(const std::function<float(ir::TensorId, std::int64_t)>& value);
  // The weight of each graph output (outputs() order) in the loss and its
  // gradient: 1 by default; with m microbatches 1/m for an output that
  // averages over the batch, so that the accumulated gradient is the whole
  // batch's.
  void set_loss_scale(std::vector<double> per_output);

  // Training (docs/exec.md, Training). The loss of a step is the sum over
  // graph outputs of the output itself when it has one element (a loss the
  // graph computes) and of ½·mean(y²) otherwise. loss() after run():
  // collective (uncounted), the value on rank 0 (0 elsewhere).
  [[nodiscard]] double loss();
  // After run(): seeds every output's gradient from the loss and runs each
  // operator's backward in reverse topological order, moving gradients
  // between layouts as GradientLayouts says (counted traffic). Parameter
  // gradients are left as per-rank contributions for sync_gradients(); a
  // second backward() before it adds its own (gradient accumulation over
  // microbatches: one synchronisation for all of them).
  // `seeds`: more gradient contributions (a pipeline stage's boundary
  // tensors, their gradients received from the later stages that use them),
  // each in its tensor's GradientLayouts target; an output whose loss
  // weight is 0 gets only these.
  void backward(std::vector<std::pair<ir::TensorId, LocalTensor>> seeds = {});
  // After backward(): the gradient of ExecOptions::grad_inputs member t, in
  // its holder's layout (its contributions summed and moved there, counted
  // in the backward's traffic as predict_train_bytes counts them).
  [[nodiscard]] const LocalTensor& input_gradient(ir::TensorId t);
  // Sums every parameter's contributions into its holder layout: the
  // all-reduce over its replicated (data-parallel) axes, reduce-scatter
  // where it is sharded but a use left partial sums. All-reduces of
  // parameters in trained() order are fused per ExecOptions::bucket_elements.
  void sync_gradients();
  // One optimizer step on every parameter's block (after sync_gradients()).
  void optimizer_step(const OptimizerSettings& s);
  // Parameters that get a gradient, in tensor id order.
  [[nodiscard]] const std::vector<ir::TensorId>& trained() const noexcept { return trained_; }
  [[nodiscard]] const GradientLayouts& gradient_layouts() const noexcept { return grads_layout_; }
  // What the backward pass recomputes (empty without ExecOptions::recompute).
  [[nodiscard]] const RecomputePlan& recompute_plan() const noexcept { return recompute_; }
  // Of the last forward and backward pass.
  [[nodiscard]] const ActivationBytes& activation_bytes() const noexcept { return act_bytes_; }
  [[nodiscard]] const RecomputeTraffic& recompute_traffic() const noexcept {
    return recompute_sent_;
  }
  // Parameters held, kept and at the peak of the passes since the last
  // optimizer step (docs/exec.md, ZeRO 3).
  [[nodiscard]] const ParameterBytes& parameter_bytes() const noexcept { return param_bytes_; }

 private:
  // Per window operator with a cut window dim: its input block with the
  // halo rows the forward pass received, and where the block and the
  // output block start in the whole tensor (H, W); kept for the backward.
  struct WindowBlock {
    std::vector<float> data;
    ir::Shape shape;
    std::array<std::int64_t, 2> in_begin{}, out_begin{};
  };

 public:
  // What one forward pass leaves for its backward pass: every block but
  // the parameters', the redistributed copies, halo-extended blocks,
  // BatchNorm statistics and a cut loss's log-sum-exps. A 1F1B pipeline
  // stage runs several microbatches' forward passes before their backward
  // passes: it takes each pass's state after run() (the executor then
  // holds no inputs: reseed_inputs() makes the next microbatch's) and puts
  // it back before that microbatch's backward().
  struct PassState {
    std::vector<std::unique_ptr<LocalTensor>> held;
    std::vector<std::deque<LocalTensor>> copies;
    std::vector<WindowBlock> windows;
    std::vector<std::array<std::vector<float>, 2>> bn_stats;
    std::vector<std::vector<float>> row_lse;
  };
  [[nodiscard]] PassState take_pass();
  void restore_pass(PassState s);

 private:
  void make_inputs(const std::function<float(ir::TensorId, std::int64_t)>& value, bool parameters);
  // `again`: the recomputed forward in the backward pass, which keeps the
  // outputs still held (a checkpoint, a graph output already reduced).
  void run_op(ir::OpId o, bool again = false);
  // After the forward pass: frees what recompute_ drops.
  void drop_for_backward();
  // Runs recomputed group `group`'s forward again, once per backward pass.
  void recompute_group(std::int32_t group);
  // After operator o's backward: frees the dropped tensors (and copies) it
  // was the last to read.
  void release_after_backward(ir::OpId o);
  [[nodiscard]] double held_data_bytes() const;
  [[nodiscard]] double held_parameter_bytes() const;
  // ZeRO 3: all-gathers the parameters operator o reads from their shards
  // into their holders' layouts, those not gathered yet (`corrupt`: the
  // ExecOptions::corrupt_gather_op fault), and frees them again.
  void gather_parameters(ir::OpId o, bool corrupt = false);
  void free_parameter(ir::TensorId t);
  std::vector<float> gather(const LocalTensor& b);
  // The kernel arguments of operator o on the blocks the forward pass used
  // (inputs redistributed to the operator's layouts, made if missing). For
  // the backward pass (`backward`), a window kernel's input is the block
  // with its halo that the forward pass received, and BatchNorm's statistics
  // are the forward pass's: nothing is exchanged again.
  detail::KernelArgs op_args(ir::OpId o, bool backward = false);
  // Conv2D and pools with a cut window dim: receives the rows of x the
  // block's windows read from the ranks that hold them (and sends its own
  // to those that read them), point to point, one cut dim after the other;
  // args then point at the extended block (kept in windows_[o]).
  void exchange_halo(ir::OpId o, detail::KernelArgs& args);
  // The backward of that exchange: the gradient of the extended block
  // (`ext`, shaped as the kernel saw x) loses its halo rows, each sent back
  // to the rank that holds the row and added there, the last cut dim
  // first; what is left, summed, is added into `dx` (the rank's own block).
  void return_halo(ir::OpId o, std::vector<float> ext, std::vector<float>& dx);
  // BatchNorm: each channel's mean and variance, from the batch (sums
  // all-reduced over the axes that cut its batch or spatial dims) or the
  // running statistics, kept in bn_stats_[o]; args point at them.
  void batch_norm_statistics(ir::OpId o, detail::KernelArgs& args);
  // BatchNorm's backward with batch statistics: Σdy and Σdy·x̂ per channel,
  // all-reduced over the same axes as the forward sums (SyncBatchNorm).
  std::vector<float> batch_norm_grad_sums(ir::OpId o, const detail::KernelArgs& args,
                                          const std::vector<float>& dy);
  void backward_op(ir::OpId o);
  // Tensor t's gradient in its GradientLayouts target: the sum of its
  // contributions, each distinct layout summed locally and moved once.
  LocalTensor& collect_gradient(ir::TensorId t);
  // Tensor t's contributions summed per distinct layout, in order of first arrival.
  std::vector<LocalTensor> contributions_by_layout(ir::TensorId t);

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  Communicator& comm_;
  ExecOptions options_;
  PlanLayouts layouts_;
  Redistributor redist_;
  std::vector<std::int64_t> coords_;
  std::vector<std::unique_ptr<LocalTensor>> held_;  // per tensor, holder layout
  std::vector<std::deque<LocalTensor>> copies_;     // per tensor, other layouts made
  std::vector<ir::TensorId> outputs_;
  std::vector<WindowBlock> windows_;  // per window operator
  // Per BatchNorm: the mean and variance its forward pass normalised with.
  std::vector<std::array<std::vector<float>, 2>> bn_stats_;
  // Training state.
  GradientLayouts grads_layout_;
  std::vector<ir::TensorId> trained_;
  std::vector<std::vector<LocalTensor>> contributions_;  // per tensor, in arrival order
  std::vector<std::unique_ptr<LocalTensor>> grads_;      // per tensor, summed
  std::vector<std::vector<float>> row_lse_;              // per op: a cut loss's log-sum-exps
  std::vector<std::vector<float>> moment1_, moment2_;    // per tensor: optimizer state
  std::int64_t optimizer_steps_ = 0;
  std::vector<double> loss_scale_;  // per graph output (outputs_ order)
  // Recomputation: the plan, each group's operators in topological order,
  // the groups rerun in this backward pass, per tensor the reads whose
  // backward has yet to run.
  RecomputePlan recompute_;
  std::vector<std::vector<ir::OpId>> group_ops_;
  std::vector<std::uint8_t> group_done_;
  std::vector<std::int32_t> pending_reads_;
  ActivationBytes act_bytes_;
  RecomputeTraffic recompute_sent_;
  // ZeRO 3: per tensor, whether it is kept as a shard (zero3_sharded), the
  // shard, and its first and last reader in topological order (the
  // backward pass frees it after the first's backward, the forward after
  // the last's forward).
  std::vector<std::uint8_t> zero3_;
  std::vector<std::unique_ptr<LocalTensor>> shards_;
  std::vector<ir::OpId> first_reader_, last_reader_;
  ParameterBytes param_bytes_;
};

}  // namespace recsearch::exec
