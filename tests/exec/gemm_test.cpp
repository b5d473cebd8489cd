// SPDX-License-Identifier: Apache-2.0
// The CPU GEMM (gemm_cpu) against the formula it promises, bit for bit:
// C[i][j] = float(Σ_k double(op(A)_ik)·double(op(B)_kj)), summed in double
// over k in increasing order from +0.0. The multi-rank `--check` runs and
// the calibration rely on those exact bits, so the blocked kernel must
// match a plain triple loop on every shape (edge sizes around its tiles and
// k chunks, k = 0), every transpose combination, batches with offsets, and
// any thread count, with the widest vector code this CPU has and with the
// SSE2 code every x86-64 runs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "exec/kernels.hpp"

using recsearch::exec::detail::gemm_cpu;
using recsearch::exec::detail::GemmBatch;
using recsearch::exec::detail::GemmIsa;

namespace {

// Mixed magnitudes (2^-20 .. 2^20), both signs, and some exact zeros of
// either sign, so that the sign of a zero sum shows.
float random_value(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 15), expo(-20, 20);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  const int k = kind(rng);
  if (k == 0) return 0.0f;
  if (k == 1) return -0.0f;
  const float v = std::ldexp(mant(rng), expo(rng));
  return k % 2 == 0 ? v : -v;
}

// ±1, ±2^20 or ±2^40: products up to 2^80 are exact, but a partial sum
// holding 2^80 drops a 1 added to it, which shows once the 2^80 terms
// cancel. The float result then depends on the order of the double sums,
// which random mantissas of mixed magnitude almost never show (their
// rounding errors stay below float's).
float cancelling_value(std::mt19937& rng) {
  std::uniform_int_distribution<int> expo(0, 2), sign(0, 1);
  const float v = std::ldexp(1.0f, 20 * expo(rng));
  return sign(rng) == 0 ? v : -v;
}

// The batch entries in reverse order with a gap before each, so offsets
// are neither zero nor contiguous.
std::vector<std::int64_t> offsets(int batches, std::int64_t size, std::int64_t gap) {
  std::vector<std::int64_t> off(static_cast<std::size_t>(batches));
  for (int b = 0; b < batches; ++b)
    off[static_cast<std::size_t>(b)] = (batches - 1 - b) * (size + gap) + gap;
  return off;
}

void reference(const GemmBatch& g, const float* a, const float* b, float* c) {
  for (std::size_t bi = 0; bi < g.c_off.size(); ++bi) {
    const float* A = a + g.a_off[bi];
    const float* B = b + g.b_off[bi];
    float* C = c + g.c_off[bi];
    for (std::int64_t i = 0; i < g.m; ++i) {
      for (std::int64_t j = 0; j < g.n; ++j) {
        double sum = 0.0;
        for (std::int64_t k = 0; k < g.k; ++k) {
          const double x = g.trans_a ? A[k * g.m + i] : A[i * g.k + k];
          const double y = g.trans_b ? B[j * g.k + k] : B[k * g.n + j];
          const double p = x * y;
          sum += p;
        }
        C[i * g.n + j] = static_cast<float>(sum);
      }
    }
  }
}

struct Case {
  GemmBatch g;
  std::vector<float> a, b, c0;  // c0: C before the call (NaN sentinels)
};

Case make_case(std::mt19937& rng, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
               int batches, bool cancelling) {
  Case t;
  t.g.m = m;
  t.g.n = n;
  t.g.k = k;
  t.g.trans_a = ta;
  t.g.trans_b = tb;
  t.g.a_off = offsets(batches, m * k, 3);
  t.g.b_off = offsets(batches, k * n, 5);
  t.g.c_off = offsets(batches, m * n, 2);
  t.a.resize(static_cast<std::size_t>(batches * (m * k + 3)));
  t.b.resize(static_cast<std::size_t>(batches * (k * n + 5)));
  for (float& x : t.a) x = cancelling ? cancelling_value(rng) : random_value(rng);
  for (float& x : t.b) x = cancelling ? cancelling_value(rng) : random_value(rng);
  t.c0.assign(static_cast<std::size_t>(batches * (m * n + 2)),
              std::numeric_limits<float>::quiet_NaN());
  return t;
}

std::vector<float> run_gemm(const Case& t, int threads, GemmIsa isa) {
  std::vector<float> c = t.c0;
  oneapi::tbb::task_arena arena(threads);
  arena.execute([&] { gemm_cpu(t.g, t.a.data(), t.b.data(), c.data(), isa); });
  return c;
}

// Every byte, NaN sentinels included: the gaps between batch entries must
// be left alone.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

void check_case(std::mt19937& rng, std::int64_t m, std::int64_t n, std::int64_t k, int batches) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool cancelling : {false, true}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(batches);
        CAPTURE(cancelling);
        const Case t = make_case(rng, m, n, k, ta, tb, batches, cancelling);
        std::vector<float> want = t.c0;
        reference(t.g, t.a.data(), t.b.data(), want.data());
        for (const GemmIsa isa : {GemmIsa::best, GemmIsa::sse2}) {
          CHECK(same_bits(run_gemm(t, 1, isa), want));
          CHECK(same_bits(run_gemm(t, 7, isa), want));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm_cpu: the blocked kernel gives the plain double sum's bits") {
  std::mt19937 rng(20261127);
  // Edge sizes: 1, primes, and either side of the kernel's tiles (6 rows,
  // 4 or 8 columns), blocks (48 rows, 64 columns) and k chunks (256).
  const std::int64_t edge[] = {1, 2, 7, 13, 37, 48, 49, 65};
  for (const std::int64_t m : edge) {
    for (const std::int64_t n : edge) check_case(rng, m, n, m % 3 == 0 ? 5 : 13, 1);
  }
  for (const std::int64_t k : {1, 7, 255, 256, 257, 600}) check_case(rng, 13, 37, k, 1);
  for (const int batches : {1, 3}) {
    check_case(rng, 50, 70, 300, batches);
    check_case(rng, 7, 129, 37, batches);
  }
  // Random shapes.
  std::uniform_int_distribution<std::int64_t> dim(1, 100), kd(1, 520);
  for (int r = 0; r < 12; ++r) check_case(rng, dim(rng), dim(rng), kd(rng), r % 2 == 0 ? 1 : 3);
}

TEST_CASE("gemm_cpu: k = 0 gives zeros and m or n = 0 writes nothing") {
  std::mt19937 rng(7);
  for (const int batches : {1, 3}) {
    check_case(rng, 5, 9, 0, batches);
    check_case(rng, 0, 9, 4, batches);
    check_case(rng, 5, 0, 4, batches);
  }
}

TEST_CASE("gemm_cpu: a sum that cancels keeps the double accumulator's bits") {
  // 1 + 2^-30 - 1 in float order is 0; the double sum keeps 2^-30, and a
  // sum in another order (or in float) would not give it.
  GemmBatch g;
  g.m = g.n = 1;
  g.k = 3;
  g.a_off = g.b_off = g.c_off = {0};
  const std::vector<float> a = {1.0f, std::ldexp(1.0f, -30), -1.0f};
  const std::vector<float> b = {1.0f, 1.0f, 1.0f};
  float c = 0.0f;
  gemm_cpu(g, a.data(), b.data(), &c);
  CHECK(c == std::ldexp(1.0f, -30));
}
