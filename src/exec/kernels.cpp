// SPDX-License-Identifier: Apache-2.0
// CPU kernels of the executor (exec/kernels.hpp). Each kernel sees one
// rank's blocks with local shapes; parallel loops split only the outermost
// independent index, so every output element is summed in one fixed order
// whatever the thread count.
#include "exec/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {
using ir::OpKind;
using ir::Shape;

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (const auto d : s) n *= d;
  return n;
}

std::int64_t norm_axis(std::int64_t axis, std::size_t rank) {
  return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

std::vector<std::int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<std::int64_t> st(out.size(), 0);
  std::int64_t stride = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    const std::size_t o = out.size() - s.size() + i;
    st[o] = s[i] == 1 && out[o] != 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

std::vector<std::int64_t> row_major_strides(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

BroadcastIndex::BroadcastIndex(const Shape& x, const Shape& y, const Shape& out_shape)
    : out(out_shape), sx(broadcast_strides(x, out_shape)), sy(broadcast_strides(y, out_shape)) {}

std::pair<std::int64_t, std::int64_t> BroadcastIndex::operands(std::int64_t i) const {
  std::int64_t rest = i, ox = 0, oy = 0;
  for (std::size_t d = out.size(); d-- > 0;) {
    const std::int64_t c = rest % out[d];
    rest /= out[d];
    ox += c * sx[d];
    oy += c * sy[d];
  }
  return {ox, oy};
}

TransposeIndex::TransposeIndex(const ir::Operator& op, const Shape& in, const Shape& out_shape)
    : out(out_shape) {
  std::vector<std::int64_t> perm;
  if (const auto p = op.attrs.get_ints("perm")) {
    perm = *p;
  } else {
    for (std::size_t d = in.size(); d-- > 0;) perm.push_back(static_cast<std::int64_t>(d));
  }
  const std::vector<std::int64_t> in_stride = row_major_strides(in);
  for (std::size_t d = 0; d < out.size(); ++d)
    stride.push_back(in_stride[static_cast<std::size_t>(norm_axis(perm[d], in.size()))]);
}

std::int64_t TransposeIndex::source(std::int64_t o) const {
  std::int64_t rest = o, off = 0;
  for (std::size_t d = out.size(); d-- > 0;) {
    off += (rest % out[d]) * stride[d];
    rest /= out[d];
  }
  return off;
}

ReduceIndex::ReduceIndex(const ir::Operator& op, const Shape& in_shape, const Shape& full_in)
    : in(in_shape), reduced(in_shape.size(), true) {
  if (const auto axes = op.attrs.get_ints("axes")) {
    std::fill(reduced.begin(), reduced.end(), false);
    for (const auto ax : *axes) reduced[static_cast<std::size_t>(norm_axis(ax, in.size()))] = true;
  }
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (reduced[d]) {
      count *= static_cast<double>(full_in[d]);
    } else {
      kept.push_back(in[d]);
    }
  }
}

std::int64_t ReduceIndex::target(std::int64_t i) const {
  std::int64_t rest = i, out = 0, mul = 1;
  for (std::size_t d = in.size(); d-- > 0;) {
    const std::int64_t c = rest % in[d];
    rest /= in[d];
    if (!reduced[d]) {
      out += c * mul;
      mul *= in[d];
    }
  }
  return out;
}

AxisSpan axis_span(const ir::Operator& op, const Shape& s) {
  AxisSpan span;
  span.axis = static_cast<std::size_t>(norm_axis(op.attrs.get_int("axis", 0), s.size()));
  for (std::size_t d = 0; d < span.axis; ++d) span.outer *= s[d];
  for (std::size_t d = span.axis + 1; d < s.size(); ++d) span.inner *= s[d];
  return span;
}

float unary(OpKind k, float x) {
  switch (k) {
    case OpKind::ReLU: return x > 0 ? x : 0.0f;
    case OpKind::GeLU: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case OpKind::SiLU: return x / (1.0f + std::exp(-x));
    case OpKind::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case OpKind::Tanh: return std::tanh(x);
    case OpKind::Exp: return std::exp(x);
    case OpKind::Log: return std::log(x);
    case OpKind::Sqrt: return std::sqrt(x);
    case OpKind::Neg: return -x;
    default: return x;  // Identity, Dropout (inference)
  }
}

namespace {

float binary(OpKind k, float x, float y) {
  switch (k) {
    case OpKind::Add: return x + y;
    case OpKind::Sub: return x - y;
    case OpKind::Mul: return x * y;
    case OpKind::Div: return x / y;
    case OpKind::Pow: return std::pow(x, y);
    case OpKind::Maximum: return std::max(x, y);
    case OpKind::Minimum: return std::min(x, y);
    default: return 0.0f;
  }
}

void k_unary(const KernelArgs& a) {
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  const OpKind kind = a.op->kind;
  if (kind == OpKind::Cast) {
    const std::string to = a.op->attrs.get_string("to", "f32");
    const bool integer = to[0] == 'i' || to[0] == 'u';
    const bool boolean = to == "bool";
    for (std::size_t i = 0; i < x.size(); ++i) {
      y[i] = boolean ? (x[i] != 0.0f ? 1.0f : 0.0f) : integer ? std::trunc(x[i]) : x[i];
    }
    return;
  }
  if (kind == OpKind::GeLU && a.op->attrs.get_string("approximate", "none") == "tanh") {
    parallel_rows(static_cast<std::int64_t>(x.size()), [&](std::int64_t i) {
      const double v = x[static_cast<std::size_t>(i)];
      y[static_cast<std::size_t>(i)] = static_cast<float>(
          0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    });
    return;
  }
  if (a.use_gpu && unary_gpu(kind, x.data(), y.data(), x.size())) return;
  parallel_rows(static_cast<std::int64_t>(x.size()), [&](std::int64_t i) {
    y[static_cast<std::size_t>(i)] = unary(kind, x[static_cast<std::size_t>(i)]);
  });
}

void k_binary(const KernelArgs& a) {
  const BroadcastIndex index(a.in_shapes[0], a.in_shapes[1], a.out_shapes[0]);
  const Buf& x = *a.in[0];
  const Buf& y = *a.in[1];
  Buf& z = *a.out[0];
  const OpKind kind = a.op->kind;
  parallel_rows(numel(a.out_shapes[0]), [&](std::int64_t i) {
    const auto [ox, oy] = index.operands(i);
    z[static_cast<std::size_t>(i)] =
        binary(kind, x[static_cast<std::size_t>(ox)], y[static_cast<std::size_t>(oy)]);
  });
}

void k_bias_add(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t inner = 1;
  for (std::size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const std::int64_t c = xs[axis];
  const Buf& x = *a.in[0];
  const Buf& b = *a.in[1];
  Buf& y = *a.out[0];
  parallel_rows(numel(xs), [&](std::int64_t i) {
    y[static_cast<std::size_t>(i)] =
        x[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>((i / inner) % c)];
  });
}

void k_softmax(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= xs[d];
  for (std::size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const std::int64_t n = xs[axis];
  const bool log = a.op->kind == OpKind::LogSoftmax;
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  parallel_rows(outer * inner, [&](std::int64_t r) {
    const std::int64_t base = (r / inner) * n * inner + r % inner;
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < n; ++i)
      m = std::max(m, x[static_cast<std::size_t>(base + i * inner)]);
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i)
      s += std::exp(static_cast<double>(x[static_cast<std::size_t>(base + i * inner)] - m));
    for (std::int64_t i = 0; i < n; ++i) {
      const auto at = static_cast<std::size_t>(base + i * inner);
      y[at] = log ? static_cast<float>(x[at] - m - std::log(s))
                  : static_cast<float>(std::exp(static_cast<double>(x[at] - m)) / s);
    }
  });
}

void k_norm(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), xs.size()));
  std::int64_t outer = 1, n = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= xs[d];
  for (std::size_t d = axis; d < xs.size(); ++d) n *= xs[d];
  const double eps = a.op->attrs.get_float("epsilon", 1e-5);
  const bool rms = a.op->kind == OpKind::RMSNorm;
  const Buf& x = *a.in[0];
  const Buf* scale = a.in.size() > 1 ? a.in[1] : nullptr;
  const Buf* bias = a.in.size() > 2 ? a.in[2] : nullptr;
  Buf& y = *a.out[0];
  parallel_rows(outer, [&](std::int64_t r) {
    const auto base = static_cast<std::size_t>(r * n);
    double mean = 0, sq = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += x[base + static_cast<std::size_t>(i)];
    mean /= static_cast<double>(n);
    if (rms) mean = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = x[base + static_cast<std::size_t>(i)] - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto at = base + static_cast<std::size_t>(i);
      double v = (x[at] - mean) * inv;
      if (scale != nullptr) v *= (*scale)[static_cast<std::size_t>(i) % scale->size()];
      if (bias != nullptr) v += (*bias)[static_cast<std::size_t>(i) % bias->size()];
      y[at] = static_cast<float>(v);
    }
  });
}

}  // namespace

GemmBatch matmul_batch(const KernelArgs& a) {
  const Shape& as = a.in_shapes[0];
  const Shape& bs = a.in_shapes[1];
  const Shape& os = a.out_shapes[0];
  const bool ta = as.size() >= 2 && a.op->attrs.get_bool("transpose_a", false);
  const bool tb = bs.size() >= 2 && a.op->attrs.get_bool("transpose_b", false);
  GemmBatch g;
  g.trans_a = ta;
  g.trans_b = tb;
  const std::size_t ra = as.size(), rb = bs.size();
  if (ra == 1) {
    g.m = 1;
    g.k = as[0];
  } else {
    g.m = ta ? as[ra - 1] : as[ra - 2];
    g.k = ta ? as[ra - 2] : as[ra - 1];
  }
  g.n = rb == 1 ? 1 : (tb ? bs[rb - 2] : bs[rb - 1]);
  const Shape a_batch(as.begin(), as.end() - (ra >= 2 ? 2 : 1));
  const Shape b_batch(bs.begin(), bs.end() - (rb >= 2 ? 2 : 1));
  const std::size_t out_batch_rank = os.size() - (ra >= 2 ? 1 : 0) - (rb >= 2 ? 1 : 0);
  const Shape o_batch(os.begin(), os.begin() + static_cast<std::ptrdiff_t>(out_batch_rank));
  const BroadcastIndex batch(a_batch, b_batch, o_batch);
  const std::int64_t batches = numel(o_batch);
  for (std::int64_t i = 0; i < batches; ++i) {
    const auto [oa, ob] = batch.operands(i);
    g.a_off.push_back(oa * g.m * g.k);
    g.b_off.push_back(ob * g.k * g.n);
    g.c_off.push_back(i * g.m * g.n);
  }
  return g;
}

namespace {

void k_matmul(const KernelArgs& a) {
  const GemmBatch g = matmul_batch(a);
  if (a.use_gpu) {
    gemm_gpu(g, a.in[0]->data(), a.in[0]->size(), a.in[1]->data(), a.in[1]->size(),
             a.out[0]->data(), a.out[0]->size());
  } else {
    gemm_cpu(g, a.in[0]->data(), a.in[1]->data(), a.out[0]->data());
  }
}

}  // namespace

std::optional<Equation> parse_equation(std::string eq) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const auto arrow = eq.find("->");
  if (arrow == std::string::npos || eq.find('.') != std::string::npos) return std::nullopt;
  Equation e;
  e.out = eq.substr(arrow + 2);
  std::string lhs = eq.substr(0, arrow);
  std::size_t start = 0;
  for (;;) {
    const auto comma = lhs.find(',', start);
    e.in.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return e;
}

EinsumLoops einsum_loops(const KernelArgs& a) {
  const auto eq = parse_equation(a.op->attrs.get_string("equation", ""));
  if (!eq) throw Error(Errc::kInternal, "einsum equation unreadable at run time");
  std::map<char, std::int64_t> size;
  for (std::size_t j = 0; j < eq->in.size(); ++j) {
    for (std::size_t d = 0; d < eq->in[j].size(); ++d) size[eq->in[j][d]] = a.in_shapes[j][d];
  }
  EinsumLoops e;
  e.letters = eq->out;
  for (const auto& [c, n] : size) {
    if (eq->out.find(c) == std::string::npos) e.letters += c;  // summed letters after the output's
  }
  e.n_out = eq->out.size();
  for (const char c : e.letters) {
    e.extent.push_back(size[c]);
    e.total *= size[c];
  }
  e.stride.assign(eq->in.size(), std::vector<std::int64_t>(e.letters.size(), 0));
  for (std::size_t j = 0; j < eq->in.size(); ++j) {
    std::int64_t s = 1;
    for (std::size_t d = eq->in[j].size(); d-- > 0;) {
      e.stride[j][e.letters.find(eq->in[j][d])] += s;
      s *= a.in_shapes[j][d];
    }
  }
  for (std::size_t l = e.n_out; l < e.letters.size(); ++l) e.inner *= e.extent[l];
  return e;
}

namespace {

void k_einsum(const KernelArgs& a) {
  const EinsumLoops e = einsum_loops(a);
  const std::size_t n_out = e.n_out;
  const std::vector<std::int64_t>& extent = e.extent;
  const auto& stride = e.stride;
  const std::string& letters = e.letters;
  const std::int64_t inner = e.inner;
  Buf& y = *a.out[0];
  parallel_rows(numel(a.out_shapes[0]), [&](std::int64_t o) {
    std::vector<std::int64_t> base(stride.size(), 0);
    std::int64_t rest = o;
    for (std::size_t l = n_out; l-- > 0;) {
      const std::int64_t c = rest % extent[l];
      rest /= extent[l];
      for (std::size_t j = 0; j < base.size(); ++j) base[j] += c * stride[j][l];
    }
    double acc = 0;
    for (std::int64_t r = 0; r < inner; ++r) {
      std::int64_t rr = r;
      double prod = 1;
      for (std::size_t j = 0; j < base.size(); ++j) {
        std::int64_t off = base[j], q = rr;
        for (std::size_t l = letters.size(); l-- > n_out;) {
          off += (q % extent[l]) * stride[j][l];
          q /= extent[l];
        }
        prod *= (*a.in[j])[static_cast<std::size_t>(off)];
      }
      acc += prod;
    }
    y[static_cast<std::size_t>(o)] = static_cast<float>(acc);
  });
}

void k_gather(const KernelArgs& a) {
  const Shape& ts = a.in_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", 0), ts.size()));
  std::int64_t pre = 1, post = 1;
  for (std::size_t d = 0; d < axis; ++d) pre *= ts[d];
  for (std::size_t d = axis + 1; d < ts.size(); ++d) post *= ts[d];
  const std::int64_t v_local = ts[axis];
  const std::int64_t v_full = a.full_in_shapes[0][axis];
  const std::int64_t n_idx = numel(a.in_shapes[1]);
  const Buf& t = *a.in[0];
  const Buf& idx = *a.in[1];
  Buf& y = *a.out[0];
  parallel_rows(pre * n_idx, [&](std::int64_t r) {
    const std::int64_t p = r / n_idx, q = r % n_idx;
    auto g = static_cast<std::int64_t>(idx[static_cast<std::size_t>(q)]);
    if (g < 0) g += v_full;
    const std::int64_t row = g - a.gather_offset;
    for (std::int64_t h = 0; h < post; ++h) {
      y[static_cast<std::size_t>(r * post + h)] =
          row >= 0 && row < v_local ? t[static_cast<std::size_t>((p * v_local + row) * post + h)]
                                    : 0.0f;
    }
  });
}

void k_transpose(const KernelArgs& a) {
  const TransposeIndex index(*a.op, a.in_shapes[0], a.out_shapes[0]);
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  parallel_rows(numel(a.out_shapes[0]), [&](std::int64_t o) {
    y[static_cast<std::size_t>(o)] = x[static_cast<std::size_t>(index.source(o))];
  });
}

void k_reduce(const KernelArgs& a) {
  const ReduceIndex index(*a.op, a.in_shapes[0], a.full_in_shapes[0]);
  const double count = index.count;
  const bool max = a.op->kind == OpKind::ReduceMax;
  std::vector<double> acc(static_cast<std::size_t>(numel(index.kept)),
                          max ? -std::numeric_limits<double>::infinity() : 0.0);
  const Buf& x = *a.in[0];
  for (std::int64_t i = 0; i < numel(a.in_shapes[0]); ++i) {
    double& s = acc[static_cast<std::size_t>(index.target(i))];
    s = max ? std::max(s, static_cast<double>(x[static_cast<std::size_t>(i)]))
            : s + x[static_cast<std::size_t>(i)];
  }
  Buf& y = *a.out[0];
  for (std::size_t i = 0; i < acc.size(); ++i) {
    y[i] = static_cast<float>(a.op->kind == OpKind::ReduceMean ? acc[i] / count : acc[i]);
  }
}

// Splits x along `axis` into the outputs, in order, by their (local) sizes.
void k_split(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const auto [axis, outer, inner] = axis_span(*a.op, xs);
  const Buf& x = *a.in[0];
  std::int64_t start = 0;
  for (std::size_t j = 0; j < a.out.size(); ++j) {
    const std::int64_t n = a.out_shapes[j][axis];
    Buf& y = *a.out[j];
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto src = x.begin() + (o * xs[axis] + start) * inner;
      std::copy(src, src + n * inner, y.begin() + o * n * inner);
    }
    start += n;
  }
}

// Joins the inputs along `axis` (never cut: each block holds the whole axis).
void k_concat(const KernelArgs& a) {
  const Shape& ys = a.out_shapes[0];
  const auto [axis, outer, inner] = axis_span(*a.op, ys);
  Buf& y = *a.out[0];
  std::int64_t start = 0;
  for (std::size_t j = 0; j < a.in.size(); ++j) {
    const std::int64_t n = a.in_shapes[j][axis];
    const Buf& x = *a.in[j];
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto src = x.begin() + o * n * inner;
      std::copy(src, src + n * inner, y.begin() + (o * ys[axis] + start) * inner);
    }
    start += n;
  }
}

void k_slice(const KernelArgs& a) {
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  for_each_sliced(a, [&](std::size_t o, std::size_t i) { y[o] = x[i]; });
}

// One-hot of integer indices (negative ones count from the depth's end, as
// in ONNX; out of range: all off); the depth dim may be cut (depth_offset).
void k_one_hot(const KernelArgs& a) {
  const Shape& ys = a.out_shapes[0];
  const auto axis = static_cast<std::size_t>(norm_axis(a.op->attrs.get_int("axis", -1), ys.size()));
  const std::int64_t depth = a.op->attrs.get_int("depth", 0);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= ys[d];
  for (std::size_t d = axis + 1; d < ys.size(); ++d) inner *= ys[d];
  const std::int64_t n = ys[axis];
  const Buf& idx = *a.in[0];
  Buf& y = *a.out[0];
  parallel_rows(outer * inner, [&](std::int64_t r) {
    const std::int64_t o = r / inner, i = r % inner;
    auto c = static_cast<std::int64_t>(idx[static_cast<std::size_t>(r)]);
    if (c < 0) c += depth;
    for (std::int64_t k = 0; k < n; ++k) {
      y[static_cast<std::size_t>((o * n + k) * inner + i)] = c == k + a.depth_offset ? 1.0f : 0.0f;
    }
  });
}

// Cross-entropy of logits [..., C] against class indices [...]: per row,
// logsumexp - logit[label]; "mean" divides by the full batch, so a block's
// sum is its partial share.
void k_cross_entropy(const KernelArgs& a) {
  const Shape& ls = a.in_shapes[0];
  const std::int64_t c = ls.back();
  const std::int64_t rows = numel(ls) / std::max<std::int64_t>(c, 1);
  const Buf& x = *a.in[0];
  const Buf& labels = *a.in[1];
  const std::string reduction = a.op->attrs.get_string("reduction", "mean");
  std::vector<double> loss(static_cast<std::size_t>(rows));
  parallel_rows(rows, [&](std::int64_t r) {
    const auto base = static_cast<std::size_t>(r * c);
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < c; ++i)
      m = std::max(m, static_cast<double>(x[base + static_cast<std::size_t>(i)]));
    double s = 0;
    for (std::int64_t i = 0; i < c; ++i) s += std::exp(x[base + static_cast<std::size_t>(i)] - m);
    auto label = static_cast<std::int64_t>(labels[static_cast<std::size_t>(r)]);
    label = std::clamp<std::int64_t>(label, 0, c - 1);
    loss[static_cast<std::size_t>(r)] = m + std::log(s) - x[base + static_cast<std::size_t>(label)];
  });
  Buf& y = *a.out[0];
  if (reduction == "none") {
    for (std::size_t i = 0; i < loss.size(); ++i) y[i] = static_cast<float>(loss[i]);
    return;
  }
  double sum = 0;
  for (const double l : loss) sum += l;
  const double full_rows =
      ir::num_elements(a.full_in_shapes[0]) / static_cast<double>(a.full_in_shapes[0].back());
  y[0] = static_cast<float>(reduction == "mean" ? sum / full_rows : sum);
}

}  // namespace

AttentionBlock attention_block(const KernelArgs& a) {
  const Shape& qs = a.in_shapes[0];
  const Shape& ks = a.in_shapes[1];
  const Shape& vs = a.in_shapes[2];
  AttentionBlock g;
  g.nb = qs[0], g.nh = qs[1], g.ns = qs[2], g.nd = qs[3], g.nt = ks[2], g.ne = vs[3];
  // Keys longer than queries (a cached prefix) shift the causal diagonal right.
  const std::int64_t shift = a.full_in_shapes[1][2] - a.full_in_shapes[0][2];
  g.first_query = a.query_offset + shift;
  g.causal = a.op->attrs.get_bool("causal", false);
  g.mask = a.in.size() > 3 ? a.in[3] : nullptr;
  if (g.mask != nullptr) {
    g.ms = broadcast_strides(a.in_shapes[3], Shape{g.nb, g.nh, g.ns, g.nt});
    g.bool_mask = a.bool_mask;
  }
  g.scale = 1.0 / std::sqrt(static_cast<double>(g.nd));
  return g;
}

// Scaled score of query row r (= (b*nh + h)*ns + s) against key t, with the mask applied;
// -inf where causality or a boolean mask hides the key.
double attention_score(const AttentionBlock& g, const Buf& q, const Buf& k, std::int64_t r,
                       std::int64_t t) {
  const std::int64_t s = r % g.ns, bh = r / g.ns, h = bh % g.nh, b = bh / g.nh;
  if (g.causal && t > s + g.first_query) return -std::numeric_limits<double>::infinity();
  double dot = 0;
  for (std::int64_t d = 0; d < g.nd; ++d) {
    dot += static_cast<double>(q[static_cast<std::size_t>(r * g.nd + d)]) *
           k[static_cast<std::size_t>((bh * g.nt + t) * g.nd + d)];
  }
  double x = dot * g.scale;
  if (g.mask == nullptr) return x;
  const std::vector<std::int64_t>& ms = g.ms;
  const auto mi = static_cast<std::size_t>(b * ms[0] + h * ms[1] + s * ms[2] + t * ms[3]);
  const float mv = (*g.mask)[mi];
  if (!g.bool_mask) return x + mv;
  return mv == 0.0f ? -std::numeric_limits<double>::infinity() : x;
}

namespace {

// One query row: scores, softmax (a fully hidden row gives zeros), then the weighted sum of V.
void attention_row(const AttentionBlock& g, const KernelArgs& a, std::int64_t r) {
  const Buf& q = *a.in[0];
  const Buf& k = *a.in[1];
  const Buf& v = *a.in[2];
  Buf& y = *a.out[0];
  const std::int64_t bh = r / g.ns;
  std::vector<double> w(static_cast<std::size_t>(g.nt));
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t t = 0; t < g.nt; ++t) {
    const double x = attention_score(g, q, k, r, t);
    w[static_cast<std::size_t>(t)] = x;
    m = std::max(m, x);
  }
  double sum = 0;
  for (auto& x : w) {
    x = std::isinf(m) ? 0.0 : std::exp(x - m);
    sum += x;
  }
  for (std::int64_t e = 0; e < g.ne; ++e) {
    double acc = 0;
    for (std::int64_t t = 0; t < g.nt; ++t) {
      acc +=
          w[static_cast<std::size_t>(t)] * v[static_cast<std::size_t>((bh * g.nt + t) * g.ne + e)];
    }
    y[static_cast<std::size_t>(r * g.ne + e)] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
  }
}

void k_attention(const KernelArgs& a) {
  const AttentionBlock g = attention_block(a);
  parallel_rows(g.nb * g.nh * g.ns, [&](std::int64_t r) { attention_row(g, a, r); });
}

}  // namespace

SliceDims slice_dims(const ir::Operator& op, const ir::Shape& full_in) {
  SliceDims sd;
  sd.start.assign(full_in.size(), 0);
  sd.step.assign(full_in.size(), 1);
  const auto starts = op.attrs.get_ints("starts");
  const auto ends = op.attrs.get_ints("ends");
  if (!starts || !ends) return sd;
  std::vector<std::int64_t> axes(starts->size());
  for (std::size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<std::int64_t>(i);
  if (const auto ax = op.attrs.get_ints("axes")) axes = *ax;
  const auto steps = op.attrs.get_ints("steps");
  for (std::size_t i = 0; i < starts->size(); ++i) {
    const auto d = static_cast<std::size_t>(norm_axis(axes[i], full_in.size()));
    const std::int64_t dim = full_in[d];
    const std::int64_t step = steps ? (*steps)[i] : 1;
    std::int64_t start = (*starts)[i], end = (*ends)[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (step > 0) {
      start = std::clamp<std::int64_t>(start, 0, dim);
      end = std::clamp<std::int64_t>(end, 0, dim);
    } else {
      start = std::clamp<std::int64_t>(start, 0, dim - 1);
    }
    // The whole dim in order is no slice: the block's own extent is kept.
    if (step == 1 && start == 0 && end == dim) continue;
    sd.start[d] = start;
    sd.step[d] = step;
  }
  return sd;
}

void run_kernel(const KernelArgs& a) {
  const OpKind k = a.op->kind;
  if (ir::is_unary_elementwise(k) || k == OpKind::Cast || k == OpKind::Dropout) return k_unary(a);
  if (ir::is_binary_elementwise(k)) return k_binary(a);
  switch (k) {
    case OpKind::BiasAdd: return k_bias_add(a);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return k_softmax(a);
    case OpKind::LayerNorm:
    case OpKind::RMSNorm: return k_norm(a);
    case OpKind::MatMul:
    case OpKind::BatchMatMul: return k_matmul(a);
    case OpKind::Einsum: return k_einsum(a);
    case OpKind::Gather: return k_gather(a);
    case OpKind::Transpose: return k_transpose(a);
    case OpKind::Reshape:
    case OpKind::Flatten:
    case OpKind::Squeeze:
    case OpKind::Unsqueeze: *a.out[0] = *a.in[0]; return;
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax: return k_reduce(a);
    case OpKind::Attention: return k_attention(a);
    case OpKind::Split: return k_split(a);
    case OpKind::Concat: return k_concat(a);
    case OpKind::Slice: return k_slice(a);
    case OpKind::OneHot: return k_one_hot(a);
    case OpKind::SoftmaxCrossEntropy: return k_cross_entropy(a);
    case OpKind::Conv2D: return k_conv2d(a);
    case OpKind::MaxPool:
    case OpKind::AvgPool: return k_pool(a);
    case OpKind::GlobalAvgPool: return k_global_avg_pool(a);
    case OpKind::BatchNorm: return k_batch_norm(a);
    default: throw Error(Errc::kInternal, "no kernel for " + a.op->type);
  }
}

std::string kernel_support(const ir::Graph& g, const ir::Operator& op) {
  const OpKind k = op.kind;
  if (ir::is_unary_elementwise(k) || ir::is_binary_elementwise(k)) return {};
  // gen's megatron attention fuses the scores' scale and causal mask into
  // its Softmax (attributes); k_softmax runs a plain softmax.
  if ((k == OpKind::Softmax || k == OpKind::LogSoftmax) &&
      (op.attrs.get_float("scale", 1.0) != 1.0 || op.attrs.get_bool("causal", false)))
    return "a softmax with a fused scale or causal mask has no kernel";
  switch (k) {
    case OpKind::Cast:
    case OpKind::Dropout:
    case OpKind::BiasAdd:
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::LayerNorm:
    case OpKind::RMSNorm:
    case OpKind::MatMul:
    case OpKind::BatchMatMul:
    case OpKind::Gather:
    case OpKind::Transpose:
    case OpKind::Reshape:
    case OpKind::Flatten:
    case OpKind::Squeeze:
    case OpKind::Unsqueeze:
    case OpKind::ReduceSum:
    case OpKind::ReduceMean:
    case OpKind::ReduceMax:
    case OpKind::Attention:
    case OpKind::Split:
    case OpKind::Concat:
      if ((k == OpKind::ReduceSum || k == OpKind::ReduceMean || k == OpKind::ReduceMax) &&
          op.inputs.size() > 1) {
        return "axes given as an input";
      }
      return {};
    case OpKind::Slice:
      if (op.inputs.size() > 1 || !op.attrs.get_ints("starts"))
        return "slice bounds given as inputs have no kernel";
      return {};
    case OpKind::OneHot:
      if (op.inputs.size() > 1) return "depth and values given as inputs have no kernel";
      if (op.attrs.has("values")) return "one-hot values other than 0 and 1 have no kernel";
      return {};
    case OpKind::SoftmaxCrossEntropy: {
      if (op.inputs.size() != 2) return "class weights have no kernel";
      const ir::Tensor& labels = g.tensor(op.inputs[1]);
      if (labels.shape == g.tensor(op.inputs[0]).shape) return "soft labels have no kernel";
      return {};
    }
    case OpKind::Conv2D:
    case OpKind::AvgPool:
    case OpKind::GlobalAvgPool: return {};
    case OpKind::MaxPool:
      if (op.outputs.size() > 1) return "MaxPool's indices output has no kernel";
      return {};
    case OpKind::BatchNorm:
      if (op.inputs.size() != 3 && op.inputs.size() != 5)
        return "BatchNorm needs scale and bias (and both running statistics or neither)";
      if (op.outputs.size() > 1) return "BatchNorm's running-statistics outputs have no kernel";
      return {};
    case OpKind::Einsum: {
      const auto eq = parse_equation(op.attrs.get_string("equation", ""));
      if (!eq) return "einsum equations with '...' have no kernel";
      if (eq->in.size() > 2) return "einsum with more than 2 operands has no kernel";
      return {};
    }
    default: return "no kernel for type '" + op.type + "'";
  }
}

}  // namespace recsearch::exec::detail
