// SPDX-License-Identifier: Apache-2.0
// GPU module (CUDA builds): whether a device is usable, GEMMs through cuBLAS
// and elementwise kernels (kernels.cu), each on a staged copy of the host
// blocks. Only the module links CUDA and cuBLAS; the execution layer reaches
// these through exec/gpu_api.h.
#include <algorithm>
#include <cstdint>

#include "exec/cuda/cuda_error.hpp"
#include "exec/cuda/module.hpp"

namespace recsearch::exec::detail {
// kernels.cu
bool launch_unary_from(int kind, int first_unary, const float* x, float* y, std::size_t n,
                       cudaStream_t s);
}  // namespace recsearch::exec::detail

namespace recsearch::exec::gpu {
namespace {

// Device memory freed on scope exit.
struct DevBuf {
  float* p = nullptr;
  explicit DevBuf(std::size_t n) {
    RS_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(float)));
  }
  ~DevBuf() { (void)cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

cublasHandle_t handle() {
  static thread_local cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    RS_CUBLAS_CHECK(cublasCreate(&x));
    return x;
  }();
  return h;
}

}  // namespace

int device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // a failed query must not poison later calls
    throw Error(Errc::kRuntime, cudaGetErrorString(rc));
  }
  return n;
}

void gemm(const RecsearchGpuGemm& g, const float* a, std::size_t a_n, const float* b,
          std::size_t b_n, float* c, std::size_t c_n) {
  DevBuf da(a_n), db(b_n), dc(c_n);
  RS_CUDA_CHECK(cudaMemcpy(da.p, a, a_n * sizeof(float), cudaMemcpyHostToDevice));
  RS_CUDA_CHECK(cudaMemcpy(db.p, b, b_n * sizeof(float), cudaMemcpyHostToDevice));
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: swap the operands.
  const cublasOperation_t opb = g.trans_b != 0 ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = g.trans_a != 0 ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int ldb = g.trans_b != 0 ? k : n;
  const int lda = g.trans_a != 0 ? m : k;
  for (std::size_t i = 0; i < g.batch; ++i) {
    RS_CUBLAS_CHECK(cublasSgemm(handle(), opb, opa, n, m, k, &one, db.p + g.b_off[i], ldb,
                                da.p + g.a_off[i], lda, &zero, dc.p + g.c_off[i], n));
  }
  RS_CUDA_CHECK(cudaMemcpy(c, dc.p, c_n * sizeof(float), cudaMemcpyDeviceToHost));
}

bool unary(int kind, int first_unary, const float* x, float* y, std::size_t n) {
  DevBuf dx(n), dy(n);
  RS_CUDA_CHECK(cudaMemcpy(dx.p, x, n * sizeof(float), cudaMemcpyHostToDevice));
  if (!detail::launch_unary_from(kind, first_unary, dx.p, dy.p, n, nullptr)) return false;
  RS_CUDA_CHECK(cudaGetLastError());
  RS_CUDA_CHECK(cudaMemcpy(y, dy.p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return true;
}

}  // namespace recsearch::exec::gpu
