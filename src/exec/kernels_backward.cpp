// SPDX-License-Identifier: Apache-2.0
// Backward kernels of the executor (exec/kernels.hpp, run_backward_kernel):
// the vector-Jacobian product of each forward kernel on one rank's blocks.
// Because every forward kernel is a function of its local blocks alone (the
// layouts make it so), its exact local backward, fed with the output
// gradient in the dual layout, gives each input's gradient contribution; the
// executor sums the contributions across ranks (exec/layout.hpp,
// GradientLayouts). Whatever a formula needs (softmax weights, norms' means,
// a maximum's position) is recomputed from the inputs. Loops that scatter
// into a broadcast operand run serially, so sums keep one order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/kernels.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::detail {
namespace {

using ir::OpKind;
using ir::Shape;

constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// d unary(k, x) / dx.
double unary_derivative(OpKind k, double x, bool tanh_gelu) {
  switch (k) {
    case OpKind::ReLU: return x > 0 ? 1.0 : 0.0;
    case OpKind::GeLU: {
      if (tanh_gelu) {
        const double c = 0.7978845608028654;
        const double t = std::tanh(c * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
      }
      return 0.5 * (1 + std::erf(x * 0.70710678118654752)) + x * kInvSqrt2Pi * std::exp(-x * x / 2);
    }
    case OpKind::SiLU: {
      const double s = 1 / (1 + std::exp(-x));
      return s + x * s * (1 - s);
    }
    case OpKind::Sigmoid: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
    case OpKind::Tanh: {
      const double t = std::tanh(x);
      return 1 - t * t;
    }
    case OpKind::Exp: return std::exp(x);
    case OpKind::Log: return 1 / x;
    case OpKind::Sqrt: return 0.5 / std::sqrt(x);
    case OpKind::Neg: return -1;
    default: return 1;  // Identity, Dropout (inference), a floating Cast
  }
}

void b_unary(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Buf& x = *a.in[0];
  const OpKind kind = a.op->kind;
  const bool tanh_gelu =
      kind == OpKind::GeLU && a.op->attrs.get_string("approximate", "none") == "tanh";
  parallel_rows(static_cast<std::int64_t>(x.size()), [&](std::int64_t i) {
    const auto at = static_cast<std::size_t>(i);
    (*dx)[at] += static_cast<float>(dy[at] * unary_derivative(kind, x[at], tanh_gelu));
  });
}

// Partial derivatives of binary(k, x, y) with respect to x and y.
std::pair<double, double> binary_derivatives(OpKind k, double x, double y) {
  switch (k) {
    case OpKind::Add: return {1, 1};
    case OpKind::Sub: return {1, -1};
    case OpKind::Mul: return {y, x};
    case OpKind::Div: return {1 / y, -x / (y * y)};
    case OpKind::Pow: {
      const double p = std::pow(x, y);
      return {y * std::pow(x, y - 1), x > 0 ? p * std::log(x) : 0.0};
    }
    // Ties go to x, as std::max and std::min pick it.
    case OpKind::Maximum: return x >= y ? std::pair{1.0, 0.0} : std::pair{0.0, 1.0};
    case OpKind::Minimum: return x <= y ? std::pair{1.0, 0.0} : std::pair{0.0, 1.0};
    default: return {0, 0};
  }
}

void b_binary(const KernelArgs& a, const Buf& dy, Buf* dx0, Buf* dx1) {
  const BroadcastIndex index(a.in_shapes[0], a.in_shapes[1], a.out_shapes[0]);
  const Buf& x = *a.in[0];
  const Buf& y = *a.in[1];
  std::vector<double> gx(dx0 != nullptr ? x.size() : 0), gy(dx1 != nullptr ? y.size() : 0);
  for (std::int64_t i = 0; i < numel(a.out_shapes[0]); ++i) {
    const auto [ox, oy] = index.operands(i);
    const auto [px, py] = binary_derivatives(a.op->kind, x[static_cast<std::size_t>(ox)],
                                             y[static_cast<std::size_t>(oy)]);
    const double g = dy[static_cast<std::size_t>(i)];
    if (dx0 != nullptr) gx[static_cast<std::size_t>(ox)] += g * px;
    if (dx1 != nullptr) gy[static_cast<std::size_t>(oy)] += g * py;
  }
  for (std::size_t i = 0; i < gx.size(); ++i) (*dx0)[i] += static_cast<float>(gx[i]);
  for (std::size_t i = 0; i < gy.size(); ++i) (*dx1)[i] += static_cast<float>(gy[i]);
}

void b_bias_add(const KernelArgs& a, const Buf& dy, Buf* dx, Buf* db) {
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t inner = 1;
  for (std::size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const std::int64_t c = xs[axis];
  if (dx != nullptr) {
    for (std::size_t i = 0; i < dy.size(); ++i) (*dx)[i] += dy[i];
  }
  if (db == nullptr) return;
  std::vector<double> g(static_cast<std::size_t>(c), 0.0);
  for (std::size_t i = 0; i < dy.size(); ++i)
    g[static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % c)] += dy[i];
  for (std::size_t i = 0; i < g.size(); ++i) (*db)[i] += static_cast<float>(g[i]);
}

void b_softmax(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= xs[d];
  for (std::size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const std::int64_t n = xs[axis];
  const bool log = a.op->kind == OpKind::LogSoftmax;
  const Buf& x = *a.in[0];
  parallel_rows(outer * inner, [&](std::int64_t r) {
    const std::int64_t base = (r / inner) * n * inner + r % inner;
    const auto at = [&](std::int64_t i) { return static_cast<std::size_t>(base + i * inner); };
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[at(i)]));
    std::vector<double> p(static_cast<std::size_t>(n));
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i)
      s += p[static_cast<std::size_t>(i)] = std::exp(x[at(i)] - m);
    double dot = 0;  // softmax: sum dy*y; log-softmax: sum dy
    for (std::int64_t i = 0; i < n; ++i) {
      p[static_cast<std::size_t>(i)] /= s;
      dot += log ? dy[at(i)] : dy[at(i)] * p[static_cast<std::size_t>(i)];
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const double pi = p[static_cast<std::size_t>(i)];
      (*dx)[at(i)] += static_cast<float>(log ? dy[at(i)] - pi * dot : pi * (dy[at(i)] - dot));
    }
  });
}

// LayerNorm / RMSNorm over the dims from `axis` on: with x̂ = (x - mean)·inv
// and g = dy·scale, dx = inv·(g - mean(g) - x̂·mean(g·x̂)) (RMSNorm drops
// mean(g)); dscale = Σ dy·x̂, dbias = Σ dy over the rows.
void b_norm(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t outer = 1, n = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= xs[d];
  for (std::size_t d = axis; d < xs.size(); ++d) n *= xs[d];
  const double eps = a.op->attrs.get_float("epsilon", 1e-5);
  const bool rms = a.op->kind == OpKind::RMSNorm;
  const Buf& x = *a.in[0];
  const Buf* scale = a.in.size() > 1 ? a.in[1] : nullptr;
  Buf* dscale = dx.size() > 1 ? dx[1] : nullptr;
  Buf* dbias = dx.size() > 2 ? dx[2] : nullptr;
  std::vector<double> gs(dscale != nullptr ? dscale->size() : 0, 0.0);
  std::vector<double> gb(dbias != nullptr ? dbias->size() : 0, 0.0);
  std::vector<double> xhat(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < outer; ++r) {
    const auto base = static_cast<std::size_t>(r * n);
    double mean = 0, sq = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += x[base + static_cast<std::size_t>(i)];
    mean = rms ? 0 : mean / static_cast<double>(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = x[base + static_cast<std::size_t>(i)] - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
    double mean_g = 0, mean_gx = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      xhat[i] = (x[base + i] - mean) * inv;
      g[i] = dy[base + i] * (scale != nullptr ? (*scale)[i % scale->size()] : 1.0f);
      mean_g += g[i];
      mean_gx += g[i] * xhat[i];
      if (dscale != nullptr) gs[i % gs.size()] += dy[base + i] * xhat[i];
      if (dbias != nullptr) gb[i % gb.size()] += dy[base + i];
    }
    mean_g = rms ? 0 : mean_g / static_cast<double>(n);
    mean_gx /= static_cast<double>(n);
    if (dx[0] == nullptr) continue;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
      (*dx[0])[base + i] += static_cast<float>(inv * (g[i] - mean_g - xhat[i] * mean_gx));
  }
  for (std::size_t i = 0; i < gs.size(); ++i) (*dscale)[i] += static_cast<float>(gs[i]);
  for (std::size_t i = 0; i < gb.size(); ++i) (*dbias)[i] += static_cast<float>(gb[i]);
}

// One GEMM of the backward pass, on the GPU where the forward ran there.
void run_gemm(const KernelArgs& a, const GemmBatch& g, const float* x, std::size_t x_n,
              const float* y, std::size_t y_n, float* out, std::size_t out_n) {
  if (a.use_gpu) {
    gemm_gpu(g, x, x_n, y, y_n, out, out_n);
  } else {
    gemm_cpu(g, x, y, out);
  }
}

// Whether no two batch entries share a block of the operand (offsets off).
bool distinct(std::vector<std::int64_t> off) {
  std::sort(off.begin(), off.end());
  return std::adjacent_find(off.begin(), off.end()) == off.end();
}

// Whether the entries are consecutive blocks of `block` elements (entry i
// at i·block): their rows then stack into one matrix.
bool stacked(const std::vector<std::int64_t>& off, std::int64_t block) {
  for (std::size_t i = 0; i < off.size(); ++i)
    if (off[i] != static_cast<std::int64_t>(i) * block) return false;
  return true;
}

// Adds into `grad` (an operand's gradient, `size` elements) the GEMM `g`
// of the gradients' formula, whose output entries land at the operand's
// offsets g.c_off. Entries with blocks of their own are one batched GEMM;
// entries sharing a block (a broadcast operand) are each computed apart and
// summed in entry order.
void add_gemm(const KernelArgs& a, GemmBatch g, const float* x, std::size_t x_n, const float* y,
              std::size_t y_n, Buf* grad) {
  const std::size_t size = grad->size();
  if (distinct(g.c_off)) {
    Buf out(size, 0.0f);
    run_gemm(a, g, x, x_n, y, y_n, out.data(), size);
    for (std::size_t i = 0; i < size; ++i) (*grad)[i] += out[i];
    return;
  }
  std::vector<double> sum(size, 0.0);
  const auto block = static_cast<std::size_t>(g.m * g.n);
  Buf out(block);
  GemmBatch one = g;
  for (std::size_t e = 0; e < g.c_off.size(); ++e) {
    one.a_off = {g.a_off[e]};
    one.b_off = {g.b_off[e]};
    one.c_off = {0};
    run_gemm(a, one, x, x_n, y, y_n, out.data(), block);
    const auto at = static_cast<std::size_t>(g.c_off[e]);
    for (std::size_t i = 0; i < block; ++i) sum[at + i] += out[i];
  }
  for (std::size_t i = 0; i < size; ++i) (*grad)[i] += static_cast<float>(sum[i]);
}

// C = op(A)·op(B) per batch entry (A m×k, B k×n after op): dA = dC·op(B)ᵀ
// and dB = op(A)ᵀ·dC, each a GEMM of the executor's kernel (so the
// backward runs at the forward's rate, on its threads), summed over the
// entries that share a broadcast operand. A weight shared by every entry
// of a batched input (x[b, s, h]·W[h, f]) is one GEMM over the stacked
// rows: dW = Xᵀ·dY with the b·s rows as the inner dimension.
void b_matmul(const KernelArgs& a, const Buf& dy, Buf* da, Buf* db) {
  const GemmBatch g = matmul_batch(a);
  const Buf& A = *a.in[0];
  const Buf& B = *a.in[1];
  if (da != nullptr) {
    GemmBatch d;  // dA (as stored) = dC·op(B)ᵀ, or op(B)·dCᵀ when A is transposed
    d.c_off = g.a_off;
    if (!g.trans_a) {
      d.m = g.m, d.n = g.k, d.k = g.n, d.trans_a = false, d.trans_b = !g.trans_b;
      d.a_off = g.c_off, d.b_off = g.b_off;
      add_gemm(a, d, dy.data(), dy.size(), B.data(), B.size(), da);
    } else {
      d.m = g.k, d.n = g.m, d.k = g.n, d.trans_a = g.trans_b, d.trans_b = true;
      d.a_off = g.b_off, d.b_off = g.c_off;
      add_gemm(a, d, B.data(), B.size(), dy.data(), dy.size(), da);
    }
  }
  if (db == nullptr) return;
  GemmBatch d;  // dB (as stored) = op(A)ᵀ·dC, or dCᵀ·op(A) when B is transposed
  d.c_off = g.b_off;
  const auto entries = static_cast<std::int64_t>(g.c_off.size());
  const bool one_weight = entries > 1 && !g.trans_a &&
                          std::all_of(g.b_off.begin(), g.b_off.end(),
                                      [&](std::int64_t o) { return o == g.b_off[0]; }) &&
                          stacked(g.a_off, g.m * g.k) && stacked(g.c_off, g.m * g.n);
  // Stacked rows: one entry whose inner dimension is every entry's rows.
  const std::int64_t rows = one_weight ? entries * g.m : g.m;
  const std::vector<std::int64_t> a_off = one_weight ? std::vector<std::int64_t>{0} : g.a_off;
  const std::vector<std::int64_t> c_off = one_weight ? std::vector<std::int64_t>{0} : g.c_off;
  if (one_weight) d.c_off = {g.b_off[0]};
  if (!g.trans_b) {
    d.m = g.k, d.n = g.n, d.k = rows, d.trans_a = !g.trans_a, d.trans_b = false;
    d.a_off = a_off, d.b_off = c_off;
    add_gemm(a, d, A.data(), A.size(), dy.data(), dy.size(), db);
  } else {
    d.m = g.n, d.n = g.k, d.k = rows, d.trans_a = true, d.trans_b = g.trans_a;
    d.a_off = c_off, d.b_off = a_off;
    add_gemm(a, d, dy.data(), dy.size(), A.data(), A.size(), db);
  }
}

// Every term of the einsum's sum in turn: each operand's gradient gets dy
// times the other operands' factors at that point (repeated letters included).
void b_einsum(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const EinsumLoops e = einsum_loops(a);
  const std::string& letters = e.letters;
  const std::vector<std::int64_t>& extent = e.extent;
  const auto& stride = e.stride;
  const std::int64_t total = e.total;
  const std::int64_t inner = e.inner;
  const std::size_t nin = stride.size();
  std::vector<std::vector<double>> g(nin);
  for (std::size_t j = 0; j < nin; ++j) g[j].assign(dx[j] != nullptr ? a.in[j]->size() : 0, 0.0);
  std::vector<std::int64_t> off(nin);
  for (std::int64_t p = 0; p < total; ++p) {
    std::int64_t rest = p;
    std::fill(off.begin(), off.end(), 0);
    for (std::size_t l = letters.size(); l-- > 0;) {
      const std::int64_t c = rest % extent[l];
      rest /= extent[l];
      for (std::size_t j = 0; j < nin; ++j) off[j] += c * stride[j][l];
    }
    const double d = dy[static_cast<std::size_t>(p / inner)];
    for (std::size_t j = 0; j < nin; ++j) {
      if (dx[j] == nullptr) continue;
      double prod = d;
      for (std::size_t i = 0; i < nin; ++i) {
        if (i != j) prod *= (*a.in[i])[static_cast<std::size_t>(off[i])];
      }
      g[j][static_cast<std::size_t>(off[j])] += prod;
    }
  }
  for (std::size_t j = 0; j < nin; ++j) {
    for (std::size_t i = 0; i < g[j].size(); ++i) (*dx[j])[i] += static_cast<float>(g[j][i]);
  }
}

// Rows of the table picked by the indices get dy back (rows held elsewhere: nothing).
void b_gather(const KernelArgs& a, const Buf& dy, Buf* dt) {
  if (dt == nullptr) return;
  const Shape& ts = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", 0), ts.size()));
  std::int64_t pre = 1, post = 1;
  for (std::size_t d = 0; d < axis; ++d) pre *= ts[d];
  for (std::size_t d = axis + 1; d < ts.size(); ++d) post *= ts[d];
  const std::int64_t v_local = ts[axis];
  const std::int64_t v_full = a.full_in_shapes[0][axis];
  const std::int64_t n_idx = numel(a.in_shapes[1]);
  const Buf& idx = *a.in[1];
  for (std::int64_t r = 0; r < pre * n_idx; ++r) {
    const std::int64_t p = r / n_idx, q = r % n_idx;
    auto gi = static_cast<std::int64_t>(idx[static_cast<std::size_t>(q)]);
    if (gi < 0) gi += v_full;
    const std::int64_t row = gi - a.gather_offset;
    if (row < 0 || row >= v_local) continue;
    for (std::int64_t h = 0; h < post; ++h) {
      (*dt)[static_cast<std::size_t>((p * v_local + row) * post + h)] +=
          dy[static_cast<std::size_t>(r * post + h)];
    }
  }
}

void b_transpose(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const TransposeIndex index(*a.op, a.in_shapes[0], a.out_shapes[0]);
  parallel_rows(numel(a.out_shapes[0]), [&](std::int64_t o) {
    (*dx)[static_cast<std::size_t>(index.source(o))] += dy[static_cast<std::size_t>(o)];
  });
}

// Sum and mean spread dy over what they reduced; max sends it to the first
// element that holds the maximum (the cut of a reduced dim is refused, so the
// block's maximum is the tensor's).
void b_reduce(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const ReduceIndex index(*a.op, a.in_shapes[0], a.full_in_shapes[0]);
  const double count = index.count;
  const Buf& x = *a.in[0];
  std::vector<std::size_t> out_of(x.size());
  for (std::int64_t i = 0; i < numel(a.in_shapes[0]); ++i)
    out_of[static_cast<std::size_t>(i)] = static_cast<std::size_t>(index.target(i));
  if (a.op->kind != OpKind::ReduceMax) {
    const double f = a.op->kind == OpKind::ReduceMean ? 1.0 / count : 1.0;
    for (std::size_t i = 0; i < x.size(); ++i) (*dx)[i] += static_cast<float>(dy[out_of[i]] * f);
    return;
  }
  std::vector<float> best(dy.size(), -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < x.size(); ++i) best[out_of[i]] = std::max(best[out_of[i]], x[i]);
  std::vector<bool> given(dy.size(), false);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (given[out_of[i]] || x[i] != best[out_of[i]]) continue;
    given[out_of[i]] = true;
    (*dx)[i] += dy[out_of[i]];
  }
}

void b_split(const KernelArgs& a, const std::vector<const Buf*>& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Shape& xs = a.in_shapes[0];
  const auto [axis, outer, inner] = axis_span(*a.op, xs);
  std::int64_t start = 0;
  for (std::size_t j = 0; j < dy.size(); ++j) {
    const std::int64_t n = a.out_shapes[j][axis];
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t i = 0; i < n * inner; ++i) {
        (*dx)[static_cast<std::size_t>((o * xs[axis] + start) * inner + i)] +=
            (*dy[j])[static_cast<std::size_t>(o * n * inner + i)];
      }
    }
    start += n;
  }
}

// Each input gets its range of the concat axis back.
void b_concat(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const Shape& ys = a.out_shapes[0];
  const auto [axis, outer, inner] = axis_span(*a.op, ys);
  std::int64_t start = 0;
  for (std::size_t j = 0; j < a.in.size(); ++j) {
    const std::int64_t n = a.in_shapes[j][axis];
    if (j < dx.size() && dx[j] != nullptr) {
      for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t i = 0; i < n * inner; ++i) {
          (*dx[j])[static_cast<std::size_t>(o * n * inner + i)] +=
              dy[static_cast<std::size_t>((o * ys[axis] + start) * inner + i)];
        }
      }
    }
    start += n;
  }
}

// The elements a Slice took get dy back; the others nothing.
void b_slice(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  for_each_sliced(a, [&](std::size_t o, std::size_t i) { (*dx)[i] += dy[o]; });
}

// d loss / d logit = (softmax - one-hot(label)) times the row's weight
// (dy, divided by the full row count for "mean"). With the class dim cut the
// softmax uses the whole row's log-sum-exp the forward pass gathered.
void b_cross_entropy(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Shape& ls = a.in_shapes[0];
  const std::int64_t c = ls.back();
  const std::int64_t rows = numel(ls) / std::max<std::int64_t>(c, 1);
  const std::int64_t classes = a.full_in_shapes[0].back();
  const Buf& x = *a.in[0];
  const Buf& labels = *a.in[1];
  const std::string reduction = a.op->attrs.get_string("reduction", "mean");
  const double full_rows =
      static_cast<double>(ir::num_elements(a.full_in_shapes[0])) / static_cast<double>(classes);
  parallel_rows(rows, [&](std::int64_t r) {
    const auto base = static_cast<std::size_t>(r * c);
    double lse = 0;
    if (a.row_lse != nullptr) {
      lse = (*a.row_lse)[static_cast<std::size_t>(r)];
    } else {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t i = 0; i < c; ++i)
        m = std::max(m, static_cast<double>(x[base + static_cast<std::size_t>(i)]));
      double s = 0;
      for (std::int64_t i = 0; i < c; ++i) s += std::exp(x[base + static_cast<std::size_t>(i)] - m);
      lse = m + std::log(s);
    }
    const double w = reduction == "none"   ? dy[static_cast<std::size_t>(r)]
                     : reduction == "mean" ? dy[0] / full_rows
                                           : dy[0];
    const std::int64_t label =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(labels[static_cast<std::size_t>(r)]), 0,
                                 classes - 1) -
        a.class_offset;
    for (std::int64_t i = 0; i < c; ++i) {
      const auto at = base + static_cast<std::size_t>(i);
      const double p = std::exp(x[at] - lse) - (i == label ? 1.0 : 0.0);
      (*dx)[at] += static_cast<float>(w * p);
    }
  });
}

// Per query row, with p the attention weights and dy the output's gradient:
// dV += p·dy, dp = dy·Vᵀ, ds = p·(dp - Σ p·dp), dQ += ds·K·scale,
// dK += dsᵀ·Q·scale, and an additive mask gets ds. Serial: rows share K and V.
void b_attention(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const AttentionBlock g = attention_block(a);
  const Buf& q = *a.in[0];
  const Buf& k = *a.in[1];
  const Buf& v = *a.in[2];
  Buf* dmask = dx.size() > 3 && !g.bool_mask ? dx[3] : nullptr;
  std::vector<double> p(static_cast<std::size_t>(g.nt)), dp(p.size());
  for (std::int64_t r = 0; r < g.nb * g.nh * g.ns; ++r) {
    const std::int64_t bh = r / g.ns;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t t = 0; t < g.nt; ++t) {
      p[static_cast<std::size_t>(t)] = attention_score(g, q, k, r, t);
      m = std::max(m, p[static_cast<std::size_t>(t)]);
    }
    if (std::isinf(m)) continue;  // a fully hidden row outputs zeros
    double sum = 0;
    for (auto& x : p) sum += x = std::exp(x - m);
    double dot = 0;
    for (std::int64_t t = 0; t < g.nt; ++t) {
      const auto ti = static_cast<std::size_t>(t);
      p[ti] /= sum;
      double acc = 0;
      for (std::int64_t e = 0; e < g.ne; ++e) {
        const auto vi = static_cast<std::size_t>((bh * g.nt + t) * g.ne + e);
        const double d = dy[static_cast<std::size_t>(r * g.ne + e)];
        acc += d * v[vi];
        if (dx[2] != nullptr) (*dx[2])[vi] += static_cast<float>(p[ti] * d);
      }
      dp[ti] = acc;
      dot += p[ti] * acc;
    }
    for (std::int64_t t = 0; t < g.nt; ++t) {
      const auto ti = static_cast<std::size_t>(t);
      const double ds = p[ti] * (dp[ti] - dot);
      if (ds == 0) continue;
      for (std::int64_t d = 0; d < g.nd; ++d) {
        const auto qi = static_cast<std::size_t>(r * g.nd + d);
        const auto ki = static_cast<std::size_t>((bh * g.nt + t) * g.nd + d);
        if (dx[0] != nullptr) (*dx[0])[qi] += static_cast<float>(ds * g.scale * k[ki]);
        if (dx[1] != nullptr) (*dx[1])[ki] += static_cast<float>(ds * g.scale * q[qi]);
      }
      if (dmask != nullptr) {
        const std::int64_t s = r % g.ns, h = bh % g.nh, b = bh / g.nh;
        const auto mi =
            static_cast<std::size_t>(b * g.ms[0] + h * g.ms[1] + s * g.ms[2] + t * g.ms[3]);
        (*dmask)[mi] += static_cast<float>(ds);
      }
    }
  }
}

void b_copy(const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  for (std::size_t i = 0; i < dy.size(); ++i) (*dx)[i] += dy[i];
}

}  // namespace

void run_backward_kernel(const KernelArgs& a, const std::vector<const Buf*>& dy,
                         const std::vector<Buf*>& dx) {
  const OpKind k = a.op->kind;
  const Buf& d0 = *dy.at(0);
  const auto in = [&](std::size_t j) { return j < dx.size() ? dx[j] : nullptr; };
  if (ir::is_unary_elementwise(k) || k == OpKind::Cast || k == OpKind::Dropout)
    return b_unary(a, d0, in(0));
  if (ir::is_binary_elementwise(k)) return b_binary(a, d0, in(0), in(1));
  switch (k) {
    case OpKind::BiasAdd: return b_bias_add(a, d0, in(0), in(1));
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return b_softmax(a, d0, in(0));
    case OpKind::LayerNorm:
    case OpKind::RMSNorm: return b_norm(a, d0, dx);
    case OpKind::MatMul:
    case OpKind::BatchMatMul: return b_matmul(a, d0, in(0), in(1));
    case OpKind::Einsum: return b_einsum(a, d0, dx);
    case OpKind::Gather: return b_gather(a, d0, in(0));
    case OpKind::Transpose: return b_transpose(a, d0, in(0));
    case OpKind::Reshape:
    case OpKind::Flatten:
    case OpKind::Squeeze:
    case OpKind::Unsqueeze: return b_copy(d0, in(0));
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax: return b_reduce(a, d0, in(0));
    case OpKind::Attention: return b_attention(a, d0, dx);
    case OpKind::Split: return b_split(a, dy, in(0));
    case OpKind::Concat: return b_concat(a, d0, dx);
    case OpKind::Slice: return b_slice(a, d0, in(0));
    case OpKind::OneHot: return;  // integer indices: no gradient
    case OpKind::SoftmaxCrossEntropy: return b_cross_entropy(a, d0, in(0));
    case OpKind::Conv2D: return b_conv2d(a, d0, dx);
    case OpKind::MaxPool:
    case OpKind::AvgPool: return b_pool(a, d0, in(0));
    case OpKind::GlobalAvgPool: return b_global_avg_pool(a, d0, in(0));
    case OpKind::BatchNorm: return b_batch_norm(a, d0, dx);
    default: throw Error(Errc::kInternal, "no backward kernel for " + a.op->type);
  }
}

}  // namespace recsearch::exec::detail
