// SPDX-License-Identifier: Apache-2.0
// The executor (exec/executor.hpp): per operator, inputs redistributed to
// the operator's layouts, the local kernel on the blocks, outputs kept in
// the layout the operator leaves them in.
#include "recsearch/exec/executor.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <span>
#include <utility>

#include "exec/halo.hpp"
#include "exec/kernels.hpp"
#include "recsearch/error.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::exec {
namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Visits every element of a block: f(local index, global row-major index).
template <class F>
void for_each_element(const ir::Shape& full, const ir::Shape& local,
                      const std::vector<std::int64_t>& offset, F&& f) {
  std::int64_t n = 1;
  for (const auto d : local) n *= d;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, global = 0, mul = 1;
    for (std::size_t d = local.size(); d-- > 0;) {
      global += (rest % local[d] + offset[d]) * mul;
      rest /= local[d];
      mul *= full[d];
    }
    f(i, global);
  }
}

}  // namespace

float input_value(const ir::Graph& g, ir::TensorId t, std::int64_t index, std::uint64_t seed) {
  const ir::Tensor& tensor = g.tensor(t);
  const std::uint64_t h =
      splitmix(splitmix(seed ^ (0x51ED27ull * (t + 1))) ^ static_cast<std::uint64_t>(index));
  if (!ir::is_integer(tensor.dtype)) {
    double v = static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    // Weights scaled by 1/sqrt(fan-in) keep activations of deep graphs O(1).
    if (tensor.kind == ir::TensorKind::Parameter && tensor.rank() >= 2) {
      v /= std::sqrt(ir::num_elements(tensor.shape) / static_cast<double>(tensor.shape.back()));
    }
    return static_cast<float>(v);
  }
  // Integers: valid indices of the table a Gather reads with them, else small.
  std::int64_t bound = 0;  // the smallest limit of any use
  for (const ir::OpId o : tensor.consumers) {
    const ir::Operator& op = g.op(o);
    std::int64_t limit = 0;
    if (op.kind == ir::OpKind::Gather && op.inputs.size() == 2 && op.inputs[1] == t) {
      const ir::Shape& table = g.tensor(op.inputs[0]).shape;
      std::int64_t axis = op.attrs.get_int("axis", 0);
      if (axis < 0) axis += static_cast<std::int64_t>(table.size());
      limit = table.at(static_cast<std::size_t>(axis));
    }
    if (op.kind == ir::OpKind::SoftmaxCrossEntropy && op.inputs.size() >= 2 && op.inputs[1] == t &&
        !g.tensor(op.inputs[0]).shape.empty()) {
      limit = g.tensor(op.inputs[0]).shape.back();
    }
    if (op.kind == ir::OpKind::OneHot && op.inputs[0] == t) limit = op.attrs.get_int("depth", 0);
    if (limit > 0) bound = bound == 0 ? limit : std::min(bound, limit);
  }
  if (bound == 0) bound = tensor.dtype == ir::DType::Bool ? 2 : 16;
  return static_cast<float>(h % static_cast<std::uint64_t>(bound));
}

namespace {

// The mesh axes that cut a SoftmaxCrossEntropy's class dim (its logits'
// last dim): a vocabulary-parallel loss. Empty for any other operator.
std::vector<std::uint32_t> loss_class_axes(const ir::Graph& g, const ir::Operator& op,
                                           const OpLayouts& ol) {
  std::vector<std::uint32_t> axes;
  if (op.kind != ir::OpKind::SoftmaxCrossEntropy || ol.inputs.empty()) return axes;
  const int class_dim = static_cast<int>(g.tensor(op.inputs[0]).shape.size()) - 1;
  for (std::size_t a = 0; a < ol.inputs[0].size(); ++a) {
    const cost::AxisLayout& l = ol.inputs[0][a];
    if (l.kind == cost::LayoutKind::Shard && l.dim == class_dim)
      axes.push_back(static_cast<std::uint32_t>(a));
  }
  return axes;
}

// Cross-entropy with the class dim cut (a vocabulary-parallel loss, as in
// Megatron-LM): each rank holds a slice of every row's logits. Per row, the
// slice's log-sum-exp is gathered over each cut axis and combined, and the
// label's logit, which one rank of the group holds, is summed over it; then
// every rank of the group knows each row's loss. The class loop is a
// reduction, so the output is partial over those axes: each rank writes
// loss / group size, and the sum the layout promises is the loss.
void class_parallel_cross_entropy(const detail::KernelArgs& a, Communicator& comm,
                                  const std::vector<std::int64_t>& mesh,
                                  const std::vector<std::uint32_t>& axes, std::int64_t class_offset,
                                  std::vector<float>& lse_out) {
  const ir::Shape& ls = a.in_shapes[0];
  const std::int64_t c = ls.back();
  const std::int64_t classes = a.full_in_shapes[0].back();
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < ls.size(); ++d) rows *= ls[d];
  const auto n = static_cast<std::size_t>(rows);
  const std::vector<float>& x = *a.in[0];
  const std::vector<float>& labels = *a.in[1];
  std::vector<float> lse(n), picked(n, 0.0f);
  for (std::size_t r = 0; r < n; ++r) {
    const float* row = x.data() + r * static_cast<std::size_t>(c);
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < c; ++i) m = std::max(m, static_cast<double>(row[i]));
    double sum = 0;
    for (std::int64_t i = 0; i < c; ++i) sum += std::exp(row[i] - m);
    lse[r] = static_cast<float>(m + std::log(sum));
    // Labels as the one-device kernel reads them, then this slice's share.
    const std::int64_t label =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(labels[r]), 0, classes - 1) -
        class_offset;
    if (label >= 0 && label < c) picked[r] = row[label];
  }
  double group = 1;
  std::vector<float> all;
  for (const std::uint32_t axis : axes) {
    const auto k = static_cast<std::size_t>(mesh[axis]);
    all.resize(k * n);
    comm.all_gather(axis, lse.data(), all.data(), n);
    for (std::size_t r = 0; r < n; ++r) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < k; ++i) m = std::max(m, static_cast<double>(all[i * n + r]));
      double sum = 0;
      for (std::size_t i = 0; i < k; ++i) sum += std::exp(all[i * n + r] - m);
      lse[r] = static_cast<float>(m + std::log(sum));
    }
    comm.all_reduce(axis, picked.data(), n);
    group *= static_cast<double>(k);
  }
  lse_out = lse;  // the backward's softmax over the whole row
  std::vector<float>& y = *a.out[0];
  const std::string reduction = a.op->attrs.get_string("reduction", "mean");
  if (reduction == "none") {
    for (std::size_t r = 0; r < n; ++r)
      y[r] = static_cast<float>((static_cast<double>(lse[r]) - picked[r]) / group);
    return;
  }
  double total = 0;
  for (std::size_t r = 0; r < n; ++r) total += static_cast<double>(lse[r]) - picked[r];
  const double full_rows =
      static_cast<double>(ir::num_elements(a.full_in_shapes[0])) / static_cast<double>(classes);
  y[0] = static_cast<float>((reduction == "mean" ? total / full_rows : total) / group);
}

// Why cutting loop c of `op` cannot run, or empty. Every check runs and the last failing one
// names the problem, so the message for a loop that fails several stays the same.
std::string cut_loop_problem(const ir::Operator& op, const algebra::OpSpace& s, int c) {
  std::string why;
  const algebra::LoopDim& loop = s.loops.at(static_cast<std::size_t>(c));
  const auto maps = [&](std::span<const int> dims) {
    return static_cast<int>(std::count(dims.begin(), dims.end(), c));
  };
  for (const auto& dims : s.inputs) {
    if (maps(dims) > 1) why = "cut loop '" + loop.name + "' indexes two dims of one operand";
  }
  for (const auto& dims : s.outputs) {
    if (maps(dims) > 1) why = "cut loop '" + loop.name + "' indexes two dims of one operand";
    if (loop.role != algebra::DimRole::Reduction && maps(dims) == 0) {
      why = "cut loop '" + loop.name + "' does not reach the output";
    }
  }
  if (loop.role == algebra::DimRole::Reduction && op.kind == ir::OpKind::ReduceMax) {
    why = "a cut max-reduction is not a partial sum";
  }
  return why;
}

}  // namespace

std::vector<std::string> unsupported_operators(const ir::Graph& g,
                                               const std::vector<algebra::OpSpace>& spaces,
                                               const plan::Plan& p) {
  std::vector<std::string> out;
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(o);
    const std::string who = op.name + " (" + op.type + "): ";
    std::string why = detail::kernel_support(g, op);
    const algebra::OpSpace& s = spaces.at(o);
    if (why.empty() && s.opaque) why = "opaque operator";
    for (std::size_t a = 0; why.empty() && o < p.cuts.size() && a < p.cuts[o].size(); ++a) {
      const int c = p.cuts[o][a];
      if (c != plan::kReplicated) why = cut_loop_problem(op, s, c);
    }
    if (!why.empty()) out.push_back(who + why);
  }
  return out;
}

Executor::Executor(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                   const plan::Plan& p, Communicator& comm, ExecOptions options)
    : g_(g),
      spaces_(spaces),
      comm_(comm),
      options_(options),
      layouts_(plan_layouts(g, spaces, p)),
      redist_(comm),
      coords_(rank_coords(comm.rank(), comm.mesh())) {
  if (layouts_.mesh != comm.mesh()) {
    throw Error(Errc::kPlan, "the plan's mesh does not match the communicator's");
  }
  const auto bad = unsupported_operators(g, spaces, p);
  if (!bad.empty()) {
    std::string msg = std::to_string(bad.size()) + " operator(s) cannot be executed:";
    for (const auto& b : bad) msg += "\n  " + b;
    throw Error(Errc::kUsage, msg);
  }
  held_.resize(g.num_tensors());
  copies_.resize(g.num_tensors());
  row_lse_.resize(g.num_operators());
  windows_.resize(g.num_operators());
  bn_stats_.resize(g.num_operators());
  const std::vector<int> zero = plan::parameter_zero(g, p.training);
  grads_layout_ = exec::gradient_layouts(g, layouts_, zero, options_.grad_inputs);
  zero3_ = zero3_sharded(g, layouts_, grads_layout_, zero);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& tensor = g.tensor(t);
    if (grads_layout_.needs_grad[t] && tensor.kind == ir::TensorKind::Parameter &&
        tensor.producer == ir::kNone && !tensor.consumers.empty())
      trained_.push_back(t);
  }
  if (options_.recompute) {
    const plan::MemoryRules rules =
        plan::memory_rules(g, spaces, plan::operator_recompute(g, p.training));
    recompute_ = exec::recompute_plan(g, layouts_, rules.recomputed, rules.saved);
    group_ops_.resize(static_cast<std::size_t>(recompute_.groups));
    for (const ir::OpId o : g.topological_order()) {
      if (recompute_.group[o] >= 0)
        group_ops_[static_cast<std::size_t>(recompute_.group[o])].push_back(o);
    }
  }
  make_inputs(options_.value, true);
  // ZeRO 3: each rank keeps its shard (a local slice, nothing sent).
  shards_.resize(g.num_tensors());
  first_reader_.assign(g.num_tensors(), ir::kNone);
  last_reader_.assign(g.num_tensors(), ir::kNone);
  for (const ir::OpId o : g.topological_order()) {
    for (const ir::TensorId t : g.op(o).inputs) {
      if (first_reader_[t] == ir::kNone) first_reader_[t] = o;
      last_reader_[t] = o;
    }
  }
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (!zero3_[t]) continue;
    shards_[t] =
        std::make_unique<LocalTensor>(redist_.redistribute(*held_[t], grads_layout_.target[t]));
    held_[t].reset();
  }
  param_bytes_.kept = param_bytes_.peak = held_parameter_bytes();
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& tensor = g.tensor(t);
    if (tensor.producer == ir::kNone) continue;
    if (tensor.consumers.empty()) outputs_.push_back(t);
  }
  loss_scale_.assign(outputs_.size(), 1.0);
}

Executor::~Executor() = default;

void Executor::make_inputs(const std::function<float(ir::TensorId, std::int64_t)>& value,
                           bool parameters) {
  const auto& mesh = layouts_.mesh;
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    const ir::Tensor& tensor = g_.tensor(t);
    if (tensor.producer != ir::kNone || tensor.consumers.empty()) continue;
    if (!parameters && tensor.kind == ir::TensorKind::Parameter) continue;
    auto lt = std::make_unique<LocalTensor>();
    lt->full = tensor.shape;
    lt->layout = layouts_.holders[t];
    const ir::Shape local = local_shape(tensor.shape, lt->layout, mesh);
    lt->data.resize(static_cast<std::size_t>(ir::num_elements(local)));
    for_each_element(tensor.shape, local, local_offsets(tensor.shape, lt->layout, mesh, coords_),
                     [&](std::int64_t i, std::int64_t global) {
                       lt->data[static_cast<std::size_t>(i)] =
                           value ? value(t, global) : input_value(g_, t, global, options_.seed);
                     });
    held_[t] = std::move(lt);
  }
}

void Executor::set_input(ir::TensorId t, std::vector<float> data) {
  if (t >= held_.size() || g_.tensor(t).producer != ir::kNone || !held_[t] ||
      held_[t]->data.size() != data.size())
    throw Error(Errc::kInternal, "set_input: '" + g_.tensor(t).name +
                                     "' is not an input block of " + std::to_string(data.size()) +
                                     " elements");
  held_[t]->data = std::move(data);
}

void Executor::reseed_inputs(const std::function<float(ir::TensorId, std::int64_t)>& value) {
  make_inputs(value, false);
}

void Executor::set_loss_scale(std::vector<double> per_output) {
  if (per_output.size() != outputs_.size())
    throw Error(Errc::kInternal, "set_loss_scale: one weight per graph output");
  loss_scale_ = std::move(per_output);
}

void Executor::run() {
  // Inputs stay (made once); activations and redistributed copies are redone.
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    copies_[t].clear();
    if (g_.tensor(t).producer != ir::kNone) held_[t].reset();
  }
  for (WindowBlock& wb : windows_) wb = WindowBlock{};
  for (const ir::OpId o : g_.topological_order()) {
    if (options_.before_op) options_.before_op(o);
    gather_parameters(o, options_.corrupt_gather_op == o);
    run_op(o);
    param_bytes_.peak = std::max(param_bytes_.peak, held_parameter_bytes());
    for (const ir::TensorId t : g_.op(o).inputs) {
      if (zero3_[t] && last_reader_[t] == o) free_parameter(t);
    }
  }
  for (const ir::TensorId t : outputs_) redist_.reduce_partial(*held_[t]);
  if (!recompute_.empty()) drop_for_backward();
  act_bytes_.after_forward = act_bytes_.peak = held_data_bytes();
}

namespace {

// Removes the copies of t in `layouts` (exec/recompute.hpp's dropped copies).
void erase_copies(std::deque<LocalTensor>& copies, const std::vector<Layout>& layouts) {
  std::erase_if(copies, [&](const LocalTensor& c) {
    return std::find(layouts.begin(), layouts.end(), c.layout) != layouts.end();
  });
}

}  // namespace

void Executor::drop_for_backward() {
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    if (recompute_.dropped[t]) {
      held_[t].reset();
      copies_[t].clear();
    } else {
      erase_copies(copies_[t], recompute_.dropped_copies[t]);
    }
  }
  // A recomputed window operator exchanges its halo again.
  for (ir::OpId o = 0; o < g_.num_operators(); ++o) {
    if (recompute_.op[o]) windows_[o] = WindowBlock{};
  }
}

void Executor::recompute_group(std::int32_t group) {
  const auto k = static_cast<std::size_t>(group);
  if (group_done_[k]) return;
  group_done_[k] = 1;
  const double collectives = comm_.bytes_sent(), p2p = comm_.p2p_bytes();
  for (const ir::OpId o : group_ops_[k]) run_op(o, true);
  recompute_sent_.collectives += comm_.bytes_sent() - collectives;
  recompute_sent_.p2p += comm_.p2p_bytes() - p2p;
  act_bytes_.peak = std::max(act_bytes_.peak, held_data_bytes());
}

void Executor::release_after_backward(ir::OpId o) {
  for (const ir::TensorId t : g_.op(o).inputs) {
    if (--pending_reads_[t] != 0) continue;
    if (recompute_.dropped[t]) {
      held_[t].reset();
      copies_[t].clear();
    } else {
      erase_copies(copies_[t], recompute_.dropped_copies[t]);
    }
  }
}

void Executor::gather_parameters(ir::OpId o, bool corrupt) {
  for (const ir::TensorId t : g_.op(o).inputs) {
    if (!zero3_[t] || held_[t]) continue;
    held_[t] =
        std::make_unique<LocalTensor>(redist_.redistribute(*shards_[t], layouts_.holders[t]));
    if (corrupt) {
      for (float& v : held_[t]->data) v *= 2.0f;
    }
  }
}

void Executor::free_parameter(ir::TensorId t) {
  held_[t].reset();
  copies_[t].clear();
}

double Executor::held_parameter_bytes() const {
  double elements = 0;
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    if (g_.tensor(t).kind != ir::TensorKind::Parameter) continue;
    if (held_[t]) elements += static_cast<double>(held_[t]->data.size());
    if (shards_[t]) elements += static_cast<double>(shards_[t]->data.size());
    for (const LocalTensor& c : copies_[t]) elements += static_cast<double>(c.data.size());
  }
  return elements * sizeof(float);
}

double Executor::held_data_bytes() const {
  double elements = 0;
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    const ir::TensorKind kind = g_.tensor(t).kind;
    if (kind != ir::TensorKind::Activation && kind != ir::TensorKind::Input) continue;
    if (held_[t]) elements += static_cast<double>(held_[t]->data.size());
    for (const LocalTensor& c : copies_[t]) elements += static_cast<double>(c.data.size());
  }
  return elements * sizeof(float);
}

detail::KernelArgs Executor::op_args(ir::OpId o, bool backward) {
  const ir::Operator& op = g_.op(o);
  const OpLayouts& ol = layouts_.ops[o];
  const auto& mesh = layouts_.mesh;
  detail::KernelArgs args;
  args.op = &op;
  args.use_gpu = options_.use_gpu;
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    const ir::TensorId t = op.inputs[j];
    if (!held_[t])
      throw Error(Errc::kInternal, "tensor '" + g_.tensor(t).name + "' used before it exists");
    const LocalTensor* src = held_[t].get();
    if (src->layout != ol.inputs[j]) {
      auto& made = copies_[t];
      const auto it = std::find_if(made.begin(), made.end(),
                                   [&](const LocalTensor& c) { return c.layout == ol.inputs[j]; });
      if (it == made.end()) {
        made.push_back(redist_.redistribute(*src, ol.inputs[j]));
        src = &made.back();
      } else {
        src = &*it;
      }
    }
    args.in.push_back(&src->data);
    args.in_shapes.push_back(local_shape(src->full, src->layout, mesh));
    args.full_in_shapes.push_back(src->full);
  }
  // copies_ entries stay put from here on (deque), so the pointers hold.
  for (std::size_t j = 0; j < op.outputs.size(); ++j)
    args.out_shapes.push_back(local_shape(g_.tensor(op.outputs[j]).shape, ol.outputs[j], mesh));
  if (op.kind == ir::OpKind::Gather) {
    std::int64_t axis = op.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<std::int64_t>(args.full_in_shapes[0].size());
    args.gather_offset = local_offsets(args.full_in_shapes[0], ol.inputs[0], mesh, coords_)
                             .at(static_cast<std::size_t>(axis));
  }
  if (op.kind == ir::OpKind::OneHot) {
    const ir::Shape& full = g_.tensor(op.outputs[0]).shape;
    std::int64_t axis = op.attrs.get_int("axis", -1);
    if (axis < 0) axis += static_cast<std::int64_t>(full.size());
    args.depth_offset =
        local_offsets(full, ol.outputs[0], mesh, coords_).at(static_cast<std::size_t>(axis));
  }
  if (op.kind == ir::OpKind::Attention) {
    args.query_offset = local_offsets(args.full_in_shapes[0], ol.inputs[0], mesh, coords_).at(2);
    args.bool_mask = op.inputs.size() > 3 && g_.tensor(op.inputs[3]).dtype == ir::DType::Bool;
  }
  if (op.kind == ir::OpKind::Conv2D) {
    // A cut channel loop leaves a partial sum: its first rank adds the bias.
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      if (ol.outputs[0][a].kind == cost::LayoutKind::Partial && coords_[a] != 0)
        args.add_bias = false;
    }
  }
  if (op.kind == ir::OpKind::Conv2D || op.kind == ir::OpKind::MaxPool ||
      op.kind == ir::OpKind::AvgPool) {
    if (!backward) {
      exchange_halo(o, args);
    } else if (WindowBlock& wb = windows_[o]; !wb.shape.empty()) {
      args.in[0] = &wb.data;
      args.in_shapes[0] = wb.shape;
      args.window_in_begin = wb.in_begin;
      args.window_out_begin = wb.out_begin;
    }
  }
  if (op.kind == ir::OpKind::BatchNorm && backward) {
    args.bn_mean = &bn_stats_[o][0];
    args.bn_var = &bn_stats_[o][1];
  }
  return args;
}

namespace {

// A block seen along one dim: `outer` runs of `rows` rows of `inner` elements.
struct Slab {
  std::int64_t outer = 1, rows = 1, inner = 1;
};

Slab slab_of(const ir::Shape& s, int dim) {
  Slab sl;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    const std::int64_t n = s[static_cast<std::size_t>(d)];
    if (d < dim) sl.outer *= n;
    if (d == dim) sl.rows = n;
    if (d > dim) sl.inner *= n;
  }
  return sl;
}

// Rows [r0, r1) of a block, as a block of r1 − r0 rows.
std::vector<float> take_rows(const std::vector<float>& data, const Slab& sl, std::int64_t r0,
                             std::int64_t r1) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(sl.outer * (r1 - r0) * sl.inner));
  for (std::int64_t o = 0; o < sl.outer; ++o) {
    const auto* begin = data.data() + (o * sl.rows + r0) * sl.inner;
    out.insert(out.end(), begin, begin + (r1 - r0) * sl.inner);
  }
  return out;
}

// Writes a block of n rows at row `at` of dst.
void put_rows(std::vector<float>& dst, const Slab& sl, std::int64_t at,
              const std::vector<float>& piece, std::int64_t n) {
  for (std::int64_t o = 0; o < sl.outer; ++o) {
    std::copy_n(piece.data() + o * n * sl.inner, n * sl.inner,
                dst.data() + (o * sl.rows + at) * sl.inner);
  }
}

// Adds a block of n rows into dst at row `at`.
void add_rows(std::vector<float>& dst, const Slab& sl, std::int64_t at,
              const std::vector<float>& piece, std::int64_t n) {
  for (std::int64_t o = 0; o < sl.outer; ++o) {
    const float* src = piece.data() + o * n * sl.inner;
    float* out = dst.data() + (o * sl.rows + at) * sl.inner;
    for (std::int64_t i = 0; i < n * sl.inner; ++i) out[i] += src[i];
  }
}

// Point-to-point messages of halo exchanges: a tag of their own (a pipeline
// tags its boundary tensors by id); between two ranks they match in order.
constexpr int kHaloTag = 32000;

}  // namespace

void Executor::exchange_halo(ir::OpId o, detail::KernelArgs& args) {
  const ir::Operator& op = g_.op(o);
  const auto dims = detail::halo_dims(g_, op, layouts_.ops[o].inputs[0], layouts_.mesh);
  WindowBlock& wb = windows_[o];
  wb = WindowBlock{};
  if (dims.empty()) return;
  std::vector<float> block = *args.in[0];
  ir::Shape shape = args.in_shapes[0];
  for (const detail::HaloDim& h : dims) {
    const std::int64_t mine = h.block_of(coords_);
    const detail::Range own = h.own(mine), need = h.needed(mine);
    const Slab sl = slab_of(shape, h.dim);
    const auto world = [&](std::int64_t b) {
      return options_.world_rank_base + static_cast<int>(h.rank_of(b, coords_, layouts_.mesh));
    };
    std::deque<std::vector<float>> outgoing;  // alive until finish_sends
    for (std::int64_t b = 0; b < h.parts; ++b) {
      const detail::Range r = detail::intersect(h.needed(b), own);
      if (b == mine || r.size() == 0) continue;
      outgoing.push_back(take_rows(block, sl, r.begin - own.begin, r.end - own.begin));
      comm_.send(world(b), outgoing.back().data(), outgoing.back().size(), kHaloTag);
    }
    ir::Shape next = shape;
    next[static_cast<std::size_t>(h.dim)] = need.size();
    const Slab nsl = slab_of(next, h.dim);
    std::vector<float> ext(static_cast<std::size_t>(nsl.outer * nsl.rows * nsl.inner));
    const detail::Range keep = detail::intersect(need, own);
    if (keep.size() > 0)
      put_rows(ext, nsl, keep.begin - need.begin,
               take_rows(block, sl, keep.begin - own.begin, keep.end - own.begin), keep.size());
    for (std::int64_t b = 0; b < h.parts; ++b) {
      const detail::Range r = detail::intersect(need, h.own(b));
      if (b == mine || r.size() == 0) continue;
      std::vector<float> piece(static_cast<std::size_t>(sl.outer * r.size() * sl.inner));
      comm_.recv(world(b), piece.data(), piece.size(), kHaloTag);
      put_rows(ext, nsl, r.begin - need.begin, piece, r.size());
    }
    comm_.finish_sends();
    block = std::move(ext);
    shape = next;
    args.window_in_begin[static_cast<std::size_t>(h.dim - 2)] = need.begin;
    args.window_out_begin[static_cast<std::size_t>(h.dim - 2)] = h.out_begin(mine);
  }
  wb.data = std::move(block);
  wb.shape = shape;
  wb.in_begin = args.window_in_begin;
  wb.out_begin = args.window_out_begin;
  args.in[0] = &wb.data;
  args.in_shapes[0] = shape;
}

void Executor::return_halo(ir::OpId o, std::vector<float> ext, std::vector<float>& dx) {
  const ir::Operator& op = g_.op(o);
  const auto dims = detail::halo_dims(g_, op, layouts_.ops[o].inputs[0], layouts_.mesh);
  // The block's shape after each forward exchange: shapes[i] before dim i's.
  std::vector<ir::Shape> shapes{
      local_shape(g_.tensor(op.inputs[0]).shape, layouts_.ops[o].inputs[0], layouts_.mesh)};
  for (const detail::HaloDim& h : dims) {
    ir::Shape next = shapes.back();
    next[static_cast<std::size_t>(h.dim)] = h.needed(h.block_of(coords_)).size();
    shapes.push_back(std::move(next));
  }
  for (std::size_t i = dims.size(); i-- > 0;) {
    const detail::HaloDim& h = dims[i];
    const std::int64_t mine = h.block_of(coords_);
    const detail::Range own = h.own(mine), need = h.needed(mine);
    const Slab sl = slab_of(shapes[i + 1], h.dim);  // ext: the rows `need`
    const Slab osl = slab_of(shapes[i], h.dim);     // the result: the rows `own`
    const auto world = [&](std::int64_t b) {
      return options_.world_rank_base + static_cast<int>(h.rank_of(b, coords_, layouts_.mesh));
    };
    // The gradient of rows another block holds goes back to it, in the
    // order the forward pass received them.
    std::deque<std::vector<float>> outgoing;  // alive until finish_sends
    for (std::int64_t b = 0; b < h.parts; ++b) {
      const detail::Range r = detail::intersect(need, h.own(b));
      if (b == mine || r.size() == 0) continue;
      outgoing.push_back(take_rows(ext, sl, r.begin - need.begin, r.end - need.begin));
      comm_.send(world(b), outgoing.back().data(), outgoing.back().size(), kHaloTag);
    }
    std::vector<float> mine_rows(static_cast<std::size_t>(osl.outer * osl.rows * osl.inner), 0.0f);
    const detail::Range keep = detail::intersect(need, own);
    if (keep.size() > 0)
      put_rows(mine_rows, osl, keep.begin - own.begin,
               take_rows(ext, sl, keep.begin - need.begin, keep.end - need.begin), keep.size());
    // Rows of this block that other blocks' windows read: their gradients
    // come back and add up.
    for (std::int64_t b = 0; b < h.parts; ++b) {
      const detail::Range r = detail::intersect(h.needed(b), own);
      if (b == mine || r.size() == 0) continue;
      std::vector<float> piece(static_cast<std::size_t>(osl.outer * r.size() * osl.inner));
      comm_.recv(world(b), piece.data(), piece.size(), kHaloTag);
      if (options_.drop_halo_return_op != o)
        add_rows(mine_rows, osl, r.begin - own.begin, piece, r.size());
    }
    comm_.finish_sends();
    ext = std::move(mine_rows);
  }
  for (std::size_t k = 0; k < dx.size(); ++k) dx[k] += ext[k];
}

void Executor::batch_norm_statistics(ir::OpId o, detail::KernelArgs& args) {
  const ir::Operator& op = g_.op(o);
  std::vector<float>& mean = bn_stats_[o][0];
  std::vector<float>& var = bn_stats_[o][1];
  if (!detail::batch_norm_batch_stats(op, layouts_.train)) {
    mean = *args.in.at(3);
    var = *args.in.at(4);
  } else {
    std::vector<float> sums = detail::batch_norm_sums(args);
    for (const std::uint32_t axis : detail::batch_norm_stat_axes(layouts_.ops[o].inputs[0]))
      comm_.all_reduce(axis, sums.data(), sums.size());
    const ir::Shape& full = args.full_in_shapes[0];
    const double count =
        static_cast<double>(ir::num_elements(full)) / static_cast<double>(full.at(1));
    detail::batch_norm_moments(sums, count, mean, var);
  }
  args.bn_mean = &mean;
  args.bn_var = &var;
}

std::vector<float> Executor::batch_norm_grad_sums(ir::OpId o, const detail::KernelArgs& args,
                                                  const std::vector<float>& dy) {
  std::vector<float> sums = detail::batch_norm_grad_sums(args, dy);
  for (const std::uint32_t axis : detail::batch_norm_stat_axes(layouts_.ops[o].inputs[0]))
    comm_.all_reduce(axis, sums.data(), sums.size());
  return sums;
}

void Executor::run_op(ir::OpId o, bool again) {
  const ir::Operator& op = g_.op(o);
  const OpLayouts& ol = layouts_.ops[o];
  const auto& mesh = layouts_.mesh;
  detail::KernelArgs args = op_args(o);
  std::vector<std::unique_ptr<LocalTensor>> outs;
  for (std::size_t j = 0; j < op.outputs.size(); ++j) {
    auto lt = std::make_unique<LocalTensor>();
    lt->full = g_.tensor(op.outputs[j]).shape;
    lt->layout = ol.outputs[j];
    lt->data.assign(static_cast<std::size_t>(ir::num_elements(args.out_shapes[j])), 0.0f);
    outs.push_back(std::move(lt));
  }
  for (auto& lt : outs) args.out.push_back(&lt->data);
  if (op.kind == ir::OpKind::BatchNorm) batch_norm_statistics(o, args);
  const std::vector<std::uint32_t> class_axes = loss_class_axes(g_, op, ol);
  if (class_axes.empty()) {
    detail::run_kernel(args);
  } else {
    class_parallel_cross_entropy(
        args, comm_, mesh, class_axes,
        local_offsets(args.full_in_shapes[0], ol.inputs[0], mesh, coords_).back(), row_lse_[o]);
  }
  for (std::size_t j = 0; j < op.outputs.size(); ++j) {
    if (again && options_.corrupt_recompute_op == o) {
      for (float& v : outs[j]->data) v *= 2.0f;
    }
    if (!again || !held_[op.outputs[j]]) held_[op.outputs[j]] = std::move(outs[j]);
  }
}

double Executor::loss() {
  double total = 0;
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const std::vector<float> y = gather_full(outputs_[i]);  // collective: every rank takes part
    if (y.size() == 1) {
      total += loss_scale_[i] * y[0];
      continue;
    }
    double sq = 0;
    for (const float v : y) sq += static_cast<double>(v) * v;
    if (!y.empty()) total += loss_scale_[i] * 0.5 * sq / static_cast<double>(y.size());
  }
  return total;
}

namespace {

LocalTensor zeros(const ir::Shape& full, const Layout& layout,
                  const std::vector<std::int64_t>& mesh) {
  LocalTensor z;
  z.full = full;
  z.layout = layout;
  z.data.assign(static_cast<std::size_t>(ir::num_elements(local_shape(full, layout, mesh))), 0.0f);
  return z;
}

void add_into(std::vector<float>& acc, const std::vector<float>& x) {
  for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
}

}  // namespace

Executor::PassState Executor::take_pass() {
  PassState s;
  s.held.resize(held_.size());
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    if (g_.tensor(t).kind != ir::TensorKind::Parameter) s.held[t] = std::move(held_[t]);
  }
  s.copies = std::exchange(copies_, std::vector<std::deque<LocalTensor>>(g_.num_tensors()));
  s.windows = std::exchange(windows_, std::vector<WindowBlock>(g_.num_operators()));
  s.bn_stats = std::exchange(bn_stats_, decltype(bn_stats_)(g_.num_operators()));
  s.row_lse = std::exchange(row_lse_, decltype(row_lse_)(g_.num_operators()));
  return s;
}

void Executor::restore_pass(PassState s) {
  if (s.held.size() != held_.size())
    throw Error(Errc::kInternal, "restore_pass: the state of another graph");
  for (ir::TensorId t = 0; t < g_.num_tensors(); ++t) {
    if (g_.tensor(t).kind != ir::TensorKind::Parameter) held_[t] = std::move(s.held[t]);
  }
  copies_ = std::move(s.copies);
  windows_ = std::move(s.windows);
  bn_stats_ = std::move(s.bn_stats);
  row_lse_ = std::move(s.row_lse);
}

const LocalTensor& Executor::input_gradient(ir::TensorId t) {
  if (std::find(options_.grad_inputs.begin(), options_.grad_inputs.end(), t) ==
      options_.grad_inputs.end())
    throw Error(Errc::kInternal, "input_gradient: '" + g_.tensor(t).name + "' is no grad input");
  return collect_gradient(t);
}

void Executor::backward(std::vector<std::pair<ir::TensorId, LocalTensor>> seeds) {
  const std::size_t n = g_.num_tensors();
  // Parameters' contributions wait for sync_gradients() (which takes them),
  // across microbatches; everything else starts afresh.
  if (contributions_.size() != n) contributions_.assign(n, {});
  for (ir::TensorId t = 0; t < n; ++t) {
    if (g_.tensor(t).kind != ir::TensorKind::Parameter) contributions_[t].clear();
  }
  grads_.clear();
  grads_.resize(n);
  // d loss / d y: 1 for a one-element output, y / |y| for the ½·mean(y²)
  // of any other, on the block each rank holds (the output is no longer
  // partial: run() summed it, and the dual of a partial sum is replicated).
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    const ir::TensorId t = outputs_[k];
    const double scale = loss_scale_[k];
    if (!grads_layout_.needs_grad[t] || scale == 0) continue;
    const LocalTensor& y = *held_[t];
    if (y.layout != grads_layout_.target[t])
      throw Error(Errc::kInternal, "output '" + g_.tensor(t).name + "' not in its gradient layout");
    LocalTensor dy = zeros(y.full, y.layout, layouts_.mesh);
    const auto total = static_cast<double>(ir::num_elements(y.full));
    for (std::size_t i = 0; i < dy.data.size(); ++i)
      dy.data[i] = static_cast<float>(total == 1 ? scale : scale * y.data[i] / total);
    contributions_[t].push_back(std::move(dy));
  }
  for (auto& [t, dy] : seeds) {
    if (!grads_layout_.needs_grad[t] || dy.layout != grads_layout_.target[t])
      throw Error(Errc::kInternal,
                  "gradient seed of '" + g_.tensor(t).name + "' not in its gradient layout");
    contributions_[t].push_back(std::move(dy));
  }
  const std::vector<ir::OpId> order = g_.topological_order();
  // ZeRO 3: a parameter is gathered again before the first backward (or
  // recomputed forward) that reads it, and freed after its first reader's.
  const auto after = [&](ir::OpId o) {
    param_bytes_.peak = std::max(param_bytes_.peak, held_parameter_bytes());
    for (const ir::TensorId t : g_.op(o).inputs) {
      if (zero3_[t] && first_reader_[t] == o) free_parameter(t);
    }
  };
  if (recompute_.empty()) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      gather_parameters(*it);
      backward_op(*it);
      after(*it);
    }
    return;
  }
  // Recomputation: a group's forward runs again when the backward pass
  // reaches its last operator (every reader of its dropped tensors is in
  // it), and what it made is freed once its readers' backward has run.
  group_done_.assign(static_cast<std::size_t>(recompute_.groups), 0);
  recompute_sent_ = RecomputeTraffic{};
  pending_reads_.assign(n, 0);
  for (const ir::Operator& op : g_.operators()) {
    for (const ir::TensorId t : op.inputs) ++pending_reads_[t];
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (recompute_.op[*it]) {
      // The gathers belong to the backward, not to the recomputation's share.
      const auto k = static_cast<std::size_t>(recompute_.group[*it]);
      if (!group_done_[k]) {
        for (const ir::OpId r : group_ops_[k]) gather_parameters(r);
      }
      recompute_group(recompute_.group[*it]);
    }
    gather_parameters(*it);
    backward_op(*it);
    release_after_backward(*it);
    after(*it);
  }
}

void Executor::backward_op(ir::OpId o) {
  const ir::Operator& op = g_.op(o);
  const std::vector<std::optional<Layout>>& dx_layouts = grads_layout_.input[o];
  if (std::none_of(dx_layouts.begin(), dx_layouts.end(),
                   [](const std::optional<Layout>& l) { return l.has_value(); }))
    return;
  const auto& mesh = layouts_.mesh;
  const OpLayouts& ol = layouts_.ops[o];
  detail::KernelArgs args = op_args(o, true);
  std::vector<LocalTensor> no_grad;  // outputs without a gradient (integers): zeros
  no_grad.reserve(op.outputs.size());
  std::vector<const detail::Buf*> dy;
  for (std::size_t j = 0; j < op.outputs.size(); ++j) {
    const ir::TensorId t = op.outputs[j];
    if (grads_layout_.needs_grad[t]) {
      dy.push_back(&collect_gradient(t).data);
    } else {
      Layout l = ol.outputs[j];
      for (auto& x : l) {
        if (x.kind == cost::LayoutKind::Partial) x = cost::AxisLayout::replicate();
      }
      no_grad.push_back(zeros(g_.tensor(t).shape, l, mesh));
      dy.push_back(&no_grad.back().data);
    }
  }
  std::vector<LocalTensor> dx(op.inputs.size());
  std::vector<detail::Buf*> dx_bufs(op.inputs.size(), nullptr);
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    if (!dx_layouts[j]) continue;
    // A partial contribution's block has the shape of the replicated input it stands for.
    dx[j] = zeros(g_.tensor(op.inputs[j]).shape, ol.inputs[j], mesh);
    dx[j].layout = *dx_layouts[j];
    dx_bufs[j] = &dx[j].data;
  }
  if (!loss_class_axes(g_, op, ol).empty()) {
    args.row_lse = &row_lse_[o];
    args.class_offset = local_offsets(args.full_in_shapes[0], ol.inputs[0], mesh, coords_).back();
  }
  // A window kernel that read halo rows gives their gradients too: into
  // a block shaped as it saw x, whose halo rows return_halo sends back.
  const bool halo = dx_bufs[0] != nullptr && !windows_[o].shape.empty();
  std::vector<float> ext;
  if (halo) {
    ext.assign(windows_[o].data.size(), 0.0f);
    dx_bufs[0] = &ext;
  }
  std::vector<float> bn_sums;
  if (op.kind == ir::OpKind::BatchNorm && dx_bufs[0] != nullptr &&
      detail::batch_norm_batch_stats(op, layouts_.train)) {
    bn_sums = batch_norm_grad_sums(o, args, *dy[0]);
    args.bn_grad_sums = &bn_sums;
  }
  detail::run_backward_kernel(args, dy, dx_bufs);
  if (halo) {
    return_halo(o, std::move(ext), dx[0].data);
    dx_bufs[0] = &dx[0].data;
  }
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    if (dx_bufs[j] == nullptr) continue;
    if (options_.corrupt_backward_op == o) {
      for (float& v : dx[j].data) v *= 2.0f;
    }
    contributions_[op.inputs[j]].push_back(std::move(dx[j]));
  }
}

std::vector<LocalTensor> Executor::contributions_by_layout(ir::TensorId t) {
  std::vector<LocalTensor>& parts = contributions_[t];
  std::vector<LocalTensor> groups;
  std::vector<bool> used(parts.size(), false);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (used[i]) continue;
    LocalTensor group = std::move(parts[i]);
    for (std::size_t k = i + 1; k < parts.size(); ++k) {
      if (used[k] || parts[k].layout != group.layout) continue;
      add_into(group.data, parts[k].data);
      used[k] = true;
    }
    groups.push_back(std::move(group));
  }
  parts.clear();
  return groups;
}

LocalTensor& Executor::collect_gradient(ir::TensorId t) {
  if (grads_[t]) return *grads_[t];
  const Layout& target = grads_layout_.target[t];
  auto sum = std::make_unique<LocalTensor>(zeros(g_.tensor(t).shape, target, layouts_.mesh));
  // Contributions in one layout add up locally; each distinct layout then
  // moves once (the order of first arrival, as predict_train_bytes counts).
  for (const LocalTensor& group : contributions_by_layout(t)) {
    if (group.layout == target) {
      add_into(sum->data, group.data);
    } else {
      add_into(sum->data, redist_.redistribute(group, target).data);
    }
  }
  grads_[t] = std::move(sum);
  return *grads_[t];
}

namespace {

// The axes a contribution is all-reduced over when all-reduces alone bring
// it to its target (a partial sum on those axes, the target's layout
// elsewhere): its block keeps its shape, so blocks of several parameters
// can share one buffer. Empty when other collectives are needed.
std::vector<std::uint32_t> all_reduce_axes(const LocalTensor& part, const Layout& target,
                                           const std::vector<std::int64_t>& mesh) {
  std::vector<std::uint32_t> axes;
  for (const RedistStep& st : redistribution_plan(part.layout, target, part.full, mesh)) {
    if (st.kind != StepKind::AllReduce) return {};
    axes.push_back(st.axis);
  }
  return axes;
}

// Parameter gradients waiting to be all-reduced together over the same axes.
struct GradientBucket {
  std::vector<float> data;
  std::vector<std::pair<LocalTensor*, std::size_t>> parts;  // sum to add into, offset
};

}  // namespace

void Executor::sync_gradients() {
  // Buckets by the axes they are all-reduced over, flushed when the next
  // part would overflow them and at the end, in axis order: the same
  // sequence of collectives on every rank (every rank has the same layouts).
  std::map<std::vector<std::uint32_t>, GradientBucket> open;
  const auto flush = [&](const std::vector<std::uint32_t>& axes, GradientBucket& b) {
    if (b.parts.empty()) return;
    for (const std::uint32_t axis : axes) comm_.all_reduce(axis, b.data.data(), b.data.size());
    for (auto& [sum, offset] : b.parts) {
      for (std::size_t i = 0; i < sum->data.size(); ++i) sum->data[i] += b.data[offset + i];
    }
    b = GradientBucket{};
  };
  for (const ir::TensorId t : trained_) {
    if (grads_[t]) continue;
    const Layout& target = grads_layout_.target[t];
    grads_[t] = std::make_unique<LocalTensor>(zeros(g_.tensor(t).shape, target, layouts_.mesh));
    LocalTensor& sum = *grads_[t];
    for (const LocalTensor& group : contributions_by_layout(t)) {
      if (group.layout == target) {
        add_into(sum.data, group.data);
        continue;
      }
      const std::vector<std::uint32_t> axes = options_.bucket_elements > 0
                                                  ? all_reduce_axes(group, target, layouts_.mesh)
                                                  : std::vector<std::uint32_t>{};
      if (zero3_[t] && !zero_scatter_axes(group.layout, target).empty()) {
        add_into(sum.data, redist_.scatter_partial(group, target).data);
        continue;
      }
      if (axes.empty()) {
        add_into(sum.data, redist_.redistribute(group, target).data);
        continue;
      }
      GradientBucket& b = open[axes];
      if (!b.parts.empty() && b.data.size() + group.data.size() > options_.bucket_elements)
        flush(axes, b);
      b.parts.emplace_back(&sum, b.data.size());
      b.data.insert(b.data.end(), group.data.begin(), group.data.end());
    }
  }
  for (auto& [axes, b] : open) flush(axes, b);
}

void Executor::optimizer_step(const OptimizerSettings& s) {
  ++optimizer_steps_;
  moment1_.resize(g_.num_tensors());
  moment2_.resize(g_.num_tensors());
  const double c1 = 1 - std::pow(s.beta1, static_cast<double>(optimizer_steps_));
  const double c2 = 1 - std::pow(s.beta2, static_cast<double>(optimizer_steps_));
  for (const ir::TensorId t : trained_) {
    if (!grads_[t]) throw Error(Errc::kInternal, "optimizer step before the gradients");
    // Under ZeRO 1 and 2 the gradient is a shard: its block of the
    // parameter (a local slice) is updated and gathered back. ZeRO 3 keeps
    // only the shard and updates it.
    const bool z3 = zero3_[t] != 0;
    if (z3 && shards_[t]->layout != grads_[t]->layout)
      throw Error(Errc::kInternal, "ZeRO 3: a shard and its gradient in other layouts");
    const bool sharded = !z3 && grads_[t]->layout != held_[t]->layout;
    LocalTensor shard;
    if (sharded) shard = redist_.redistribute(*held_[t], grads_[t]->layout);
    std::vector<float>& w = z3 ? shards_[t]->data : sharded ? shard.data : held_[t]->data;
    const std::vector<float>& gr = grads_[t]->data;
    std::vector<float>& m = moment1_[t];
    std::vector<float>& v = moment2_[t];
    m.resize(w.size(), 0.0f);
    v.resize(w.size(), 0.0f);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double g = gr[i];
      switch (s.kind) {
        case Optimizer::Sgd: w[i] = static_cast<float>(w[i] - s.lr * g); break;
        case Optimizer::SgdMomentum:
          m[i] = static_cast<float>(s.momentum * m[i] + g);
          w[i] = static_cast<float>(w[i] - s.lr * m[i]);
          break;
        case Optimizer::Adam: {
          m[i] = static_cast<float>(s.beta1 * m[i] + (1 - s.beta1) * g);
          v[i] = static_cast<float>(s.beta2 * v[i] + (1 - s.beta2) * g * g);
          const double mh = m[i] / c1, vh = v[i] / c2;
          w[i] = static_cast<float>(w[i] - s.lr * mh / (std::sqrt(vh) + s.eps));
          break;
        }
      }
    }
    if (sharded) *held_[t] = redist_.redistribute(shard, held_[t]->layout);
  }
  param_bytes_.kept = held_parameter_bytes();
  param_bytes_.peak = std::max(param_bytes_.peak, param_bytes_.kept);
}

const LocalTensor& Executor::block(ir::TensorId t) const {
  // A ZeRO-3 parameter outside the passes: this rank's shard.
  if (t < shards_.size() && shards_[t] && !held_[t]) return *shards_[t];
  if (t >= held_.size() || !held_[t])
    throw Error(Errc::kInternal, "no block for tensor " + std::to_string(t));
  return *held_[t];
}

std::vector<float> Executor::gather_full(ir::TensorId t) { return gather(block(t)); }

const LocalTensor& Executor::gradient(ir::TensorId t) const {
  if (t >= grads_.size() || !grads_[t])
    throw Error(Errc::kInternal, "no gradient for tensor " + std::to_string(t));
  return *grads_[t];
}

void Executor::set_gradient(ir::TensorId t, std::vector<float> data) {
  if (t >= grads_.size() || !grads_[t] || grads_[t]->data.size() != data.size())
    throw Error(Errc::kInternal, "set_gradient: '" + g_.tensor(t).name +
                                     "' has no gradient block of " + std::to_string(data.size()) +
                                     " elements");
  grads_[t]->data = std::move(data);
}

std::vector<float> Executor::gather_gradient(ir::TensorId t) { return gather(gradient(t)); }

std::vector<float> Executor::gather(const LocalTensor& b) {
  const auto& mesh = layouts_.mesh;
  for (const auto& x : b.layout) {
    if (x.kind == cost::LayoutKind::Partial)
      throw Error(Errc::kInternal, "gathering a partial tensor");
  }
  const bool root = comm_.rank() == 0;
  std::vector<float> all(root ? b.data.size() * static_cast<std::size_t>(comm_.size()) : 0);
  comm_.gather_to_root(b.data.data(), root ? all.data() : nullptr, b.data.size());
  if (!root) return {};
  std::vector<float> full(static_cast<std::size_t>(ir::num_elements(b.full)));
  const ir::Shape local = local_shape(b.full, b.layout, mesh);
  for (int r = 0; r < comm_.size(); ++r) {
    const auto off = local_offsets(b.full, b.layout, mesh, rank_coords(r, mesh));
    const float* src = all.data() + static_cast<std::size_t>(r) * b.data.size();
    for_each_element(b.full, local, off, [&](std::int64_t i, std::int64_t global) {
      full[static_cast<std::size_t>(global)] = src[i];
    });
  }
  return full;
}

}  // namespace recsearch::exec
