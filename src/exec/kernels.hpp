// SPDX-License-Identifier: Apache-2.0
// Private: the CPU kernels of the executor, each on one rank's local blocks
// (shapes are local; the few kernels whose result depends on where the
// block sits in the full tensor take offsets). Parallel over oneTBB,
// deterministic: every output element is computed by one task in a fixed
// order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  bool bool_mask = false;                 // Attention mask holds keep flags, not addends
  bool use_gpu = false;                   // GEMMs through cuBLAS
};

// Runs the kernel of args.op->kind. Outputs must be sized already.
void run_kernel(const KernelArgs& args);

// Empty when the kind (with these attributes) has a kernel, else why not.
[[nodiscard]] std::string kernel_support(const ir::Graph& g, const ir::Operator& op);

}  // namespace recsearch::exec::detail
