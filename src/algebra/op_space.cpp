// SPDX-License-Identifier: Apache-2.0
// Public entry points of the dimension algebra: dispatch from operator kind
// to the per-kind builders (kinds_*.cpp), the parallel build over a whole
// graph, output-shape inference and the legality test of a loop cut.
#include "recsearch/algebra/op_space.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>

#include "algebra/space_builder.hpp"
#include "recsearch/error.hpp"

namespace recsearch::algebra {

std::string_view dim_role_name(DimRole r) noexcept {
  switch (r) {
    case DimRole::Parallel: return "parallel";
    case DimRole::Reduction: return "reduction";
    case DimRole::Window: return "window";
    case DimRole::Whole: return "whole";
  }
  return "unknown";
}

LoopName::LoopName(std::string_view name) {
  if (name.size() > kMax) {
    throw Error(Errc::kInternal, "loop name '" + std::string(name) + "' is longer than " +
                                     std::to_string(kMax) + " characters");
  }
  std::copy(name.begin(), name.end(), chars_.begin());
  size_ = static_cast<std::uint8_t>(name.size());
}

namespace {

// The whole block of lists `maps`: [count, end of each list's dims], then
// every list's dims.
template <class Lists>
std::vector<int> operand_block(const Lists& maps) {
  std::vector<int> block{static_cast<int>(maps.size())};
  std::size_t end = 0;
  for (const auto& m : maps) block.push_back(static_cast<int>(end += m.size()));
  for (const auto& m : maps) block.insert(block.end(), m.begin(), m.end());
  return block;
}

}  // namespace

OperandLoops::OperandLoops(const std::vector<int>& block) {
  if (block.empty() || block[0] == 0) return;  // no operands: no block
  block_ = std::make_unique_for_overwrite<int[]>(block.size());
  std::copy(block.begin(), block.end(), block_.get());
}

OperandLoops::OperandLoops(std::initializer_list<std::initializer_list<int>> maps)
    : OperandLoops(operand_block(maps)) {}

OperandLoops::OperandLoops(const std::vector<std::vector<int>>& maps)
    : OperandLoops(operand_block(maps)) {}

OperandLoops::OperandLoops(std::span<const std::size_t> ranks) {
  const std::size_t n = ranks.size();
  if (n == 0) return;
  std::size_t dims = 0;
  for (const std::size_t r : ranks) dims += r;
  block_ = std::make_unique_for_overwrite<int[]>(1 + n + dims);
  block_[0] = static_cast<int>(n);
  std::size_t end = 0;
  for (std::size_t j = 0; j < n; ++j) block_[1 + j] = static_cast<int>(end += ranks[j]);
  std::fill_n(block_.get() + 1 + n, dims, kUnmapped);
}

OperandLoops::OperandLoops(const OperandLoops& other) {
  const std::size_t n = other.length();
  if (n == 0) return;
  block_ = std::make_unique_for_overwrite<int[]>(n);
  std::copy_n(other.block_.get(), n, block_.get());
}

OperandLoops& OperandLoops::operator=(const OperandLoops& other) {
  if (this != &other) *this = OperandLoops(other);
  return *this;
}

bool operator==(const OperandLoops& a, const OperandLoops& b) noexcept {
  const std::size_t n = a.length();
  return n == b.length() && std::equal(a.block_.get(), a.block_.get() + n, b.block_.get());
}

std::span<const int> OperandLoops::at(std::size_t j) const {
  if (j >= size()) throw std::out_of_range("OperandLoops::at: no operand " + std::to_string(j));
  return (*this)[j];
}

void OperandLoops::set(std::size_t j, std::size_t d, int loop) {
  const std::span<const int> dims = at(j);
  if (d >= dims.size()) {
    throw std::out_of_range("OperandLoops::set: operand " + std::to_string(j) + " has no dim " +
                            std::to_string(d));
  }
  block_[static_cast<std::size_t>(dims.data() - block_.get()) + d] = loop;
}

int OpSpace::find_loop(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < loops.size(); ++i) {
    if (loops[i].name == name) return static_cast<int>(i);
  }
  return kUnmapped;
}

std::int64_t OpSpace::outer_of(bool output, std::size_t operand, std::size_t dim) const noexcept {
  for (const StridedDim& s : strided) {
    if (s.output == output && s.operand == operand && s.dim == dim) return s.outer;
  }
  return 1;
}

std::int64_t produced_outer(const ir::Graph& g, const std::vector<OpSpace>& spaces, ir::TensorId t,
                            std::size_t d) noexcept {
  const ir::OpId prod = g.tensor(t).producer;
  if (prod == ir::kNone || prod >= spaces.size()) return 1;
  const std::vector<ir::TensorId>& outs = g.op(prod).outputs;
  for (std::size_t j = 0; j < outs.size(); ++j)
    if (outs[j] == t) return spaces[prod].outer_of(true, j, d);
  return 1;
}

bool OpSpace::cuts_inner_factor(int loop) const noexcept {
  for (const StridedDim& s : strided) {
    const auto& maps = s.output ? outputs : inputs;
    if (s.operand < maps.size() && s.dim < maps[s.operand].size() &&
        maps[s.operand][s.dim] == loop) {
      return true;
    }
  }
  return false;
}

// An Operator built outside a Graph keeps the default kind (Custom); its
// type string is then the only reliable description.
ir::OpKind detail::kind_of(const ir::Operator& op) noexcept {
  return op.kind != ir::OpKind::Custom ? op.kind : ir::parse_op_kind(op.type);
}

namespace {

using detail::kind_of;
using detail::SpaceBuilder;

void dispatch(SpaceBuilder& b) {
  using K = ir::OpKind;
  switch (b.kind()) {
    case K::MatMul:
    case K::BatchMatMul: return detail::build_matmul(b);
    case K::Einsum: return detail::build_einsum(b, "equation");
    case K::Attention: return detail::build_attention(b);
    case K::Conv2D: return detail::build_conv2d(b);
    case K::MaxPool:
    case K::AvgPool: return detail::build_pool(b);
    case K::GlobalAvgPool: return detail::build_global_avg_pool(b);
    case K::BatchNorm: return detail::build_batch_norm(b);
    case K::LayerNorm:
    case K::RMSNorm: return detail::build_layer_norm(b);
    case K::Softmax:
    case K::LogSoftmax: return detail::build_softmax(b);
    case K::Add:
    case K::Sub:
    case K::Mul:
    case K::Div:
    case K::Pow:
    case K::Maximum:
    case K::Minimum: return detail::build_binary(b);
    case K::BiasAdd: return detail::build_bias_add(b);
    case K::ReLU:
    case K::GeLU:
    case K::SiLU:
    case K::Sigmoid:
    case K::Tanh:
    case K::Exp:
    case K::Log:
    case K::Sqrt:
    case K::Neg:
    case K::Cast:
    case K::Dropout:
    case K::Identity: return detail::build_unary(b);
    case K::Reshape:
    case K::Flatten:
    case K::Squeeze:
    case K::Unsqueeze: return detail::build_reshape(b);
    case K::Transpose: return detail::build_transpose(b);
    case K::Concat: return detail::build_concat(b);
    case K::Split: return detail::build_split(b);
    case K::Slice: return detail::build_slice(b);
    case K::ReduceSum:
    case K::ReduceMean:
    case K::ReduceMax: return detail::build_reduce(b);
    case K::Gather: return detail::build_gather(b);
    case K::OneHot: return detail::build_one_hot(b);
    case K::SoftmaxCrossEntropy: return detail::build_softmax_cross_entropy(b);
    case K::Custom:
      if (b.has_attr("einsum")) return detail::build_einsum(b, "einsum");
      return detail::build_opaque(b);
  }
  return detail::build_opaque(b);
}

}  // namespace

OpSpace detail::build_raw_space(const ir::Graph& g, ir::OpId id) {
  const ir::Operator& op = g.op(id);
  SpaceBuilder b(g, op, kind_of(op), id, /*infer_only=*/false);
  dispatch(b);
  return b.take_space();
}

OpSpace build_op_space(const ir::Graph& g, ir::OpId id) {
  if (id >= g.num_operators()) {
    throw Error(Errc::kUsage, "operator id " + std::to_string(id) +
                                  " out of range (the graph has " +
                                  std::to_string(g.num_operators()) + " operators)");
  }
  OpSpace s = detail::build_raw_space(g, id);
  // The two reshapes of a merge region map it themselves (build_reshape);
  // its row operators are revised here, whatever their kind.
  if (const auto r = detail::merge_region(g, id)) {
    const auto it = std::find(r->chain.begin(), r->chain.end(), id);
    if (it != r->chain.end()) {
      detail::stride_chain_space(s, *r,
                                 r->row_inputs[static_cast<std::size_t>(it - r->chain.begin())]);
    }
  }
  return s;
}

std::vector<OpSpace> build_op_spaces(const ir::Graph& g) {
  const std::size_t n = g.num_operators();
  std::vector<OpSpace> spaces(n);
  // One slot per operator: whichever thread fails first, the error reported
  // is always the lowest operator id's, so output never depends on scheduling.
  std::vector<std::exception_ptr> errors(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 64),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t i = r.begin(); i != r.end(); ++i) {
                        try {
                          spaces[i] = build_op_space(g, static_cast<ir::OpId>(i));
                        } catch (...) {
                          errors[i] = std::current_exception();
                        }
                      }
                    });
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return spaces;
}

std::vector<std::optional<ir::Shape>> infer_output_shapes(const ir::Graph& g,
                                                          const ir::Operator& op) {
  // Paths name the operator when it is one of the graph's; an operator still
  // being assembled by a generator gets paths relative to itself.
  std::optional<ir::OpId> id;
  const auto ops = g.operators();
  // std::less: a total order even for pointers into different objects.
  const std::less<const ir::Operator*> before;
  if (!ops.empty() && !before(&op, ops.data()) && before(&op, ops.data() + ops.size())) {
    id = static_cast<ir::OpId>(&op - ops.data());
  }
  SpaceBuilder b(g, op, kind_of(op), id, /*infer_only=*/true);
  dispatch(b);
  return b.take_inferred();
}

bool can_cut(const ir::Graph& g, const ir::Operator& op, const OpSpace& s,
             const std::vector<std::int64_t>& splits, int loop, std::int64_t k) {
  if (s.opaque || k < 1 || loop < 0 || static_cast<std::size_t>(loop) >= s.loops.size()) {
    return false;
  }
  if (splits.size() != s.loops.size()) return false;
  const LoopDim& l = s.loops[static_cast<std::size_t>(loop)];
  if (l.role == DimRole::Whole) return false;
  const std::int64_t done = splits[static_cast<std::size_t>(loop)];
  const auto total = detail::checked_mul(done, k);
  if (done < 1 || !total) return false;
  // A cut needs at least one index per part: an empty loop is never cut.
  if (l.size < *total || l.size % *total != 0) return false;

  const auto dims_ok = [&](const std::vector<ir::TensorId>& tensors, const OperandLoops& maps) {
    if (maps.size() != tensors.size()) return false;
    for (std::size_t j = 0; j < tensors.size(); ++j) {
      if (tensors[j] >= g.num_tensors()) return false;
      const ir::Shape& shape = g.tensor(tensors[j]).shape;
      if (maps[j].size() != shape.size()) return false;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        if (maps[j][d] != loop) continue;
        if (shape[d] < *total || shape[d] % *total != 0) return false;
      }
    }
    return true;
  };
  return dims_ok(op.inputs, s.inputs) && dims_ok(op.outputs, s.outputs);
}

}  // namespace recsearch::algebra
