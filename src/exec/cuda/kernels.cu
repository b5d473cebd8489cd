// SPDX-License-Identifier: Apache-2.0
// Small CUDA kernels of the executor: elementwise unary operators, one
// thread per element. Kind numbers are ir::OpKind values (passed as int so
// that this file needs no C++20 header).
#include <cuda_runtime.h>

#include <cstddef>

namespace recsearch::exec::detail {

namespace {

// Must follow ir::OpKind's order: ReLU, GeLU, SiLU, Sigmoid, Tanh, Exp, Log, Sqrt, Neg.
enum Unary { kReLU, kGeLU, kSiLU, kSigmoid, kTanh, kExp, kLog, kSqrt, kNeg, kCount };

__global__ void unary_kernel(int op, const float* x, float* y, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float r = v;
  switch (op) {
    case kReLU: r = v > 0.0f ? v : 0.0f; break;
    case kGeLU: r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
    case kSiLU: r = v / (1.0f + expf(-v)); break;
    case kSigmoid: r = 1.0f / (1.0f + expf(-v)); break;
    case kTanh: r = tanhf(v); break;
    case kExp: r = expf(v); break;
    case kLog: r = logf(v); break;
    case kSqrt: r = sqrtf(v); break;
    case kNeg: r = -v; break;
    default: break;
  }
  y[i] = r;
}

}  // namespace

// `first_unary` is ir::OpKind::ReLU's value; kinds after Neg have no kernel here.
bool launch_unary_from(int kind, int first_unary, const float* x, float* y, std::size_t n,
                       cudaStream_t s) {
  const int op = kind - first_unary;
  if (op < 0 || op >= kCount) return false;
  if (n == 0) return true;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  unary_kernel<<<blocks, threads, 0, s>>>(op, x, y, n);
  return true;
}

}  // namespace recsearch::exec::detail
