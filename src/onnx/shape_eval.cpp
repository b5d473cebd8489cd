// SPDX-License-Identifier: Apache-2.0
// Integer evaluation of exporters' shape computations (shape_eval.hpp).
// Each evaluator checks that its inputs look like the shape use it knows and
// gives up (nullopt) otherwise; the values are exact, so a folded constant
// is what the node would compute at run time.
#include "onnx/shape_eval.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <string_view>
#include <utility>

namespace recsearch::onnx_import {
namespace {

using TP = onnx::TensorProto;

std::int64_t int_attr(const onnx::NodeProto& n, std::string_view name, std::int64_t def) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name && a.type() == onnx::AttributeProto::INT) {
      return static_cast<std::int64_t>(a.i());
    }
  }
  return def;
}

std::optional<std::vector<std::int64_t>> ints_attr(const onnx::NodeProto& n,
                                                   std::string_view name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name && a.type() == onnx::AttributeProto::INTS)
      return std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
  }
  return std::nullopt;
}

// The elements [b, e) of a 1-D range of length len after ONNX's negative
// index wrap and clamping (e at least b).
std::pair<std::int64_t, std::int64_t> clamp_range(std::int64_t b, std::int64_t e,
                                                  std::int64_t len) {
  if (b < 0) b += len;
  if (e < 0) e += len;
  b = std::clamp<std::int64_t>(b, 0, len);
  e = std::clamp<std::int64_t>(e, b, len);
  return {b, e};
}

// Row-major strides of a shape.
std::vector<std::int64_t> strides_of(const ir::Shape& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// numpy broadcast of two shapes; nullopt when they do not broadcast.
std::optional<ir::Shape> broadcast_dims(const ir::Shape& a, const ir::Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  ir::Shape out(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = std::max(x, y);
  }
  return out;
}

// The element of t that broadcasts to flat index `flat` of a tensor of
// shape `out`.
std::int64_t broadcast_at(const IntTensor& t, const ir::Shape& out, std::int64_t flat) {
  const auto os = strides_of(out);
  const auto ts = strides_of(t.dims);
  const std::size_t off = out.size() - t.dims.size();
  std::int64_t at = 0;
  for (std::size_t d = 0; d < out.size(); ++d) {
    const std::int64_t i = (flat / os[d]) % out[d];
    if (d >= off && t.dims[d - off] != 1) at += i * ts[d - off];
  }
  return t.data[static_cast<std::size_t>(at)];
}

// Applies f elementwise over numpy-broadcast operands.
std::optional<IntTensor> broadcast_map(
    const std::vector<IntTensor>& in, std::int32_t elem,
    const std::function<std::optional<std::int64_t>(const std::vector<std::int64_t>&)>& f) {
  ir::Shape out;
  for (const auto& t : in) {
    const auto b = broadcast_dims(out, t.dims);
    if (!b) return std::nullopt;
    out = *b;
  }
  IntTensor r{out, {}, elem};
  const std::int64_t n = count_of(out);
  std::vector<std::int64_t> args(in.size());
  for (std::int64_t k = 0; k < n; ++k) {
    for (std::size_t j = 0; j < in.size(); ++j) args[j] = broadcast_at(in[j], out, k);
    const auto v = f(args);
    if (!v) return std::nullopt;
    r.data.push_back(*v);
  }
  return r;
}

std::optional<IntTensor> eval_shape(const onnx::NodeProto& n,
                                    const std::vector<std::optional<ir::Shape>>& in_shapes) {
  if (in_shapes.empty() || !in_shapes[0]) return std::nullopt;
  const auto& s = *in_shapes[0];
  const auto r = static_cast<std::int64_t>(s.size());
  const auto [start, end] = clamp_range(int_attr(n, "start", 0), int_attr(n, "end", r), r);
  IntTensor t{{end - start}, std::vector<std::int64_t>(s.begin() + start, s.begin() + end)};
  return t;
}

std::optional<IntTensor> eval_cast(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  const std::int64_t to = int_attr(n, "to", 0);
  if (to != TP::INT64 && to != TP::INT32 && to != TP::BOOL) return std::nullopt;
  IntTensor t = in[0];
  if (to == TP::BOOL) {
    for (auto& v : t.data) v = v != 0 ? 1 : 0;
  }
  t.elem = static_cast<std::int32_t>(to);
  return t;
}

std::optional<IntTensor> eval_gather(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  if (in.size() != 2 || in[0].dims.size() != 1 || int_attr(n, "axis", 0) != 0) return std::nullopt;
  IntTensor t{in[1].dims, {}, in[0].elem};
  const auto n0 = static_cast<std::int64_t>(in[0].data.size());
  for (std::int64_t i : in[1].data) {
    if (i < 0) i += n0;
    if (i < 0 || i >= n0) return std::nullopt;
    t.data.push_back(in[0].data[static_cast<std::size_t>(i)]);
  }
  return t;
}

// Squeeze / Unsqueeze: only the dims change, the values stay.
std::optional<IntTensor> eval_squeeze(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  auto axes = ints_attr(n, "axes");
  if (!axes && in.size() > 1) axes = in[1].data;
  const auto& x = in[0].dims;
  IntTensor t = in[0];
  if (n.op_type() == "Unsqueeze") {
    if (!axes) return std::nullopt;
    const auto r = static_cast<std::int64_t>(x.size() + axes->size());
    std::vector<bool> is_new(static_cast<std::size_t>(r), false);
    for (std::int64_t a : *axes) {
      if (a < 0) a += r;
      if (a < 0 || a >= r || is_new[static_cast<std::size_t>(a)]) return std::nullopt;
      is_new[static_cast<std::size_t>(a)] = true;
    }
    t.dims.clear();
    std::size_t k = 0;
    for (std::int64_t d = 0; d < r; ++d) t.dims.push_back(is_new[d] ? 1 : x[k++]);
    return t;
  }
  const auto r = static_cast<std::int64_t>(x.size());
  std::vector<bool> drop(x.size(), false);
  if (!axes) {
    for (std::size_t d = 0; d < x.size(); ++d) drop[d] = x[d] == 1;
  } else {
    for (std::int64_t a : *axes) {
      if (a < 0) a += r;
      if (a < 0 || a >= r || x[static_cast<std::size_t>(a)] != 1) return std::nullopt;
      drop[static_cast<std::size_t>(a)] = true;
    }
  }
  t.dims.clear();
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (!drop[d]) t.dims.push_back(x[d]);
  }
  return t;
}

std::optional<IntTensor> eval_concat(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  IntTensor t{{0}, {}, in[0].elem};
  if (in[0].dims.size() != 1) {
    // Rank > 1 only along axis 0 (the [k, 2] pad tables of F.pad).
    if (in[0].dims.empty() || int_attr(n, "axis", 0) != 0) return std::nullopt;
    t.dims = in[0].dims;
    t.dims[0] = 0;
  }
  for (const auto& x : in) {
    if (x.dims.size() != t.dims.size() || x.elem != t.elem) return std::nullopt;
    if (!std::equal(x.dims.begin() + 1, x.dims.end(), t.dims.begin() + 1)) return std::nullopt;
    t.data.insert(t.data.end(), x.data.begin(), x.data.end());
    t.dims[0] += x.dims[0];
  }
  return t;
}

// Slice along one axis of any rank, any step (F.pad reverses its pad table
// with step -1).
std::optional<IntTensor> eval_slice(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  const IntTensor& x = in[0];
  if (x.dims.empty()) return std::nullopt;
  std::optional<std::vector<std::int64_t>> starts = ints_attr(n, "starts");
  std::optional<std::vector<std::int64_t>> ends = ints_attr(n, "ends");
  std::vector<std::int64_t> axes = ints_attr(n, "axes").value_or(std::vector<std::int64_t>{0});
  std::vector<std::int64_t> steps{1};
  if (in.size() >= 3) {
    starts = in[1].data;
    ends = in[2].data;
    if (in.size() >= 4) axes = in[3].data;
    if (in.size() >= 5) steps = in[4].data;
  }
  if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || axes.size() != 1 ||
      steps.size() != 1 || steps[0] == 0)
    return std::nullopt;
  const auto r = static_cast<std::int64_t>(x.dims.size());
  std::int64_t axis = axes[0] < 0 ? axes[0] + r : axes[0];
  if (axis < 0 || axis >= r) return std::nullopt;
  const std::int64_t len = x.dims[static_cast<std::size_t>(axis)];
  const std::int64_t step = steps[0];
  std::int64_t b = (*starts)[0], e = (*ends)[0];
  if (b < 0) b += len;
  if (e < 0) e += len;
  std::vector<std::int64_t> picked;
  if (step > 0) {
    b = std::clamp<std::int64_t>(b, 0, len);
    e = std::clamp<std::int64_t>(e, 0, len);
    for (std::int64_t i = b; i < e; i += step) picked.push_back(i);
  } else {
    b = std::clamp<std::int64_t>(b, 0, len - 1);
    e = std::clamp<std::int64_t>(e, -1, len - 1);
    for (std::int64_t i = b; i > e; i += step) picked.push_back(i);
  }
  IntTensor t{x.dims, {}, x.elem};
  t.dims[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(picked.size());
  const auto xs = strides_of(x.dims);
  const auto ts = strides_of(t.dims);
  const std::int64_t total = count_of(t.dims);
  for (std::int64_t k = 0; k < total; ++k) {
    std::int64_t at = 0;
    for (std::size_t d = 0; d < t.dims.size(); ++d) {
      std::int64_t i = (k / ts[d]) % t.dims[d];
      if (static_cast<std::int64_t>(d) == axis) i = picked[static_cast<std::size_t>(i)];
      at += i * xs[d];
    }
    t.data.push_back(x.data[static_cast<std::size_t>(at)]);
  }
  return t;
}

// Reshape of a known tensor, with ONNX's 0 (copy) and -1 (infer) entries.
std::optional<IntTensor> eval_reshape(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  if (in.size() != 2 || in[1].dims.size() != 1) return std::nullopt;
  const bool allowzero = int_attr(n, "allowzero", 0) != 0;
  ir::Shape dims;
  std::int64_t infer_at = -1, known = 1;
  for (std::size_t d = 0; d < in[1].data.size(); ++d) {
    std::int64_t v = in[1].data[d];
    if (v == 0 && !allowzero) {
      if (d >= in[0].dims.size()) return std::nullopt;
      v = in[0].dims[d];
    }
    if (v == -1) {
      if (infer_at >= 0) return std::nullopt;
      infer_at = static_cast<std::int64_t>(d);
    } else if (v < 0) {
      return std::nullopt;
    } else {
      known *= v;
    }
    dims.push_back(v);
  }
  const auto total = static_cast<std::int64_t>(in[0].data.size());
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) return std::nullopt;
    dims[static_cast<std::size_t>(infer_at)] = total / known;
  }
  if (count_of(dims) != total) return std::nullopt;
  return IntTensor{dims, in[0].data, in[0].elem};
}

// Transpose of a 2-D table (F.pad turns [k, 2] pairs into ONNX's order).
std::optional<IntTensor> eval_transpose(const onnx::NodeProto& n,
                                        const std::vector<IntTensor>& in) {
  const IntTensor& x = in[0];
  if (x.dims.size() != 2) return std::nullopt;
  const auto perm = ints_attr(n, "perm").value_or(std::vector<std::int64_t>{1, 0});
  if (perm == std::vector<std::int64_t>{0, 1}) return x;
  if (perm != std::vector<std::int64_t>{1, 0}) return std::nullopt;
  IntTensor t{{x.dims[1], x.dims[0]}, {}, x.elem};
  for (std::int64_t j = 0; j < x.dims[1]; ++j) {
    for (std::int64_t i = 0; i < x.dims[0]; ++i)
      t.data.push_back(x.data[static_cast<std::size_t>(i * x.dims[1] + j)]);
  }
  return t;
}

// ConstantOfShape with an integer or boolean value (default: float 0,
// which is not an integer tensor).
std::optional<IntTensor> eval_constant_of_shape(const onnx::NodeProto& n,
                                                const std::vector<IntTensor>& in) {
  if (in[0].dims.size() != 1) return std::nullopt;
  std::int32_t elem = TP::FLOAT;
  std::int64_t value = 0;
  for (const auto& a : n.attribute()) {
    if (a.name() != "value" || !a.has_t()) continue;
    elem = a.t().data_type();
    const auto v = int_values(a.t());
    if (!v || v->size() != 1) return std::nullopt;
    value = (*v)[0];
  }
  if (elem != TP::INT64 && elem != TP::INT32 && elem != TP::BOOL) return std::nullopt;
  ir::Shape dims(in[0].data.begin(), in[0].data.end());
  for (const auto d : dims) {
    if (d < 0) return std::nullopt;
  }
  const std::int64_t count = count_of(dims);
  if (count > (std::int64_t{1} << 16)) return std::nullopt;
  return IntTensor{dims, std::vector<std::int64_t>(static_cast<std::size_t>(count), value), elem};
}

// Python-style integer modulo (ONNX Mod with fmod = 0 takes the divisor's
// sign); C's remainder with fmod = 1.
std::optional<std::int64_t> mod_of(std::int64_t x, std::int64_t y, bool fmod) {
  if (y == 0) return std::nullopt;
  std::int64_t m = x % y;
  if (!fmod && m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}

// Binary integer arithmetic and comparisons with numpy broadcasting.
std::optional<IntTensor> eval_binary(const onnx::NodeProto& n, const std::vector<IntTensor>& in) {
  const std::string& op = n.op_type();
  if (in.size() != 2 || in[0].elem != in[1].elem) return std::nullopt;
  const bool compare = op == "Equal" || op == "Less" || op == "Greater";
  const std::int32_t elem = compare ? static_cast<std::int32_t>(TP::BOOL) : in[0].elem;
  const bool fmod = int_attr(n, "fmod", 0) != 0;
  return broadcast_map(in, elem, [&](const std::vector<std::int64_t>& a) {
    const std::int64_t x = a[0], y = a[1];
    std::optional<std::int64_t> v;
    if (op == "Add") v = x + y;
    if (op == "Sub") v = x - y;
    if (op == "Mul") v = x * y;
    if (op == "Div" && y != 0) v = x / y;
    if (op == "Mod") v = mod_of(x, y, fmod);
    if (op == "Max") v = std::max(x, y);
    if (op == "Min") v = std::min(x, y);
    if (op == "Equal") v = x == y ? 1 : 0;
    if (op == "Less") v = x < y ? 1 : 0;
    if (op == "Greater") v = x > y ? 1 : 0;
    return v;
  });
}

// Where(cond, a, b): the expand(n, -1, -1) pattern picks the input's dims
// where the requested size is -1.
std::optional<IntTensor> eval_where(const std::vector<IntTensor>& in) {
  if (in.size() != 3 || in[1].elem != in[2].elem) return std::nullopt;
  return broadcast_map(in, in[1].elem, [](const std::vector<std::int64_t>& a) {
    return std::optional<std::int64_t>(a[0] != 0 ? a[1] : a[2]);
  });
}

std::optional<IntTensor> eval_unary(const std::string& op, const std::vector<IntTensor>& in) {
  IntTensor t = in[0];
  for (auto& v : t.data) {
    if (op == "Neg") v = -v;
    if (op == "Abs") v = v < 0 ? -v : v;
    if (op == "Not") v = v == 0 ? 1 : 0;
  }
  return t;
}

}  // namespace

std::int64_t count_of(const ir::Shape& dims) {
  std::int64_t n = 1;
  for (const auto d : dims) n *= d;
  return n;
}

std::optional<std::vector<std::int64_t>> int_values(const onnx::TensorProto& t) {
  std::vector<std::int64_t> v;
  const std::string& raw = t.raw_data();
  if (t.data_type() == TP::INT64) {
    if (t.int64_data_size() > 0)
      return std::vector<std::int64_t>(t.int64_data().begin(), t.int64_data().end());
    if (!raw.empty() && raw.size() % 8 == 0) {
      v.resize(raw.size() / 8);
      std::memcpy(v.data(), raw.data(), raw.size());  // little-endian hosts
      return v;
    }
  } else if (t.data_type() == TP::INT32 || t.data_type() == TP::BOOL) {
    if (t.int32_data_size() > 0)
      return std::vector<std::int64_t>(t.int32_data().begin(), t.int32_data().end());
    const std::size_t width = t.data_type() == TP::BOOL ? 1 : 4;
    if (!raw.empty() && raw.size() % width == 0) {
      for (std::size_t i = 0; i < raw.size(); i += width) {
        if (width == 1) {
          v.push_back(raw[i] != 0 ? 1 : 0);
        } else {
          std::int32_t w = 0;
          std::memcpy(&w, raw.data() + i, 4);
          v.push_back(w);
        }
      }
      return v;
    }
  }
  // An empty tensor (e.g. axes = []) has no payload at all.
  std::int64_t n = 1;
  for (const auto d : t.dims()) n *= d;
  if (n == 0 && (t.data_type() == TP::INT64 || t.data_type() == TP::INT32)) return v;
  return std::nullopt;
}

onnx::TensorProto to_tensor_proto(const IntTensor& r) {
  onnx::TensorProto t;
  t.set_data_type(r.elem);
  for (const auto d : r.dims) t.add_dims(d);
  for (const auto v : r.data) {
    if (r.elem == TP::INT64) {
      t.add_int64_data(v);
    } else {
      t.add_int32_data(static_cast<std::int32_t>(v));  // INT32 and BOOL
    }
  }
  return t;
}

std::optional<IntTensor> eval_int_node(const onnx::NodeProto& n, const std::vector<IntTensor>& in,
                                       const std::vector<std::optional<ir::Shape>>& in_shapes) {
  const std::string& op = n.op_type();
  if (op == "Shape") return eval_shape(n, in_shapes);
  if (op == "Size") {
    if (in_shapes.empty() || !in_shapes[0]) return std::nullopt;
    return IntTensor{{}, {count_of(*in_shapes[0])}};
  }
  if (in.empty()) return std::nullopt;
  if (op == "Identity") return in[0];
  if (op == "Neg" || op == "Abs" || op == "Not") return eval_unary(op, in);
  if (op == "Cast") return eval_cast(n, in);
  if (op == "Gather") return eval_gather(n, in);
  if (op == "Unsqueeze" || op == "Squeeze") return eval_squeeze(n, in);
  if (op == "Concat") return eval_concat(n, in);
  if (op == "Slice") return eval_slice(n, in);
  if (op == "Reshape") return eval_reshape(n, in);
  if (op == "Transpose") return eval_transpose(n, in);
  if (op == "ConstantOfShape") return eval_constant_of_shape(n, in);
  if (op == "Where") return eval_where(in);
  static const char* const kBinary[] = {"Add", "Sub", "Mul",   "Div",  "Mod",
                                        "Max", "Min", "Equal", "Less", "Greater"};
  if (std::find_if(std::begin(kBinary), std::end(kBinary),
                   [&](const char* b) { return op == b; }) != std::end(kBinary))
    return eval_binary(n, in);
  return std::nullopt;
}

}  // namespace recsearch::onnx_import
