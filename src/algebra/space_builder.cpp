// SPDX-License-Identifier: Apache-2.0
// SpaceBuilder: operand access, path-carrying errors, attribute access and
// the output-shape check shared by every operator kind (see space_builder.hpp).
#include "algebra/space_builder.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace recsearch::algebra::detail {

std::optional<std::int64_t> checked_product(std::span<const std::int64_t> dims) noexcept {
  std::int64_t p = 1;
  for (const std::int64_t d : dims) {
    const auto next = checked_mul(p, d);
    if (!next) return std::nullopt;
    p = *next;
  }
  return p;
}

double product_d(std::span<const std::int64_t> dims) noexcept {
  double p = 1.0;
  for (const std::int64_t d : dims) p *= static_cast<double>(d);
  return p;
}

std::string fmt_shape(std::span<const std::int64_t> s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) r += ", ";
    r += std::to_string(s[i]);
  }
  r += "]";
  return r;
}

std::string indexed(std::string_view prefix, std::size_t i) {
  std::string r(prefix);
  r += std::to_string(i);
  return r;
}

std::string nchw_name(std::size_t rank, std::size_t d) {
  if (d == 0) return "n";
  if (d == 1) return "c";
  if (rank == 4) return d == 2 ? "h" : "w";
  return indexed("d", d);
}

std::optional<ir::Shape> broadcast(std::span<const std::int64_t> a, std::span<const std::int64_t> b,
                                   std::size_t* bad_a, std::size_t* bad_b) {
  const std::size_t r = std::max(a.size(), b.size());
  ir::Shape out(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    // Position i counted from the right in both operands.
    const bool has_a = i < a.size();
    const bool has_b = i < b.size();
    const std::int64_t da = has_a ? a[a.size() - 1 - i] : 1;
    const std::int64_t db = has_b ? b[b.size() - 1 - i] : 1;
    std::int64_t d = 0;
    if (da == db || db == 1) {
      d = da;
    } else if (da == 1) {
      d = db;
    } else {
      if (bad_a != nullptr) *bad_a = a.size() - 1 - i;
      if (bad_b != nullptr) *bad_b = b.size() - 1 - i;
      return std::nullopt;
    }
    out[r - 1 - i] = d;
  }
  return out;
}

// ---------------------------------------------------------------------------

SpaceBuilder::SpaceBuilder(const ir::Graph& g, const ir::Operator& op, ir::OpKind kind,
                           std::optional<ir::OpId> id, bool infer_only)
    : g_(g), op_(op), kind_(kind), id_(id), infer_only_(infer_only) {
  // Ids and shapes are checked here once so that kinds can index freely.
  const auto check_tensor = [&](ir::TensorId t, std::size_t j, bool is_input) {
    const auto p = [&] { return is_input ? in_path(j) : out_path(j); };
    if (t >= g_.num_tensors()) {
      fail(Errc::kUnknownName, p(),
           std::string(is_input ? "input" : "output") + " tensor id " + std::to_string(t) +
               " does not exist (the graph has " + std::to_string(g_.num_tensors()) + " tensors)");
    }
    const ir::Tensor& tt = g_.tensor(t);
    for (std::size_t d = 0; d < tt.shape.size(); ++d) {
      if (tt.shape[d] < 0) {
        fail(Errc::kShape, p(),
             "tensor '" + tt.name + "' " + fmt_shape(tt.shape) + " has negative dim " +
                 std::to_string(d));
      }
    }
  };
  std::vector<std::size_t> ranks(op_.inputs.size());
  for (std::size_t j = 0; j < op_.inputs.size(); ++j) {
    check_tensor(op_.inputs[j], j, true);
    ranks[j] = g_.tensor(op_.inputs[j]).shape.size();
  }
  space_.inputs = OperandLoops(ranks);
  ranks.assign(op_.outputs.size(), 0);
  if (!infer_only_) {
    for (std::size_t j = 0; j < op_.outputs.size(); ++j) {
      check_tensor(op_.outputs[j], j, false);
      ranks[j] = g_.tensor(op_.outputs[j]).shape.size();
    }
  }
  space_.outputs = OperandLoops(ranks);
  inferred_.resize(op_.outputs.size());
  // Most kinds add one loop per dim of their widest operand, and a
  // contraction one more (its k): reserving that up front builds the loop
  // list in one allocation rather than regrowing it 1, 2, 4 (three
  // allocations and two copies per operator at 10^6 operators).
  if (!infer_only_) {
    std::size_t rank = 0;
    for (std::size_t j = 0; j < space_.inputs.size(); ++j)
      rank = std::max(rank, space_.inputs[j].size());
    for (std::size_t j = 0; j < space_.outputs.size(); ++j)
      rank = std::max(rank, space_.outputs[j].size());
    space_.loops.reserve(rank + 1);
  }
}

const ir::Tensor& SpaceBuilder::in_tensor(std::size_t j) const {
  return g_.tensor(op_.inputs.at(j));
}

const ir::Tensor& SpaceBuilder::out_tensor(std::size_t j) const {
  if (infer_only_) {
    throw Error(Errc::kInternal, "output tensors are not available during shape inference", path());
  }
  return g_.tensor(op_.outputs.at(j));
}

std::string SpaceBuilder::path() const {
  return id_ ? "/operators/" + std::to_string(*id_) : std::string();
}
std::string SpaceBuilder::in_path(std::size_t j) const {
  return path() + "/inputs/" + std::to_string(j);
}
std::string SpaceBuilder::out_path(std::size_t j) const {
  return path() + "/outputs/" + std::to_string(j);
}
std::string SpaceBuilder::attr_path(std::string_view name) const {
  return path() + "/attrs/" + std::string(name);
}

std::string SpaceBuilder::describe_in(std::size_t j) const {
  const ir::Tensor& t = in_tensor(j);
  return "'" + t.name + "' " + fmt_shape(t.shape);
}
std::string SpaceBuilder::describe_out(std::size_t j) const {
  const ir::Tensor& t = out_tensor(j);
  return "'" + t.name + "' " + fmt_shape(t.shape);
}

void SpaceBuilder::fail(Errc code, const std::string& path, const std::string& msg) const {
  throw Error(code, op_.type + " '" + op_.name + "': " + msg, path);
}

namespace {
std::string count_range(std::size_t lo, std::size_t hi) {
  if (lo == hi) return std::to_string(lo);
  if (hi == static_cast<std::size_t>(-1)) return "at least " + std::to_string(lo);
  return std::to_string(lo) + " to " + std::to_string(hi);
}
}  // namespace

void SpaceBuilder::expect_inputs(std::size_t lo, std::size_t hi) const {
  const std::size_t n = op_.inputs.size();
  if (n < lo || n > hi) {
    fail(Errc::kSchema, path() + "/inputs",
         "expects " + count_range(lo, hi) + " inputs, got " + std::to_string(n));
  }
}

void SpaceBuilder::expect_outputs(std::size_t lo, std::size_t hi) const {
  const std::size_t n = op_.outputs.size();
  if (n < lo || n > hi) {
    fail(Errc::kSchema, path() + "/outputs",
         "expects " + count_range(lo, hi) + " outputs, got " + std::to_string(n));
  }
}

void SpaceBuilder::expect_in_rank(std::size_t j, std::int64_t rank, std::string_view what) const {
  if (in_rank(j) != rank) {
    fail_shape(in_path(j), std::string(what) + " " + describe_in(j) + " must have rank " +
                               std::to_string(rank));
  }
}

void SpaceBuilder::expect_in_min_rank(std::size_t j, std::int64_t rank,
                                      std::string_view what) const {
  if (in_rank(j) < rank) {
    fail_shape(in_path(j), std::string(what) + " " + describe_in(j) + " must have rank at least " +
                               std::to_string(rank));
  }
}

// Attrs getters report "/attrs/<name>"; re-root them at this operator.
#define RECSEARCH_REROOT(expr)         \
  try {                                \
    return expr;                       \
  } catch (const Error& e) {           \
    throw e.in_file(e.file(), path()); \
  }

bool SpaceBuilder::attr_bool(std::string_view name, bool def) const {
    RECSEARCH_REROOT(op_.attrs.get_bool(name, def))} std::int64_t
    SpaceBuilder::attr_int(std::string_view name, std::int64_t def) const {
        RECSEARCH_REROOT(op_.attrs.get_int(name, def))} std::string
    SpaceBuilder::attr_string(std::string_view name, std::string_view def)
        const {RECSEARCH_REROOT(op_.attrs.get_string(name, def))} std::optional<
            std::vector<std::int64_t>> SpaceBuilder::attr_ints(std::string_view name) const {
            RECSEARCH_REROOT(op_.attrs.get_ints(name))}
#undef RECSEARCH_REROOT

std::vector<std::int64_t> SpaceBuilder::attr_ints_n(std::string_view name, std::size_t n,
                                                    std::vector<std::int64_t> def,
                                                    std::int64_t min_value) const {
  auto v = attr_ints(name);
  if (!v) return def;
  if (v->size() != n) {
    fail_attr(name, "'" + std::string(name) + "' must have " + std::to_string(n) + " values, got " +
                        std::to_string(v->size()));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if ((*v)[i] < min_value) {
      fail_attr(name, "'" + std::string(name) + "' value " + std::to_string((*v)[i]) +
                          " at index " + std::to_string(i) +
                          " must be >= " + std::to_string(min_value));
    }
  }
  return *v;
}

std::int64_t SpaceBuilder::normalize_axis(std::int64_t axis, std::int64_t rank,
                                          std::string_view name) const {
  if (rank <= 0 || axis < -rank || axis >= rank) {
    fail_attr(name, "axis " + std::to_string(axis) + " in '" + std::string(name) +
                        "' is out of range for rank " + std::to_string(rank) +
                        (rank > 0 ? " (valid: " + std::to_string(-rank) + " to " +
                                        std::to_string(rank - 1) + ")"
                                  : std::string(" (no axes)")));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<std::int64_t> SpaceBuilder::normalize_axes(const std::vector<std::int64_t>& axes,
                                                       std::int64_t rank,
                                                       std::string_view name) const {
  std::vector<std::int64_t> r;
  r.reserve(axes.size());
  for (const std::int64_t a : axes) {
    const std::int64_t n = normalize_axis(a, rank, name);
    if (std::find(r.begin(), r.end(), n) != r.end()) {
      fail_attr(name,
                "axis " + std::to_string(n) + " appears twice in '" + std::string(name) + "'");
    }
    r.push_back(n);
  }
  return r;
}

void SpaceBuilder::set_inferred(std::size_t j, ir::Shape s) {
  if (j < inferred_.size()) inferred_[j] = std::move(s);
}

bool SpaceBuilder::outputs_checked() {
  if (infer_only_) return true;
  for (std::size_t j = 0; j < inferred_.size(); ++j) {
    if (!inferred_[j]) continue;
    const ir::Shape& have = out(j);
    if (have != *inferred_[j]) {
      fail_shape(out_path(j), "output " + std::to_string(j) + " " + describe_out(j) +
                                  " does not match the shape the inputs imply, " +
                                  fmt_shape(*inferred_[j]));
    }
  }
  return false;
}

std::int64_t SpaceBuilder::product_or_fail(std::span<const std::int64_t> dims,
                                           const std::string& path, std::string_view what) const {
  const auto p = checked_product(dims);
  if (!p) {
    fail_shape(path, std::string(what) + " " + fmt_shape(dims) +
                         " has more elements than a 64-bit count can hold");
  }
  return *p;
}

int SpaceBuilder::add_loop(std::string_view name, std::int64_t size, DimRole role,
                           std::int64_t halo) {
  if (halo > std::numeric_limits<std::int32_t>::max()) {
    fail_shape(in_path(0), "the window along " + std::string(name) + " exchanges " +
                               std::to_string(halo) + " rows per cut, more than 2^31 - 1");
  }
  space_.loops.push_back(LoopDim{LoopName(name), size, role, static_cast<std::int32_t>(halo)});
  return static_cast<int>(space_.loops.size() - 1);
}

void SpaceBuilder::map_in(std::size_t j, std::size_t dim, int loop) {
  space_.inputs.set(j, dim, loop);
}

void SpaceBuilder::map_out(std::size_t j, std::size_t dim, int loop) {
  space_.outputs.set(j, dim, loop);
}

}  // namespace recsearch::algebra::detail
