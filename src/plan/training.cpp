// SPDX-License-Identifier: Apache-2.0
// Memory rules of training (plan/training.hpp): what each operator kind's
// backward keeps, which tensors recomputation drops, the bytes of parameter
// state per optimizer preset, and the microbatch graph.
//
// The saved-tensor table follows what autograd kernels keep (Korthikanti et
// al. 2022, section 4.1 counts the same tensors for a GPT layer: 34·s·b·h +
// 5·a·s²·b bytes): a matrix product keeps the operands the other operand's
// gradient needs, activations keep their input or output or a 1-byte mask,
// normalisations their input and per-row statistics, shape operators and
// additions nothing. A tensor kept by several consumers is kept once.
#include "recsearch/plan/training.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "recsearch/cost/cost_model.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::plan {
namespace {

using ir::OpKind;

bool is_data(const ir::Tensor& t) {
  return t.kind == ir::TensorKind::Activation || t.kind == ir::TensorKind::Input;
}

// Per tensor: kept whole by some backward, extra bytes per byte (masks,
// statistics) that producers add, and a mask that is needed only when the
// tensor itself is not kept (ReLU's: the sign of its kept output serves).
struct Keep {
  std::vector<std::uint8_t> whole;
  std::vector<float> extra;
  std::vector<float> unless_whole;
};

// Bytes per byte of a 1-byte-per-element mask of tensor t.
float mask_fraction(const ir::Tensor& t) {
  return 1.0F / static_cast<float>(ir::dtype_size(t.dtype));
}

// Bytes per byte of `per_row` bytes per row (last dim) of tensor t.
float row_stats_fraction(const ir::Tensor& t, double per_row) {
  if (t.shape.empty() || t.shape.back() <= 0) return 0.0F;
  return static_cast<float>(per_row / (static_cast<double>(t.shape.back()) *
                                       static_cast<double>(ir::dtype_size(t.dtype))));
}

// Contractions keep each operand that another operand's gradient needs
// (grads: ir::gradient_tensors).
void keep_contraction(const ir::Operator& op, std::size_t operands,
                      const std::vector<std::uint8_t>& grads, Keep& k) {
  const std::size_t n = std::min(operands, op.inputs.size());
  for (std::size_t j = 0; j < n; ++j) {
    bool other_needs = false;
    for (std::size_t i = 0; i < n; ++i)
      other_needs = other_needs || (i != j && grads[op.inputs[i]] != 0);
    if (other_needs) k.whole[op.inputs[j]] = 1;
  }
}

void keep_inputs(const ir::Operator& op, Keep& k) {
  for (const ir::TensorId t : op.inputs) k.whole[t] = 1;
}

void keep_outputs(const ir::Operator& op, Keep& k) {
  for (const ir::TensorId t : op.outputs) k.whole[t] = 1;
}

void add_output_mask(const ir::Graph& g, const ir::Operator& op, Keep& k) {
  for (const ir::TensorId t : op.outputs) k.extra[t] += mask_fraction(g.tensor(t));
}

// The saved-tensor table (docs/cost-model.md, Saved tensors).
void keep_of(const ir::Graph& g, const ir::Operator& op, const std::vector<std::uint8_t>& grads,
             Keep& k) {
  switch (op.kind) {
    case OpKind::MatMul:
    case OpKind::BatchMatMul:
    case OpKind::Einsum: keep_contraction(op, op.inputs.size(), grads, k); break;
    case OpKind::Conv2D: keep_contraction(op, 2, grads, k); break;  // the bias needs nothing
    case OpKind::Mul: keep_contraction(op, 2, grads, k); break;
    case OpKind::Attention: {
      // FlashAttention: q, k, v, the output and a float log-sum-exp per row.
      keep_inputs(op, k);
      keep_outputs(op, k);
      for (const ir::TensorId t : op.outputs) k.extra[t] += row_stats_fraction(g.tensor(t), 4.0);
      break;
    }
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Exp:
    case OpKind::Sqrt: keep_outputs(op, k); break;
    case OpKind::ReLU:
      for (const ir::TensorId t : op.outputs) k.unless_whole[t] = mask_fraction(g.tensor(t));
      break;
    case OpKind::Maximum:
    case OpKind::Minimum:
    case OpKind::Dropout: add_output_mask(g, op, k); break;
    case OpKind::GeLU:
    case OpKind::SiLU:
    case OpKind::Log:
    case OpKind::Pow:
    case OpKind::Div:
    case OpKind::MaxPool:
    case OpKind::Custom: keep_inputs(op, k); break;
    case OpKind::ReduceMax:
      keep_inputs(op, k);
      keep_outputs(op, k);
      break;
    case OpKind::LayerNorm:
    case OpKind::RMSNorm: {
      k.whole[op.inputs[0]] = 1;
      const double per_row = op.kind == OpKind::LayerNorm ? 8.0 : 4.0;  // mean, 1/std (f32)
      for (const ir::TensorId t : op.outputs)
        k.extra[t] += row_stats_fraction(g.tensor(t), per_row);
      break;
    }
    case OpKind::BatchNorm: k.whole[op.inputs[0]] = 1; break;
    case OpKind::Gather:
      if (op.inputs.size() > 1) k.whole[op.inputs[1]] = 1;  // the indices
      break;
    case OpKind::SoftmaxCrossEntropy: keep_inputs(op, k); break;  // probabilities, labels
    default: break;  // additions, shape operators, casts, reductions: nothing
  }
}

std::vector<float> saved_none(const ir::Graph& g, const std::vector<std::uint8_t>& grads) {
  const std::size_t n = g.num_tensors();
  Keep k{std::vector<std::uint8_t>(n, 0), std::vector<float>(n, 0), std::vector<float>(n, 0)};
  for (const ir::Operator& op : g.operators()) {
    // An operator whose outputs take no gradient runs no backward and
    // keeps nothing (an operator on the data alone).
    if (std::any_of(op.outputs.begin(), op.outputs.end(),
                    [&](ir::TensorId t) { return grads[t] != 0; }))
      keep_of(g, op, grads, k);
  }
  std::vector<float> saved(g.num_tensors(), 0.0F);
  for (std::size_t t = 0; t < saved.size(); ++t) {
    if (!is_data(g.tensor(static_cast<ir::TensorId>(t)))) continue;
    saved[t] = (k.whole[t] ? 1.0F : k.unless_whole[t]) + k.extra[t];
  }
  return saved;
}

// Elementwise steps between the two products of an attention core.
bool core_step(const ir::Graph& g, const ir::Operator& op) {
  switch (op.kind) {
    case OpKind::Softmax:
    case OpKind::Dropout:
    case OpKind::Cast:
    case OpKind::Identity: return true;
    case OpKind::Mul:
    case OpKind::Div:
    case OpKind::Add:
    case OpKind::Sub: {
      // A scale or a mask: at most one data operand.
      int data = 0;
      for (const ir::TensorId t : op.inputs) data += g.tensor(t).kind == ir::TensorKind::Activation;
      return data <= 1;
    }
    default: return false;
  }
}

bool is_product(OpKind k) { return k == OpKind::BatchMatMul || k == OpKind::Einsum; }

// Attention scores: a product of two activations larger than either.
bool scores_product(const ir::Graph& g, const ir::Operator& op) {
  if (!is_product(op.kind) || op.inputs.size() != 2 || op.outputs.size() != 1) return false;
  const double out = ir::num_elements(g.tensor(op.outputs[0]).shape);
  for (const ir::TensorId t : op.inputs) {
    const ir::Tensor& x = g.tensor(t);
    if (x.kind != ir::TensorKind::Activation || ir::num_elements(x.shape) >= out) return false;
  }
  return true;
}

// Selective recomputation: from each scores product, the chain of core
// steps up to the product that consumes it; the chain's operators are
// recomputed and their outputs not kept, where all of them are selective.
void mark_attention_cores(const ir::Graph& g, const std::vector<Recompute>& rc, MemoryRules& r) {
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    if (rc[o] != Recompute::Selective || !scores_product(g, g.op(o))) continue;
    std::vector<ir::OpId> chain{o};
    ir::TensorId t = g.op(o).outputs[0];
    bool closed = false;
    while (!closed) {
      const ir::Tensor& x = g.tensor(t);
      if (x.consumers.size() != 1) break;
      const ir::Operator& next = g.op(x.consumers[0]);
      if (is_product(next.kind)) {
        chain.push_back(x.consumers[0]);
        closed = true;
      } else if (core_step(g, next) && next.outputs.size() == 1) {
        chain.push_back(x.consumers[0]);
        t = next.outputs[0];
      } else {
        break;
      }
    }
    if (!closed) continue;
    if (!std::all_of(chain.begin(), chain.end(),
                     [&](ir::OpId c) { return rc[c] == Recompute::Selective; }))
      continue;
    for (const ir::OpId c : chain) {
      r.recomputed[c] = 1;
      for (const ir::TensorId out : g.op(c).outputs) r.saved[out] = 0.0F;
    }
  }
}

// Full recomputation (Chen et al. 2016): checkpoints at the activations
// that alone are live between two operators in topological order, each
// taken once the segment before it would keep at least kSegmentFactor times
// its bytes; everything between two checkpoints is recomputed. The rule is
// local, so a repeated block is cut the same way however many repeats the
// graph has (folded searches extrapolate from three), and on a GPT layer
// it checkpoints the layer input as Megatron-LM does (34·s·b·h kept per
// layer against 2·s·b·h of input). The segment after the last checkpoint
// is not recomputed where the graph ends in its loss (keep_last_segment).
constexpr double kSegmentFactor = 8.0;

// Whether activation t, produced by a full operator, is read by an operator
// that is not: that one's backward runs before the segment is recomputed,
// so t stays kept by the rule without recomputation.
bool leaves_full(const ir::Graph& g, const std::vector<Recompute>& rc, ir::TensorId t) {
  const auto& cs = g.tensor(t).consumers;
  return std::any_of(cs.begin(), cs.end(), [&](ir::OpId c) { return rc[c] != Recompute::Full; });
}

// An activation a full operator reads from an operator that is not full is
// its segment's starting point: kept whole.
void keep_segment_inputs(const ir::Graph& g, const std::vector<Recompute>& rc,
                         const ir::Operator& op, MemoryRules& r) {
  for (const ir::TensorId t : op.inputs) {
    const ir::Tensor& x = g.tensor(t);
    if (x.kind == ir::TensorKind::Activation && rc[x.producer] != Recompute::Full)
      r.saved[t] = std::max(r.saved[t], 1.0F);
  }
}

// Whether the operators at positions [from, n) of `order` produce the
// graph's loss: a one-element activation nobody reads. The backward pass
// starts there, right after the forward, so the segment holding it gains
// nothing by being recomputed. A graph without one (a pipeline stage that
// sends its last activations on, a graph whose loss lies outside it) may
// wait for its output's gradient, and recomputes every segment.
bool ends_in_loss(const ir::Graph& g, const std::vector<ir::OpId>& order, std::size_t from) {
  for (std::size_t i = from; i < order.size(); ++i) {
    for (const ir::TensorId t : g.op(order[i]).outputs) {
      const ir::Tensor& x = g.tensor(t);
      if (x.kind == ir::TensorKind::Activation && x.consumers.empty() &&
          ir::num_elements(x.shape) == 1)
        return true;
    }
  }
  return false;
}

// The segment after the last checkpoint, operators [from, n) of `order`
// (all of them full), as Megatron-LM and torch's checkpoint_sequential run
// it: not recomputed, its tensors kept by the rule without recomputation
// (saved_if_kept), and so are the checkpoints it reads (kept whole only as
// the point its recomputation would restart from).
void keep_last_segment(const ir::Graph& g, const std::vector<ir::OpId>& order, std::size_t from,
                       MemoryRules& r) {
  for (std::size_t i = from; i < order.size(); ++i) {
    const ir::Operator& op = g.op(order[i]);
    r.recomputed[order[i]] = 0;
    for (const ir::TensorId t : op.outputs) {
      r.segment[t] = -1;
      r.saved[t] = r.saved_if_kept[t];
    }
  }
  for (std::size_t i = from; i < order.size(); ++i) {
    for (const ir::TensorId t : g.op(order[i]).inputs) {
      const ir::Tensor& x = g.tensor(t);
      if (x.kind == ir::TensorKind::Activation && r.segment[t] < 0) r.saved[t] = r.saved_if_kept[t];
    }
  }
}

void mark_segments(const ir::Graph& g, const std::vector<Recompute>& rc, MemoryRules& r) {
  const auto& order = g.topological_order();
  const std::size_t n = order.size();
  std::vector<std::size_t> pos(g.num_operators());
  for (std::size_t i = 0; i < n; ++i) pos[order[i]] = i;
  // live[i]: activations live across the gap after position i.
  std::vector<std::int64_t> delta(n + 1, 0);
  std::vector<ir::TensorId> crossing(n, ir::kNone);
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    if (x.kind != ir::TensorKind::Activation || x.consumers.empty()) continue;
    std::size_t last = 0;
    for (const ir::OpId c : x.consumers) last = std::max(last, pos[c]);
    const std::size_t first = pos[x.producer];
    if (last <= first) continue;
    ++delta[first];
    --delta[last];
  }
  std::int64_t live = 0;
  std::vector<std::uint8_t> single(n, 0);
  for (std::size_t i = 0; i + 1 < n; ++i) {
    live += delta[i];
    single[i] = live == 1;
  }
  // The one crossing activation of each single gap: an output of order[i]
  // or of an earlier operator still live; find it by its interval.
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    if (x.kind != ir::TensorKind::Activation || x.consumers.empty()) continue;
    std::size_t last = 0;
    for (const ir::OpId c : x.consumers) last = std::max(last, pos[c]);
    // Only the gaps right after its producer are looked at: a single
    // crossing activation is, at the first gap it crosses, just produced.
    const std::size_t first = pos[x.producer];
    if (first < n && last > first && single[first]) crossing[first] = static_cast<ir::TensorId>(t);
  }
  std::int32_t seg = 0;
  double acc = 0;
  bool open = false;      // the current segment has a full operator
  std::size_t start = 0;  // its first position
  for (std::size_t i = 0; i < n; ++i) {
    const ir::Operator& op = g.op(order[i]);
    if (rc[order[i]] != Recompute::Full) {
      // A segment ends where an operator that is not full comes.
      if (open) ++seg;
      open = false;
      acc = 0;
      start = i + 1;
      continue;
    }
    open = true;
    r.recomputed[order[i]] = 1;
    keep_segment_inputs(g, rc, op, r);
    for (const ir::TensorId t : op.outputs) {
      if (r.saved_if_kept[t] <= 0 || leaves_full(g, rc, t)) continue;
      r.segment[t] = seg;
      r.saved[t] = 0.0F;
      acc += r.saved_if_kept[t] * g.tensor(t).bytes();
    }
    const ir::TensorId c = crossing[i];
    if (c != ir::kNone && acc >= kSegmentFactor * g.tensor(c).bytes()) {
      r.segment[c] = -1;
      r.saved[c] = 1.0F;  // the checkpoint, kept whole
      acc = 0;
      ++seg;
      start = i + 1;
    }
  }
  r.segments = open ? seg + 1 : seg;
  if (open && start < n && ends_in_loss(g, order, start)) {
    keep_last_segment(g, order, start, r);
    r.segments = seg;
  }
}

// Batch dim of every tensor: the graph inputs' dim 0 where it is the global
// batch, carried through each operator by the loop it maps to (follow_batch);
// -1 where none.
bool same_loops(const algebra::OpSpace& a, const algebra::OpSpace& b) {
  if (a.loops.size() != b.loops.size() || a.inputs != b.inputs || a.outputs != b.outputs)
    return false;
  for (std::size_t l = 0; l < a.loops.size(); ++l)
    if (a.loops[l].role != b.loops[l].role) return false;
  return true;
}

}  // namespace

BatchDims follow_batch(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                       std::vector<int> seeds) {
  BatchDims b;
  b.tensor_dim = std::move(seeds);
  b.tensor_dim.resize(g.num_tensors(), -1);
  b.op_loop.assign(g.num_operators(), algebra::kUnmapped);
  std::vector<int>& bd = b.tensor_dim;
  for (const ir::OpId o : g.topological_order()) {
    const ir::Operator& op = g.op(o);
    const algebra::OpSpace& s = spaces[o];
    int loop = algebra::kUnmapped;
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const int d = bd[op.inputs[j]];
      if (d < 0 || j >= s.inputs.size() || static_cast<std::size_t>(d) >= s.inputs[j].size())
        continue;
      const int l = s.inputs[j][static_cast<std::size_t>(d)];
      if (loop == algebra::kUnmapped) {
        loop = l;
      } else if (l != loop && l != algebra::kUnmapped) {
        ++b.conflicts;  // a batch row meets other rows: attention over it, or a wrong guess
        break;
      }
    }
    if (loop == algebra::kUnmapped) continue;
    b.op_loop[o] = loop;
    for (std::size_t j = 0; j < op.outputs.size() && j < s.outputs.size(); ++j) {
      const auto& dims = s.outputs[j];
      for (std::size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == loop) {
          bd[op.outputs[j]] = static_cast<int>(d);
          break;
        }
      }
    }
  }
  return b;
}

BatchDims batch_dims(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces) {
  const std::int64_t batch = batch_size(g);
  std::vector<int> seeds(g.num_tensors(), -1);
  for (std::size_t t = 0; t < g.num_tensors() && batch > 0; ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    if (x.kind == ir::TensorKind::Input && !x.shape.empty() && x.shape[0] == batch) seeds[t] = 0;
  }
  return follow_batch(g, spaces, std::move(seeds));
}

std::string_view recompute_name(Recompute r) noexcept {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

std::optional<Recompute> parse_recompute(std::string_view s) noexcept {
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (s == recompute_name(r)) return r;
  return std::nullopt;
}

MemoryRules memory_rules(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         Recompute recompute) {
  return memory_rules(g, spaces, std::vector<Recompute>(g.num_operators(), recompute));
}

MemoryRules memory_rules(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         const std::vector<Recompute>& per_op) {
  (void)spaces;
  if (per_op.size() != g.num_operators())
    throw Error(Errc::kInternal, "memory_rules: one recomputation per operator is required");
  MemoryRules r;
  r.grads = ir::gradient_tensors(g);
  r.backward_share = ir::backward_shares(g, r.grads);
  r.saved = saved_none(g, r.grads);
  r.segment.assign(g.num_tensors(), -1);
  r.recomputed.assign(g.num_operators(), 0);
  const auto any = [&](Recompute x) {
    return std::find(per_op.begin(), per_op.end(), x) != per_op.end();
  };
  if (any(Recompute::Selective)) mark_attention_cores(g, per_op, r);
  if (any(Recompute::Full)) {
    r.saved_if_kept = r.saved;
    mark_segments(g, per_op, r);
  }
  return r;
}

std::vector<Recompute> operator_recompute(const ir::Graph& g, const Training& t) {
  std::vector<Recompute> rc(g.num_operators(), t.recompute);
  if (!t.per_op.empty()) {
    if (t.per_op.size() != rc.size())
      throw Error(Errc::kInternal, "training: one recomputation per operator is required");
    rc = t.per_op;
  }
  for (ir::OpId o = 0; o < g.num_operators(); ++o)
    if (g.op(o).recompute) rc[o] = *g.op(o).recompute;
  return rc;
}

bool mixed_recompute(const ir::Graph& g, const Training& t) {
  const std::vector<Recompute> rc = operator_recompute(g, t);
  return std::any_of(rc.begin(), rc.end(), [&](Recompute x) { return x != t.recompute; });
}

std::vector<int> parameter_zero(const ir::Graph& g, const Training& t) {
  std::vector<int> z(g.num_tensors(), 0);
  if (!t.zero_per_param.empty() && t.zero_per_param.size() != z.size())
    throw Error(Errc::kInternal, "training: one ZeRO stage per tensor is required");
  for (ir::TensorId i = 0; i < g.num_tensors(); ++i)
    if (g.tensor(i).kind == ir::TensorKind::Parameter)
      z[i] = t.zero_per_param.empty() ? t.zero_stage : t.zero_per_param[i];
  return z;
}

bool mixed_zero(const ir::Graph& g, const Training& t) {
  if (t.zero_per_param.empty()) return false;
  const std::vector<int> z = parameter_zero(g, t);
  for (ir::TensorId i = 0; i < g.num_tensors(); ++i)
    if (g.tensor(i).kind == ir::TensorKind::Parameter && z[i] != t.zero_stage) return true;
  return false;
}

ZeroAxes zero_axes(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p) {
  const std::size_t n = g.num_tensors();
  // Each parameter's holder: (operator, input slot) of its first use.
  std::vector<ir::OpId> holder(n, ir::kNone);
  std::vector<std::uint32_t> slot(n, 0);
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const auto& inputs = g.op(o).inputs;
    for (std::uint32_t j = 0; j < inputs.size(); ++j) {
      const ir::TensorId t = inputs[j];
      if (g.tensor(t).kind != ir::TensorKind::Parameter || holder[t] != ir::kNone) continue;
      holder[t] = o;
      slot[t] = j;
    }
  }
  ZeroAxes z;
  z.begin.assign(n + 1, 0);
  for (ir::TensorId t = 0; t < n; ++t) {
    z.begin[t] = static_cast<std::uint32_t>(z.axes.size());
    const ir::OpId o = holder[t];
    if (o == ir::kNone || o >= spaces.size() || o >= p.cuts.size()) continue;
    const algebra::OpSpace& s = spaces[o];
    const std::span<const int> dims =
        slot[t] < s.inputs.size() ? s.inputs[slot[t]] : std::span<const int>{};
    const std::vector<std::int16_t>& cuts = p.cuts[o];
    for (std::size_t a = 0; a < p.mesh.size() && a < cuts.size(); ++a) {
      // An axis of one device shards nothing (the evaluator prices no event there).
      if (p.mesh[a].size <= 1 || cuts[a] == kReplicated) continue;
      if (wanted_layout(s, cuts[a], dims, false).kind == cost::LayoutKind::Replicate)
        z.axes.push_back(static_cast<std::uint32_t>(a));
    }
  }
  z.begin[n] = static_cast<std::uint32_t>(z.axes.size());
  return z;
}

ParameterState parameter_state(const CostParams& p, Mode mode, int dtype_bytes) {
  if (mode == Mode::Infer) return {};
  if (p.model) return {1.0, 0.0, p.model->parameter_state_factor(p, mode) - 1.0};
  const double e = std::max(1, dtype_bytes);
  Optimizer o = p.optimizer;
  if (o == Optimizer::Auto) o = dtype_bytes <= 2 ? Optimizer::MixedAdam : Optimizer::AdamF32;
  switch (o) {
    case Optimizer::MixedAdam: return {1.0, 1.0, 12.0 / e};
    case Optimizer::AdamF32: return {1.0, 1.0, 2.0};
    case Optimizer::Sgd: return {1.0, 1.0, 0.0};
    case Optimizer::SgdMomentum: return {1.0, 1.0, 1.0};
    case Optimizer::Factors:
    case Optimizer::Auto: break;
  }
  return {1.0, p.gradient_bytes_factor, p.optimizer_bytes_factor};
}

std::int64_t batch_size(const ir::Graph& g) {
  for (const ir::Tensor& t : g.tensors())
    if (t.kind == ir::TensorKind::Input && !t.shape.empty() && !t.consumers.empty())
      return t.shape[0];
  return 0;
}

std::optional<MicrobatchView> microbatch_view(const ir::Graph& g,
                                              const std::vector<algebra::OpSpace>& spaces,
                                              std::int64_t m) {
  const std::int64_t batch = batch_size(g);
  if (m < 1 || batch <= 0 || batch % m != 0) return std::nullopt;
  const BatchDims batch_of = batch_dims(g, spaces);
  const std::vector<int>& bd = batch_of.tensor_dim;
  MicrobatchView v{ir::Graph(g.name()), {}};
  v.graph.reserve(g.num_tensors(), g.num_operators());
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    ir::Shape shape = x.shape;
    if (bd[t] >= 0) {
      auto& d = shape[static_cast<std::size_t>(bd[t])];
      if (d % m != 0) return std::nullopt;
      d /= m;
    }
    const auto kind = x.kind == ir::TensorKind::Activation ? ir::TensorKind::Input : x.kind;
    (void)v.graph.add_tensor(x.name, std::move(shape), x.dtype, kind);
  }
  for (const ir::Operator& op : g.operators()) {
    // Pinned strategies stay: where one splits the batch more than the
    // microbatch allows, the plan check rejects this microbatch count.
    (void)v.graph.add_operator(op);
  }
  v.graph.set_gradient_inputs(g.gradient_inputs());  // the same tensor ids
  try {
    v.graph.finalize();
    v.spaces = algebra::build_op_spaces(v.graph);
  } catch (const Error&) {
    return std::nullopt;  // an operator whose attributes fix the batch
  }
  // A plan's cuts index the full graph's loops, so the microbatch graph
  // keeps them. A kind whose loops depend on sizes can lose one: a Reshape
  // groups dims by their products, and a batch of 1 joins no group. Such an
  // operator keeps its full-graph space with the batch loop m times shorter.
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    if (same_loops(v.spaces[o], spaces[o])) continue;
    const int loop = batch_of.op_loop[o];
    if (loop == algebra::kUnmapped) return std::nullopt;
    algebra::OpSpace s = spaces[o];
    algebra::LoopDim& l = s.loops[static_cast<std::size_t>(loop)];
    if (l.size % m != 0) return std::nullopt;
    l.size /= m;
    s.flops /= static_cast<double>(m);
    v.spaces[o] = std::move(s);
  }
  return v;
}

}  // namespace recsearch::plan
