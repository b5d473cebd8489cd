// SPDX-License-Identifier: Apache-2.0
// The executor's CPU GEMM (exec/kernels.hpp, gemm_cpu). Every element is
// float(Σ_k double(a_ik)·double(b_kj)), summed in double over k = 0, 1, ...
// in order and rounded to float once: the bits the calibration and the
// `--check` runs compare. The work is blocked for speed without touching
// that order. Each task owns an MC x NC block of one batch entry's C and
// runs over k in KC-long chunks; per chunk it packs op(A) and op(B) into
// contiguous double panels (so strided or transposed operands read with
// unit stride) and a micro-kernel updates an MR x NR tile of double
// accumulators held in registers. The tile is carried across chunks in a
// double scratch, so each accumulator sees its products in k order, one
// addition each, whatever the block sizes, the vector width or the thread
// count. This file is compiled with -ffp-contract=off, so that the code
// runs the formula's product and sum as two operations on any target (a
// product of two floats is exact in double, so a fused multiply-add would
// round the same; the build does not lean on that).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/kernels.hpp"

namespace recsearch::exec::detail {
namespace {

// Cache blocking: a KC x NR panel of B stays in L1 while the micro-kernel
// walks the packed A block (MC x KC) in L2.
constexpr std::int64_t kMC = 48;
constexpr std::int64_t kNC = 64;
constexpr std::int64_t kKC = 256;

using V2 = double __attribute__((vector_size(16)));  // SSE2, any x86-64
using V4 = double __attribute__((vector_size(32)));  // AVX2 code

// One batch entry's operands, and where its task's block of C lies.
struct Block {
  const GemmBatch* g = nullptr;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  std::int64_t i0 = 0, j0 = 0, mc = 0, nc = 0;
};

// The per-thread packed panels and the double accumulator scratch, kept
// between tasks so a task allocates nothing.
struct Scratch {
  std::vector<double> a, b, c;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Unaligned vector moves; by reference, as a 32-byte vector passed by value
// has no ABI outside the AVX2 clone.
template <class V>
[[gnu::always_inline]] inline void load(V& v, const double* p) {
  std::memcpy(&v, p, sizeof v);
}

template <class V>
[[gnu::always_inline]] inline void store(double* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// A kc x extent slice of an operand, element (k, x) at src[k·ld_k + x·ld_x],
// as W-wide panels [x / W][k][x % W] of doubles; x past the extent is zero
// (the results it feeds are dropped). Reads run along whichever index is
// contiguous, so a transposed operand costs no strided walk.
template <std::int64_t W>
void pack(const float* src, std::int64_t ld_k, std::int64_t ld_x, std::int64_t extent,
          std::int64_t kc, double* out) {
  const auto panel_at = [&](std::int64_t p, std::int64_t k) { return out + p * kc + k * W; };
  if (ld_x == 1) {
    for (std::int64_t k = 0; k < kc; ++k) {
      const float* row = src + k * ld_k;
      for (std::int64_t p = 0; p < extent; p += W) {
        double* dst = panel_at(p, k);
        const std::int64_t w = std::min(W, extent - p);
        for (std::int64_t x = 0; x < w; ++x) dst[x] = row[p + x];
        for (std::int64_t x = w; x < W; ++x) dst[x] = 0.0;
      }
    }
    return;
  }
  for (std::int64_t p = 0; p < extent; p += W) {
    const std::int64_t w = std::min(W, extent - p);
    for (std::int64_t x = 0; x < w; ++x) {
      const float* col = src + (p + x) * ld_x;
      for (std::int64_t k = 0; k < kc; ++k) panel_at(p, k)[x] = col[k * ld_k];
    }
    for (std::int64_t k = 0; k < kc; ++k) {
      for (std::int64_t x = w; x < W; ++x) panel_at(p, k)[x] = 0.0;
    }
  }
}

// op(A) rows i0 .. i0+mc and op(B) columns j0 .. j0+nc, over k0 .. k0+kc.
template <std::int64_t MR>
void pack_a(const Block& t, std::int64_t k0, std::int64_t kc, double* out) {
  const GemmBatch& g = *t.g;
  if (g.trans_a) return pack<MR>(t.a + k0 * g.m + t.i0, g.m, 1, t.mc, kc, out);
  pack<MR>(t.a + t.i0 * g.k + k0, 1, g.k, t.mc, kc, out);
}

template <std::int64_t NR>
void pack_b(const Block& t, std::int64_t k0, std::int64_t kc, double* out) {
  const GemmBatch& g = *t.g;
  if (g.trans_b) return pack<NR>(t.b + t.j0 * g.k + k0, 1, g.k, t.nc, kc, out);
  pack<NR>(t.b + k0 * g.n + t.j0, g.n, 1, t.nc, kc, out);
}

// acc[r][c] += a[k][r] · b[k][c] for k in order, the MR x NR tile in
// registers; it starts from +0.0 on the first chunk (as a plain sum does)
// and from the scratch tile on later ones.
template <class V, std::int64_t MR, std::int64_t NV>
[[gnu::always_inline]] inline void micro_kernel(std::int64_t kc, const double* a, const double* b,
                                                double* c, std::int64_t ldc, bool first) {
  constexpr std::int64_t W = sizeof(V) / sizeof(double);
  constexpr std::int64_t NR = NV * W;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (std::int64_t r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (std::int64_t v = 0; v < NV; ++v) {
      acc[r][v] = V{};
      if (!first) load(acc[r][v], c + r * ldc + v * W);
    }
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    V bk[NV];
#pragma GCC unroll 16
    for (std::int64_t v = 0; v < NV; ++v) load(bk[v], b + k * NR + v * W);
#pragma GCC unroll 16
    for (std::int64_t r = 0; r < MR; ++r) {
      const double ar = a[k * MR + r];
#pragma GCC unroll 16
      for (std::int64_t v = 0; v < NV; ++v) acc[r][v] += ar * bk[v];
    }
  }
#pragma GCC unroll 16
  for (std::int64_t r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (std::int64_t v = 0; v < NV; ++v) store(c + r * ldc + v * W, acc[r][v]);
  }
}

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// The task's block of C: every k chunk packed and run through the tiles,
// then the double sums rounded to float once.
template <class V, std::int64_t MR, std::int64_t NV>
[[gnu::always_inline]] inline void run_block(const Block& t) {
  constexpr std::int64_t NR = NV * static_cast<std::int64_t>(sizeof(V) / sizeof(double));
  const GemmBatch& g = *t.g;
  const std::int64_t mp = round_up(t.mc, MR), np = round_up(t.nc, NR);
  Scratch& s = scratch();
  s.a.resize(static_cast<std::size_t>(mp * kKC));
  s.b.resize(static_cast<std::size_t>(np * kKC));
  s.c.resize(static_cast<std::size_t>(mp * np));
  for (std::int64_t k0 = 0; k0 < g.k; k0 += kKC) {
    const std::int64_t kc = std::min(kKC, g.k - k0);
    pack_a<MR>(t, k0, kc, s.a.data());
    pack_b<NR>(t, k0, kc, s.b.data());
    for (std::int64_t jp = 0; jp < np; jp += NR) {
      for (std::int64_t ip = 0; ip < mp; ip += MR) {
        micro_kernel<V, MR, NV>(kc, s.a.data() + ip * kc, s.b.data() + jp * kc,
                                s.c.data() + ip * np + jp, np, k0 == 0);
      }
    }
  }
  for (std::int64_t r = 0; r < t.mc; ++r) {
    float* row = t.c + (t.i0 + r) * g.n + t.j0;
    const double* acc = s.c.data() + r * np;
    for (std::int64_t c = 0; c < t.nc; ++c) row[c] = static_cast<float>(acc[c]);
  }
}

// 12 vector accumulators (6 rows x 2 vectors) plus two B vectors and a
// broadcast fit the 16 vector registers of both targets.
void run_block_sse2(const Block& t) { run_block<V2, 6, 2>(t); }

using BlockFn = void (*)(const Block&);

#if defined(__x86_64__) || defined(__i386__)
[[gnu::target("avx2")]] void run_block_avx2(const Block& t) { run_block<V4, 6, 2>(t); }

BlockFn pick_block_fn() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? run_block_avx2 : run_block_sse2;
}
#else
// Elsewhere the 2-wide vectors are the target's own (or scalar code).
BlockFn pick_block_fn() { return run_block_sse2; }
#endif

}  // namespace

void gemm_cpu(const GemmBatch& g, const float* a, const float* b, float* c, GemmIsa isa) {
  if (g.m <= 0 || g.n <= 0) return;
  const auto batches = static_cast<std::int64_t>(g.c_off.size());
  if (g.k <= 0) {
    for (std::int64_t bi = 0; bi < batches; ++bi)
      std::fill_n(c + g.c_off[static_cast<std::size_t>(bi)], g.m * g.n, 0.0f);
    return;
  }
  static const BlockFn best = pick_block_fn();
  const BlockFn run = isa == GemmIsa::sse2 ? run_block_sse2 : best;
  const std::int64_t row_blocks = (g.m + kMC - 1) / kMC, col_blocks = (g.n + kNC - 1) / kNC;
  const std::int64_t per_batch = row_blocks * col_blocks;
  parallel_rows(batches * per_batch, [&](std::int64_t task) {
    const auto bi = static_cast<std::size_t>(task / per_batch);
    const std::int64_t ib = task % per_batch / col_blocks, jb = task % col_blocks;
    Block t{&g, a + g.a_off[bi], b + g.b_off[bi], c + g.c_off[bi], ib * kMC, jb * kNC, 0, 0};
    t.mc = std::min(kMC, g.m - t.i0);
    t.nc = std::min(kNC, g.n - t.j0);
    run(t);
  });
}

void gemm_cpu(const GemmBatch& g, const float* a, const float* b, float* c) {
  gemm_cpu(g, a, b, c, GemmIsa::best);
}

}  // namespace recsearch::exec::detail
