// SPDX-License-Identifier: Apache-2.0
// Private: the CPU kernels of the executor, each on one rank's local blocks
// (shapes are local; the few kernels whose result depends on where the
// block sits in the full tensor take offsets). Parallel over oneTBB,
// deterministic: every output element is computed by one task in a fixed
// order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <optional>

#include "recsearch/ir/graph.hpp"

namespace recsearch::exec::detail {

using Buf = std::vector<float>;

// Batched row-major GEMM: c[b] = op(a[b]) op(b[b]) for the batch offsets
// given; m x k times k x n.
struct GemmBatch {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::vector<std::int64_t> a_off, b_off, c_off;  // element offsets, one per batch entry
};
void gemm_cpu(const GemmBatch& g, const float* a, const float* b, float* c);
// The vector code a gemm_cpu call runs: the widest this CPU has (what the
// overload above runs), or the SSE2 code every x86-64 has. Both give the
// same bits; tests run each.
enum class GemmIsa { best, sse2 };
void gemm_cpu(const GemmBatch& g, const float* a, const float* b, float* c, GemmIsa isa);
// cuBLAS on a staged copy (CUDA builds); Error(kRuntime) without a usable GPU.
void gemm_gpu(const GemmBatch& g, const float* a, std::size_t a_n, const float* b, std::size_t b_n,
              float* c, std::size_t c_n);
// An elementwise unary kind on the GPU (a small CUDA kernel); returns false
// when the kind has no GPU kernel.
bool unary_gpu(ir::OpKind kind, const float* x, float* y, std::size_t n);

// Kernel inputs: local shapes and data, plus per-loop offsets of the block
// in the full iteration space where semantics need them.
struct KernelArgs {
  const ir::Operator* op = nullptr;
  std::vector<ir::Shape> in_shapes;
  std::vector<const Buf*> in;
  std::vector<ir::Shape> out_shapes;
  std::vector<Buf*> out;
  std::vector<ir::Shape> full_in_shapes;  // whole tensors (ReduceMean counts, Attention causal)
  std::int64_t gather_offset = 0;         // first table row held (Gather)
  std::int64_t query_offset = 0;          // first query position held (Attention)
  std::int64_t depth_offset = 0;          // first class held on the depth dim (OneHot)
  bool bool_mask = false;                 // Attention mask holds keep flags, not addends
  bool use_gpu = false;                   // GEMMs through cuBLAS
  // SoftmaxCrossEntropy with its class dim cut: every row's log-sum-exp over
  // all classes (kept by the forward pass) and the first class held.
  const Buf* row_lse = nullptr;
  std::int64_t class_offset = 0;
  // Conv2D, MaxPool, AvgPool: the global row (H) and column (W) of the
  // first element of the input block (after its halo exchange: the rows the
  // output block's windows read) and of the output block. Padding is where
  // a window reaches outside the whole input (full_in_shapes).
  std::array<std::int64_t, 2> window_in_begin{};
  std::array<std::int64_t, 2> window_out_begin{};
  // Conv2D: whether this rank adds the bias (with a cut channel loop the
  // output is a partial sum, and one rank of the sum adds it).
  bool add_bias = true;
  // BatchNorm: the mean and variance of each channel of the block (the
  // batch's, summed over every rank holding the channel, or the running ones).
  const Buf* bn_mean = nullptr;
  const Buf* bn_var = nullptr;
  // BatchNorm backward with batch statistics: per channel of the block,
  // Σdy and then Σdy·x̂ over every rank holding the channel (the
  // SyncBatchNorm all-reduce); nullptr: running statistics (the mean and
  // variance are constants, so dx is elementwise).
  const Buf* bn_grad_sums = nullptr;
};

// Sliding windows and batch normalisation (kernels_spatial.cpp).
void k_conv2d(const KernelArgs& a);
void k_pool(const KernelArgs& a);  // MaxPool, AvgPool
void k_global_avg_pool(const KernelArgs& a);
// BatchNorm: per channel of the block, the sum and then the sum of squares
// of its elements (2·C values), which the executor sums over the ranks.
[[nodiscard]] std::vector<float> batch_norm_sums(const KernelArgs& a);
void k_batch_norm(const KernelArgs& a);  // with bn_mean and bn_var set
// Each channel's mean and biased variance from its sum and sum of squares
// (batch_norm_sums, summed over the ranks) over `count` elements.
void batch_norm_moments(const std::vector<float>& sums, double count, Buf& mean, Buf& var);
// BatchNorm backward: per channel of the block, Σdy and then Σdy·x̂ (2·C
// values, with bn_mean and bn_var set), which the executor sums over the
// same ranks as the forward statistics.
[[nodiscard]] std::vector<float> batch_norm_grad_sums(const KernelArgs& a, const Buf& dy);

// Their backward (kernels_spatial.cpp; run_backward_kernel dispatches):
// dy is the output block's gradient, dx[j] accumulates input j's (nullptr:
// none wanted). A window kernel's dx[0] is sized like its input block as
// the kernel saw it, halo rows included: the executor returns those rows'
// gradients to the ranks that hold them.
void b_conv2d(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx);
void b_pool(const KernelArgs& a, const Buf& dy, Buf* dx);
void b_global_avg_pool(const KernelArgs& a, const Buf& dy, Buf* dx);
void b_batch_norm(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx);

// Shared by the forward and backward kernels.
[[nodiscard]] std::int64_t numel(const ir::Shape& s);
[[nodiscard]] std::int64_t norm_axis(std::int64_t axis, std::size_t rank);
// Strides of `s` broadcast (right-aligned) onto `out`: 0 where the operand
// lacks the dim or has size 1.
[[nodiscard]] std::vector<std::int64_t> broadcast_strides(const ir::Shape& s, const ir::Shape& out);
[[nodiscard]] float unary(ir::OpKind k, float x);

// Row-major strides of a shape (the last dim's is 1).
[[nodiscard]] std::vector<std::int64_t> row_major_strides(const ir::Shape& s);

// Output element i of an elementwise binary kind reads x[first] and
// y[second] (each operand broadcast, right-aligned, onto the output).
struct BroadcastIndex {
  BroadcastIndex(const ir::Shape& x, const ir::Shape& y, const ir::Shape& out);
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> operands(std::int64_t i) const;
  ir::Shape out;
  std::vector<std::int64_t> sx, sy;
};

// Output element o of a Transpose block reads input element source(o)
// (attribute perm; reversed dims without it).
struct TransposeIndex {
  TransposeIndex(const ir::Operator& op, const ir::Shape& in, const ir::Shape& out);
  [[nodiscard]] std::int64_t source(std::int64_t o) const;
  ir::Shape out;
  std::vector<std::int64_t> stride;  // per output dim, the input stride it walks
};

// ReduceSum, ReduceMean, ReduceMax over attribute axes (every dim without
// it): input element i folds into output element target(i); count is the
// number of full-tensor elements each output reduces (ReduceMean divides by it).
struct ReduceIndex {
  ReduceIndex(const ir::Operator& op, const ir::Shape& in, const ir::Shape& full_in);
  [[nodiscard]] std::int64_t target(std::int64_t i) const;
  ir::Shape in;
  std::vector<bool> reduced;  // per input dim
  ir::Shape kept;             // the dims not reduced: the output block's extents
  double count = 1;
};

// Split and Concat along attribute axis (default 0) of a tensor of shape s:
// `outer` rows before the axis, `inner` elements after it.
struct AxisSpan {
  std::size_t axis = 0;
  std::int64_t outer = 1, inner = 1;
};
[[nodiscard]] AxisSpan axis_span(const ir::Operator& op, const ir::Shape& s);

// An Einsum on its blocks: the output's letters first, then the summed
// ones; each letter's extent and, per operand, its stride (0 when the
// operand lacks it, summed when it repeats); `inner` terms per output element.
struct EinsumLoops {
  std::string letters;
  std::size_t n_out = 0;
  std::vector<std::int64_t> extent;
  std::vector<std::vector<std::int64_t>> stride;  // [operand][letter]
  std::int64_t inner = 1;
  std::int64_t total = 1;  // every term: product of all extents
};
// Error(kInternal) when the equation does not parse (kernel_support refused it before).
[[nodiscard]] EinsumLoops einsum_loops(const KernelArgs& a);

// f(i) for i in [0, n), split over oneTBB tasks.
template <class F>
void parallel_rows(std::int64_t n, F&& f) {
  oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<std::int64_t>(0, n),
                            [&](const oneapi::tbb::blocked_range<std::int64_t>& r) {
                              for (std::int64_t i = r.begin(); i < r.end(); ++i) f(i);
                            });
}

// The batched GEMM a MatMul or BatchMatMul runs on its blocks.
[[nodiscard]] GemmBatch matmul_batch(const KernelArgs& a);

// "ab,bc->ac": operands' letters and the output's.
struct Equation {
  std::vector<std::string> in;
  std::string out;
};
[[nodiscard]] std::optional<Equation> parse_equation(std::string eq);

// One rank's attention block, read once per call: Q is [b,h,s,d], K [b,h,t,d], V [b,h,t,e];
// the optional mask broadcasts onto the scores [b,h,s,t] through `ms`.
struct AttentionBlock {
  std::int64_t nb = 0, nh = 0, ns = 0, nd = 0, nt = 0, ne = 0;
  std::int64_t first_query = 0;  // key position of local query row 0 (the causal limit)
  bool causal = false;
  const Buf* mask = nullptr;
  bool bool_mask = false;
  std::vector<std::int64_t> ms;
  double scale = 1.0;
};

[[nodiscard]] AttentionBlock attention_block(const KernelArgs& a);
// Scaled score of query row r (= (b*nh + h)*ns + s) against key t, with the mask applied;
// -inf where causality or a boolean mask hides the key.
[[nodiscard]] double attention_score(const AttentionBlock& g, const Buf& q, const Buf& k,
                                     std::int64_t r, std::int64_t t);

// ONNX Slice of a block: per dim, the first element taken and the step
// (dims the slice keeps whole: 0 and 1, whatever the block's extent, so that
// a dim cut across ranks stays whole on each).
struct SliceDims {
  std::vector<std::int64_t> start, step;
};
[[nodiscard]] SliceDims slice_dims(const ir::Operator& op, const ir::Shape& full_in);

// Visits the output elements of a Slice block: f(output index, input index).
template <class F>
void for_each_sliced(const KernelArgs& a, F&& f) {
  const SliceDims sd = slice_dims(*a.op, a.full_in_shapes[0]);
  const ir::Shape& ys = a.out_shapes[0];
  const std::vector<std::int64_t> stride = row_major_strides(a.in_shapes[0]);
  for (std::int64_t o = 0; o < numel(ys); ++o) {
    std::int64_t rest = o, off = 0;
    for (std::size_t d = ys.size(); d-- > 0;) {
      off += (sd.start[d] + (rest % ys[d]) * sd.step[d]) * stride[d];
      rest /= ys[d];
    }
    f(static_cast<std::size_t>(o), static_cast<std::size_t>(off));
  }
}

// Runs the kernel of args.op->kind. Outputs must be sized already.
void run_kernel(const KernelArgs& args);

// The backward of args.op on the same blocks the forward kernel saw (its
// inputs; outputs unused: what a gradient formula needs is recomputed from
// the inputs). dy[j] is the gradient of output j in the output's block
// shape (every output given); dx[j] accumulates (+=) the gradient of input
// j, sized like its block, or is nullptr when input j needs none. On the
// CPU, in double where a sum spans many terms.
void run_backward_kernel(const KernelArgs& args, const std::vector<const Buf*>& dy,
                         const std::vector<Buf*>& dx);

// Empty when the kind (with these attributes) has a kernel, else why not.
[[nodiscard]] std::string kernel_support(const ir::Graph& g, const ir::Operator& op);

}  // namespace recsearch::exec::detail
