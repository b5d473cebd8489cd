/* SPDX-License-Identifier: Apache-2.0 */
/* Private: the C interface between the execution layer and its GPU module
 * (librecsearch_gpu.so, loaded with dlopen only when a GPU backend or kernel
 * is requested), so that CUDA, cuBLAS and NCCL are never mapped into a
 * process that does not use a GPU. Plain C types only: no C++ object and no
 * exception crosses the boundary. Every function returning int returns 0 on
 * success; otherwise it writes a NUL-terminated message (the failing call,
 * the library's message, file:line) into err[0..err_len) and returns
 * non-zero. Bump kRecsearchGpuAbiVersion whenever this struct or the meaning
 * of any field changes. */
#ifndef RECSEARCH_EXEC_GPU_API_H
#define RECSEARCH_EXEC_GPU_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: nccl_open takes the node-local rank and size; communicators are
 * non-blocking, created on nccl_open and waited for by the first
 * nccl_collective.
 * 3: the device-resident timings of `recsearch calibrate --backend nccl`
 * (device_info, time_gemm, time_copy, time_collective). */
enum { kRecsearchGpuAbiVersion = 3 };

/* Batched row-major GEMM: c[i] = op(a[i]) op(b[i]) at the given element
 * offsets; m x k times k x n. */
typedef struct RecsearchGpuGemm {
  int64_t m, n, k;
  int trans_a, trans_b;
  size_t batch;
  const int64_t* a_off;
  const int64_t* b_off;
  const int64_t* c_off;
} RecsearchGpuGemm;

/* The collectives of the NCCL backend. */
typedef enum RecsearchGpuCollective {
  kRecsearchGpuAllGather = 0,
  kRecsearchGpuAllReduce = 1,
  kRecsearchGpuReduceScatter = 2,
  kRecsearchGpuAllToAll = 3
} RecsearchGpuCollective;

/* The arithmetic time_gemm runs: f32 on the CUDA cores, f32 operands on
 * the tensor cores (TF32), and bf16 operands with f32 accumulation. */
typedef enum RecsearchGpuDtype {
  kRecsearchGpuF32 = 0,
  kRecsearchGpuTf32 = 1,
  kRecsearchGpuBf16 = 2
} RecsearchGpuDtype;

/* One rank's NCCL state: its device, stream, world and per-axis communicators. */
typedef struct RecsearchGpuNccl RecsearchGpuNccl;

typedef struct RecsearchGpuApi {
  int abi_version;
  int has_nccl; /* 0: the nccl_* members are null */

  /* CUDA devices visible to this process (fails when the driver is unusable). */
  int (*device_count)(int* n, char* err, size_t err_len);
  /* cuBLAS GEMMs on staged copies of a (a_n floats), b (b_n) into c (c_n). */
  int (*gemm)(const RecsearchGpuGemm* g, const float* a, size_t a_n, const float* b, size_t b_n,
              float* c, size_t c_n, char* err, size_t err_len);
  /* Elementwise unary kernel: kind - first_unary indexes the unary kinds;
   * *done = 0 when that kind has no GPU kernel. */
  int (*unary)(int kind, int first_unary, const float* x, float* y, size_t n, int* done, char* err,
               size_t err_len);

  /* Bytes of an NCCL unique id (rank 0 creates it, the caller broadcasts it). */
  size_t nccl_id_bytes;
  int (*nccl_unique_id)(void* id, char* err, size_t err_len);
  /* Binds device local_rank (the rank among the local_size ranks of its
   * node; fails with "no usable GPU: ..." when the node has no device or
   * fewer devices than ranks) and starts creating the non-blocking world
   * communicator; returns without waiting for the peers. The ncclCommSplit
   * group of each axis (colors[a], keys[a]) is made by the first
   * nccl_collective. */
  int (*nccl_open)(const void* id, int size, int rank, int local_rank, int local_size, size_t axes,
                   const int* colors, const int* keys, RecsearchGpuNccl** out, char* err,
                   size_t err_len);
  /* One collective on axis `axis` among group_size members, n elements per
   * member block (see Communicator). Every wait (the first call's creation
   * of the world and the splits, the enqueue, the completion) is polled
   * against timeout_s (0: forever), with the communicators' asynchronous
   * errors; on expiry or any failure every communicator is aborted. */
  int (*nccl_collective)(RecsearchGpuNccl* c, RecsearchGpuCollective kind, size_t axis,
                         int group_size, const float* send, float* recv, size_t n, double timeout_s,
                         char* err, size_t err_len);
  /* Aborts every communicator (a peer failed); the handle must still be
   * closed. Closing finalizes and destroys healthy communicators and aborts
   * any other. */
  void (*nccl_abort)(RecsearchGpuNccl* c);
  void (*nccl_close)(RecsearchGpuNccl* c);

  /* Timings on the device nccl_open bound, with device-resident buffers
   * only (no host copy is timed), for `recsearch calibrate --backend nccl`.
   * Each runs one untimed call, then `iters` calls back to back between two
   * CUDA events, and writes the seconds per call. */
  /* The device's name (NUL-terminated in name[0..name_len)) and memory. */
  int (*device_info)(RecsearchGpuNccl* c, char* name, size_t name_len, size_t* memory_bytes,
                     char* err, size_t err_len);
  /* Row-major [m, k] x [k, n] (op as in RecsearchGpuGemm) in `dtype`. */
  int (*time_gemm)(RecsearchGpuNccl* c, RecsearchGpuDtype dtype, int64_t m, int64_t n, int64_t k,
                   int trans_a, int trans_b, int iters, double* seconds, char* err, size_t err_len);
  /* A device-to-device copy of `bytes`. */
  int (*time_copy)(RecsearchGpuNccl* c, size_t bytes, int iters, double* seconds, char* err,
                   size_t err_len);
  /* One collective as nccl_collective (same axis, group and n), on device
   * scratch buffers; the waits are bounded by timeout_s as there. */
  int (*time_collective)(RecsearchGpuNccl* c, RecsearchGpuCollective kind, size_t axis,
                         int group_size, size_t n, int iters, double timeout_s, double* seconds,
                         char* err, size_t err_len);
} RecsearchGpuApi;

/* The module's only exported symbol: the interface, or null when abi_version
 * is not the module's own. */
typedef const RecsearchGpuApi* (*RecsearchGpuApiFn)(int abi_version);
#define RECSEARCH_GPU_API_SYMBOL "recsearch_gpu_api"

#ifdef __cplusplus
}
#endif

#endif /* RECSEARCH_EXEC_GPU_API_H */
