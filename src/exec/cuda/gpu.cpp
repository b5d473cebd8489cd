// SPDX-License-Identifier: Apache-2.0
// GPU module (CUDA builds): whether a device is usable, GEMMs through cuBLAS
// and elementwise kernels (kernels.cu), each on a staged copy of the host
// blocks; and, for `recsearch calibrate --backend nccl`, GEMMs and copies
// timed on device-resident buffers with CUDA events. Only the module links
// CUDA and cuBLAS; the execution layer reaches these through exec/gpu_api.h.
#include <cuda_bf16.h>  // CUDA: the bf16 element type of the timed GEMMs

#include <algorithm>
#include <cstdint>
#include <string>

#include "exec/cuda/cuda_error.hpp"
#include "exec/cuda/module.hpp"
#include "exec/cuda/timing.hpp"

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

// Device memory of `bytes`, freed on scope exit (the timings' operands).
struct DevBytes {
  void* p = nullptr;
  explicit DevBytes(std::size_t bytes) {
    RS_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
  }
  ~DevBytes() { (void)cudaFree(p); }
  DevBytes(const DevBytes&) = delete;
  DevBytes& operator=(const DevBytes&) = delete;
};

// Two events around `iters` back-to-back launches on `stream`, after one
// untimed launch; seconds per launch.
template <class F>
double time_on_stream(cudaStream_t stream, int iters, F&& launch) {
  const TimingEvents ev;
  const int calls = std::max(iters, 1);
  launch();
  RS_CUDA_CHECK(cudaEventRecord(ev.start(), stream));
  for (int i = 0; i < calls; ++i) launch();
  RS_CUDA_CHECK(cudaEventRecord(ev.stop(), stream));
  RS_CUDA_CHECK(cudaEventSynchronize(ev.stop()));
  return ev.seconds_per(calls);
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

void device_info(int device, std::string* name, std::size_t* memory_bytes) {
  cudaDeviceProp prop{};
  RS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  *name = prop.name;
  *memory_bytes = prop.totalGlobalMem;
}

double time_gemm(int device, cudaStream_t stream, RecsearchGpuDtype dtype, std::int64_t m,
                 std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, int iters) {
  RS_CUDA_CHECK(cudaSetDevice(device));
  // Operands in the dtype (values do not change a GEMM's time; zeroed so
  // that no NaN or denormal slows it), f32 accumulation in every case.
  const cudaDataType_t type = dtype == kRecsearchGpuBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      dtype == kRecsearchGpuTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const std::size_t elem = dtype == kRecsearchGpuBf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  const auto mu = static_cast<std::size_t>(m), nu = static_cast<std::size_t>(n),
             ku = static_cast<std::size_t>(k);
  DevBytes a(mu * ku * elem), b(ku * nu * elem), c(mu * nu * elem);
  RS_CUDA_CHECK(cudaMemsetAsync(a.p, 0, mu * ku * elem, stream));
  RS_CUDA_CHECK(cudaMemsetAsync(b.p, 0, ku * nu * elem, stream));
  RS_CUBLAS_CHECK(cublasSetStream(handle(), stream));
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, as in gemm().
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int ldb = trans_b ? ki : ni;
  const int lda = trans_a ? mi : ki;
  const double s = time_on_stream(stream, iters, [&] {
    RS_CUBLAS_CHECK(cublasGemmEx(handle(), opb, opa, ni, mi, ki, &one, b.p, type, ldb, a.p, type,
                                 lda, &zero, c.p, type, ni, compute, CUBLAS_GEMM_DEFAULT));
  });
  RS_CUBLAS_CHECK(cublasSetStream(handle(), nullptr));
  return s;
}

double time_copy(int device, cudaStream_t stream, std::size_t bytes, int iters) {
  RS_CUDA_CHECK(cudaSetDevice(device));
  DevBytes src(bytes), dst(bytes);
  RS_CUDA_CHECK(cudaMemsetAsync(src.p, 0, bytes, stream));
  return time_on_stream(stream, iters, [&] {
    RS_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, stream));
  });
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
