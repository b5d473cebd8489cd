// SPDX-License-Identifier: Apache-2.0
// The MindSpore and Megatron-LM exports of `recsearch export`
// (export_frameworks.hpp).
//
// MindSpore takes what the plan file already calls `strategy`: per operator,
// per input, the split count of each dim (Primitive.shard(in_strategy)).
// The split counts are the plan's; which device holds which slice is
// MindSpore's own device matrix, so the file gives the counts and says so.
//
// Megatron-LM takes no per-operator layout: a mesh axis is either tensor
// parallel (it splits weights), data parallel (it splits the batch) or
// context parallel (it splits the sequence of the inputs). export_megatron
// gives each axis of each stage that role from the tensors' shardings and
// refuses a plan whose axes are none or several of them, rather than round
// it to the nearest Megatron shape.
#include "export_frameworks.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/mesh_names.hpp"
#include "recsearch/ir/op_kind.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::cli {
namespace {

// The head both files start with, as comments: what was exported, from
// which command, on which devices, with the plan's figures.
std::string head(const ExportInput& in, std::string_view what) {
  const Cluster& c = *in.cluster;
  std::string levels;
  for (const Level& l : c.levels())
    levels += (levels.empty() ? "" : " x ") + l.name + " " + std::to_string(l.size);
  std::string out;
  out += "# " + std::string(what) + " of a recsearch plan, written by\n";
  out += "#   " + in.command + "\n";
  out += "# graph " + in.graph->name() + ", " + std::to_string(c.num_devices()) + " devices (" +
         levels + "); " + in.summary + ".\n";
  if (in.pipeline)
    out += "# Pipelined: " + std::to_string(in.pipeline->groups) + " device groups x " +
           std::to_string(in.pipeline->virtual_stages) + " stages each, " +
           std::to_string(in.pipeline->microbatches) + " microbatches (" +
           std::string(plan::schedule_name(in.pipeline->schedule)) + ").\n";
  return out;
}

std::string py_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';  // names from user files: a control character is never meant
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string int_tuple(const std::vector<std::int64_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + (v.size() == 1 ? ",)" : ")");
}

std::string strategy_tuple(const ir::Strategy& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + int_tuple(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// ---------------------------------------------------------------- MindSpore

// The mindspore.ops primitive of each kind, and what differs from ours
// (empty: the same inputs in the same layout). "" as primitive: MindSpore's
// has no shard() (it lays such operators out itself).
struct MsPrimitive {
  std::string_view primitive;
  std::string_view note;
};

MsPrimitive ms_primitive(ir::OpKind k) {
  using K = ir::OpKind;
  switch (k) {
    case K::MatMul: return {"MatMul", ""};
    case K::BatchMatMul: return {"BatchMatMul", ""};
    case K::Einsum: return {"", "ops.Einsum has no shard(): write it as MatMul/BatchMatMul"};
    case K::Conv2D: return {"Conv2D", ""};
    case K::MaxPool: return {"MaxPool", ""};
    case K::AvgPool: return {"AvgPool", ""};
    case K::GlobalAvgPool: return {"ReduceMean", "over axes (2, 3), keep_dims=True"};
    case K::BatchNorm: return {"BatchNorm", ""};
    case K::LayerNorm: return {"LayerNorm", ""};
    case K::RMSNorm: return {"RmsNorm", ""};
    case K::Softmax: return {"Softmax", ""};
    case K::LogSoftmax: return {"LogSoftmax", ""};
    case K::Add: return {"Add", ""};
    case K::Sub: return {"Sub", ""};
    case K::Mul: return {"Mul", ""};
    case K::Div: return {"RealDiv", ""};
    case K::Pow: return {"Pow", ""};
    case K::Maximum: return {"Maximum", ""};
    case K::Minimum: return {"Minimum", ""};
    case K::BiasAdd: return {"BiasAdd", "MindSpore's bias runs along dim 1 (NCHW)"};
    case K::ReLU: return {"ReLU", ""};
    case K::GeLU: return {"GeLU", ""};
    case K::SiLU: return {"SiLU", ""};
    case K::Sigmoid: return {"Sigmoid", ""};
    case K::Tanh: return {"Tanh", ""};
    case K::Exp: return {"Exp", ""};
    case K::Log: return {"Log", ""};
    case K::Sqrt: return {"Sqrt", ""};
    case K::Neg: return {"Neg", ""};
    case K::Cast: return {"Cast", ""};
    case K::Dropout: return {"Dropout", ""};
    case K::Identity: return {"", "no operator in MindSpore: drop it"};
    case K::Reshape: return {"", "ops.Reshape takes no strategy: MindSpore redistributes"};
    case K::Transpose: return {"Transpose", ""};
    case K::Flatten: return {"", "ops.Flatten: use Reshape, which takes no strategy"};
    case K::Squeeze: return {"Squeeze", ""};
    case K::Unsqueeze: return {"ExpandDims", ""};
    case K::Concat: return {"Concat", ""};
    case K::Split: return {"Split", ""};
    case K::Slice: return {"StridedSlice", ""};
    case K::ReduceSum: return {"ReduceSum", ""};
    case K::ReduceMean: return {"ReduceMean", ""};
    case K::ReduceMax: return {"ReduceMax", ""};
    case K::Gather: return {"Gather", ""};
    case K::OneHot: return {"OneHot", "MindSpore's strategy is of the output"};
    case K::SoftmaxCrossEntropy:
      return {"SparseSoftmaxCrossEntropyWithLogits", "labels as integer class ids"};
    case K::Attention:
      return {"FlashAttentionScore", "input_layout=\"BNSD\"; q, k, v as here, mask last"};
    case K::Custom: return {"", "a custom operator: shard() it as its own primitive allows"};
  }
  return {"", ""};
}

// The product of the sizes of the axes on which op is replicated.
std::int64_t replicated_ways(const plan::Plan& p, ir::OpId op) {
  std::int64_t n = 1;
  for (std::size_t a = 0; a < p.mesh.size(); ++a)
    if (p.cuts[op][a] == plan::kReplicated) n *= p.mesh[a].size;
  return n;
}

// "c0:i c1:j" with the level of each axis: what the strategy came from.
std::string cuts_comment(const ExportStage& s, const std::vector<algebra::OpSpace>& spaces,
                         ir::OpId op) {
  std::string out;
  for (std::size_t a = 0; a < s.plan->mesh.size(); ++a) {
    const int l = s.plan->cuts[op][a];
    if (l == plan::kReplicated) continue;
    out += (out.empty() ? "" : " ") + s.plan->mesh[a].axis + ":" +
           spaces[op].loops[static_cast<std::size_t>(l)].name;
  }
  return out.empty() ? "replicated" : out;
}

// Loops cut by the plan that no input has (an output-only loop): shard()'s
// in_strategy cannot say them.
std::string unsaid_loops(const ExportStage& s, const std::vector<algebra::OpSpace>& spaces,
                         ir::OpId op) {
  std::string out;
  const algebra::OpSpace& sp = spaces[op];
  for (std::size_t a = 0; a < s.plan->mesh.size(); ++a) {
    const int l = s.plan->cuts[op][a];
    if (l == plan::kReplicated) continue;
    bool in_input = false;
    for (const auto& dims : sp.inputs)
      in_input |= std::find(dims.begin(), dims.end(), l) != dims.end();
    if (!in_input) out += (out.empty() ? "" : ", ") + sp.loops[static_cast<std::size_t>(l)].name;
  }
  return out;
}

}  // namespace

namespace {

std::string ms_entries(const ExportInput& in) {
  std::string out;
  for (std::size_t j = 0; j < in.stages.size(); ++j) {
    const ExportStage& s = in.stages[j];
    if (in.pipeline)
      out +=
          "    # stage " + std::to_string(j) + " on device group " + std::to_string(s.group) + "\n";
    for (ir::OpId op = 0; op < s.graph->num_operators(); ++op) {
      const ir::Operator& o = s.graph->op(op);
      const std::string unsaid = unsaid_loops(s, *s.spaces, op);
      out += "    " + py_string(o.name) + ": (" + py_string(o.type) + ", " +
             strategy_tuple(s.eval->strategies.at(op)) + ", " +
             std::to_string(replicated_ways(*s.plan, op)) +
             (in.pipeline ? ", " + std::to_string(s.group) : "") + "),  # " +
             cuts_comment(s, *s.spaces, op) +
             (unsaid.empty() ? "" : "; " + unsaid + " (no input has it) is not in the strategy") +
             "\n";
    }
  }
  return out;
}

std::string ms_primitives(const ExportInput& in) {
  std::vector<std::pair<std::string, ir::OpKind>> types;
  for (const ExportStage& s : in.stages)
    for (ir::OpId op = 0; op < s.graph->num_operators(); ++op) {
      const ir::Operator& o = s.graph->op(op);
      const auto same = [&](const auto& t) { return t.first == o.type; };
      if (std::find_if(types.begin(), types.end(), same) == types.end())
        types.emplace_back(o.type, o.kind);
    }
  std::string out;
  for (const auto& [type, kind] : types) {
    const MsPrimitive p = ms_primitive(kind);
    out += "    " + py_string(type) + ": " +
           (p.primitive.empty() ? std::string("None") : py_string(p.primitive)) + "," +
           (p.note.empty() ? "" : "  # " + std::string(p.note)) + "\n";
  }
  return out;
}

}  // namespace

std::string export_mindspore(const ExportInput& in) {
  const std::int64_t per_stage = in.stages.front().cluster->num_devices();
  std::string out = head(in, "MindSpore shard() strategies");
  out += "#\n# STRATEGIES: per operator, (its type, its strategy, the ways it is replicated" +
         std::string(in.pipeline ? ", its pipeline stage" : "") + ").";
  out += R"(
# The strategy is MindSpore's in_strategy form: per input, the split count
# of each dim (Primitive.shard). The split counts of an operator's loops
# times its replicated ways are the devices of its stage. The counts are
# the plan's; which device holds which slice is MindSpore's device matrix,
# not necessarily the plan's mesh order. The comment after each names the
# mesh axes that cut it and the loop each cuts.

DEVICE_NUM = )" +
         std::to_string(in.cluster->num_devices()) +
         "\nDEVICES_PER_STAGE = " + std::to_string(per_stage) +
         "\nPIPELINE_STAGES = " + std::to_string(in.pipeline ? in.pipeline->groups : 1) + R"(

# recsearch operator type -> mindspore.ops primitive name (None: it takes no
# shard(); MindSpore lays it out itself). The comment says what differs.
PRIMITIVES = {
)";
  out += ms_primitives(in);
  out += "}\n\nSTRATEGIES = {\n";
  out += ms_entries(in);
  out += R"(}


def shard(primitives, strategies=STRATEGIES):
    """{operator name: mindspore.ops primitive instance} -> the same dict,
    each primitive given its strategy with .shard(); names the plan does not
    have are left as they are. Under
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel",
                                 device_num=DEVICE_NUM,
                                 pipeline_stages=PIPELINE_STAGES)
    e.g. in a Cell: self.matmul = ops.MatMul().shard(STRATEGIES["fc1"][1])."""
    for name, prim in primitives.items():
        if name in strategies:
            prim.shard(strategies[name][1])
    return primitives
)";
  return out;
}

// ---------------------------------------------------------------- Megatron

namespace {

enum class Role { Data, Context, Tensor };  // the order Megatron numbers ranks, outer first

std::string_view role_name(Role r) {
  switch (r) {
    case Role::Data: return "data parallel";
    case Role::Context: return "context parallel";
    case Role::Tensor: return "tensor parallel";
  }
  return "";
}

// What one axis of one stage splits, with an example of each.
struct AxisUse {
  std::string weight;    // "w1 dim 1": a parameter it shards (or makes partial)
  std::string batch;     // "x dim 0": a graph input's batch dim it splits
  std::string sequence;  // "tokens dim 1": another dim of a graph input
};

// `batch`: per tensor of the whole graph, its batch dim or -1
// (plan::batch_dims). A stage's inputs include what earlier stages send it,
// whose batch may lie at any dim; the stage graph shares the whole graph's
// tensor names.
std::vector<AxisUse> axis_uses(const ir::Graph& whole, const std::vector<int>& batch,
                               const ExportStage& s) {
  std::vector<AxisUse> uses(s.plan->mesh.size());
  const auto& tensors = s.graph->tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const ir::Tensor& x = tensors[t];
    const plan::TensorSharding& sh = s.eval->tensors.at(t);
    const std::optional<ir::TensorId> id = whole.find_tensor(x.name);
    const int batch_dim = id ? batch[*id] : -1;
    for (std::size_t d = 0; d < sh.dims.size(); ++d)
      for (const std::uint32_t a : sh.dims[d]) {
        const std::string what = x.name + " dim " + std::to_string(d);
        if (x.kind == ir::TensorKind::Parameter) {
          if (uses[a].weight.empty()) uses[a].weight = what;
        } else if (x.kind == ir::TensorKind::Input) {
          std::string& slot = static_cast<int>(d) == batch_dim ? uses[a].batch : uses[a].sequence;
          if (slot.empty()) slot = what;
        }
      }
    if (x.kind == ir::TensorKind::Parameter)
      for (const std::uint32_t a : sh.partial)
        if (uses[a].weight.empty()) uses[a].weight = x.name + " (partial)";
  }
  return uses;
}

[[noreturn]] void not_megatron(const std::string& why) {
  throw Error(Errc::kPlan, "the plan is not expressible in Megatron-LM's terms: " + why +
                               "; export it --to mindspore, jax or dtensor, or pin Megatron's "
                               "layout with `search --algo megatron`");
}

std::string stage_axis(const ExportInput& in, std::size_t j, std::size_t a) {
  const ExportStage& s = in.stages[j];
  return (in.pipeline ? "stage " + std::to_string(j) + " axis " : "axis ") + s.plan->mesh[a].axis +
         " (" + io::mesh_dims_text(*s.cluster, *s.plan, {static_cast<std::uint32_t>(a)}) + ")";
}

// The role of each axis of stage j; not_megatron when some axis has none or
// more than one.
std::vector<Role> axis_roles(const ExportInput& in, const std::vector<int>& batch, std::size_t j) {
  const std::vector<AxisUse> uses = axis_uses(*in.graph, batch, in.stages[j]);
  std::vector<Role> roles;
  for (std::size_t a = 0; a < uses.size(); ++a) {
    const AxisUse& u = uses[a];
    if (!u.weight.empty() && !u.batch.empty())
      not_megatron(stage_axis(in, j, a) + " splits both a weight (" + u.weight +
                   ") and the batch (" + u.batch + ")");
    if (!u.weight.empty()) {
      roles.push_back(Role::Tensor);  // with a sequence split: sequence parallel, below
    } else if (!u.batch.empty() && !u.sequence.empty()) {
      not_megatron(stage_axis(in, j, a) + " splits both the batch (" + u.batch +
                   ") and the sequence (" + u.sequence + ")");
    } else if (!u.batch.empty()) {
      roles.push_back(Role::Data);
    } else if (!u.sequence.empty()) {
      roles.push_back(Role::Context);
    } else {
      not_megatron(stage_axis(in, j, a) +
                   " splits no weight and no input: its devices only repeat the work");
    }
  }
  return roles;
}

// Per role, the product of its axes' sizes and the axes on the named mesh.
struct Sizes {
  std::array<std::int64_t, 3> size{1, 1, 1};
  std::array<std::string, 3> dims;
};

Sizes role_sizes(const ExportStage& s, const std::vector<Role>& roles) {
  Sizes out;
  for (std::size_t r = 0; r < 3; ++r) {
    std::vector<std::uint32_t> axes;
    for (std::size_t a = 0; a < roles.size(); ++a)
      if (static_cast<std::size_t>(roles[a]) == r) {
        axes.push_back(static_cast<std::uint32_t>(a));
        out.size[r] *= s.plan->mesh[a].size;
      }
    out.dims[r] = axes.empty() ? "-" : io::mesh_dims_text(*s.cluster, *s.plan, axes);
  }
  return out;
}

bool is_norm(ir::OpKind k) { return k == ir::OpKind::LayerNorm || k == ir::OpKind::RMSNorm; }

// Sequence parallelism: the norms cut on a tensor-parallel axis (Megatron
// splits them along the sequence there). Counts {cut, all} norms.
std::pair<std::size_t, std::size_t> norms_cut_on_tp(const ExportStage& s,
                                                    const std::vector<Role>& roles) {
  std::size_t cut = 0, all = 0;
  for (ir::OpId op = 0; op < s.graph->num_operators(); ++op) {
    if (!is_norm(s.graph->op(op).kind)) continue;
    ++all;
    for (std::size_t a = 0; a < roles.size(); ++a)
      if (roles[a] == Role::Tensor && s.plan->cuts[op][a] != plan::kReplicated) {
        ++cut;
        break;
      }
  }
  return {cut, all};
}

// Whether a weight feeds a linear layer (a matrix product), which Megatron
// splits on the tensor-parallel ranks; position embeddings and norms it
// keeps whole.
bool linear_weight(const ir::Graph& g, const ir::Tensor& t) {
  if (t.kind != ir::TensorKind::Parameter || t.rank() < 2) return false;
  for (const ir::OpId c : t.consumers) {
    const ir::OpKind k = g.op(c).kind;
    if (k == ir::OpKind::MatMul || k == ir::OpKind::BatchMatMul || k == ir::OpKind::Einsum)
      return true;
  }
  return false;
}

// Linear-layer weights left whole on every tensor-parallel axis (Megatron
// splits them all): count and the first name.
std::pair<std::size_t, std::string> whole_weights(const ExportStage& s,
                                                  const std::vector<Role>& roles) {
  std::size_t n = 0;
  std::string first;
  const auto& tensors = s.graph->tensors();
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (!linear_weight(*s.graph, tensors[t])) continue;
    bool split = false;
    for (const auto& axes : s.eval->tensors.at(t).dims)
      for (const std::uint32_t a : axes) split |= roles[a] == Role::Tensor;
    if (!split) {
      ++n;
      if (first.empty()) first = tensors[t].name;
    }
  }
  return {n, first};
}

struct MegatronShape {
  Sizes sizes;
  std::vector<Role> roles;  // of stage 0
};

void approximate(std::string& out, std::vector<std::string>& approximations, std::string what) {
  out += "# APPROXIMATION: " + what + "\n";
  approximations.push_back(std::move(what));
}

}  // namespace

std::string export_megatron(const ExportInput& in, std::vector<std::string>& approximations) {
  const ExportStage& s0 = in.stages.front();
  if (s0.plan->mode != Mode::Train)
    not_megatron("it is an inference plan, and pretrain_gpt.py trains");
  // The whole graph's spaces: a plain plan's stage is the whole graph.
  std::vector<algebra::OpSpace> whole_spaces;
  if (in.pipeline != nullptr) whole_spaces = algebra::build_op_spaces(*in.graph);
  const std::vector<int> batch_dim =
      plan::batch_dims(*in.graph, in.pipeline != nullptr ? whole_spaces : *s0.spaces).tensor_dim;
  const std::vector<Role> roles = axis_roles(in, batch_dim, 0);
  const Sizes sizes = role_sizes(s0, roles);
  for (std::size_t j = 1; j < in.stages.size(); ++j) {
    const std::vector<Role> other = axis_roles(in, batch_dim, j);
    if (other != roles)
      not_megatron("stage " + std::to_string(j) +
                   " gives its mesh axes other roles than stage 0 (Megatron runs one tensor, "
                   "context and data parallel shape on every stage)");
    if (!(in.stages[j].plan->training == s0.plan->training))
      not_megatron("stage " + std::to_string(j) +
                   " has other training settings than stage 0 (recomputation, ZeRO)");
  }
  const std::int64_t tp = sizes.size[static_cast<std::size_t>(Role::Tensor)];
  const std::int64_t cp = sizes.size[static_cast<std::size_t>(Role::Context)];
  const std::int64_t dp = sizes.size[static_cast<std::size_t>(Role::Data)];
  const std::int64_t pp = in.pipeline ? static_cast<std::int64_t>(in.pipeline->groups) : 1;
  const std::int64_t vp = in.pipeline ? static_cast<std::int64_t>(in.pipeline->virtual_stages) : 1;
  const std::int64_t world = in.cluster->num_devices();
  if (tp * cp * dp * pp != world)
    throw Error(Errc::kInternal, "megatron export: TP x CP x DP x PP is not the device count");

  const std::int64_t batch = plan::batch_size(*in.graph);
  const std::int64_t m = in.pipeline ? in.pipeline->microbatches : s0.plan->training.microbatches;
  if (batch <= 0) not_megatron("the graph has no batch dimension (its inputs' dim 0 differ)");
  if (batch % (dp * m) != 0)
    not_megatron("the batch of " + std::to_string(batch) + " does not divide into " +
                 std::to_string(m) + " microbatches on " + std::to_string(dp) +
                 " data-parallel ranks");

  std::string out = "#!/usr/bin/env bash\n" + head(in, "Megatron-LM arguments (pretrain_gpt.py)");
  out += "#\n# Mesh axes by role, on the named mesh dims (stage 0's group):\n";
  for (std::size_t r = 0; r < 3; ++r)
    out += "#   " + std::string(role_name(static_cast<Role>(r))) + " " +
           std::to_string(sizes.size[r]) + ": " + sizes.dims[r] + "\n";
  if (in.pipeline)
    out += "#   pipeline parallel " + std::to_string(pp) + ": the groups of " +
           in.cluster->levels().front().name + "\n";
  out += "# Megatron derives the data-parallel size: world size / (TP x CP x PP) = " +
         std::to_string(world) + " / (" + std::to_string(tp) + " x " + std::to_string(cp) + " x " +
         std::to_string(pp) + ") = " + std::to_string(dp) + ".\n";
  out +=
      "# pretrain_gpt.py also needs the model's own arguments (--num-layers,\n"
      "# --hidden-size, --num-attention-heads, --seq-length, ...).\n";

  if (in.algorithm != "megatron" && tp * cp > 1)
    approximate(out, approximations,
                "the plan was made by `" + in.algorithm +
                    "`, not Megatron's layout: the sizes are its axes' roles, but which dim of "
                    "each weight a tensor-parallel axis splits is the plan's (see --to "
                    "mindspore), and Megatron's column/row pairs may differ");
  for (std::size_t a = 1; a < roles.size(); ++a)
    if (roles[a] < roles[a - 1]) {
      approximate(out, approximations,
                  "rank order: " + stage_axis(in, 0, a) + " (" + std::string(role_name(roles[a])) +
                      ") lies outside " + stage_axis(in, 0, a - 1) + " (" +
                      std::string(role_name(roles[a - 1])) +
                      "); Megatron numbers tensor-parallel ranks first, then context, then "
                      "data parallel, so its groups run on other links than the plan priced");
      break;
    }
  const auto [norms_cut, norms] = norms_cut_on_tp(s0, roles);
  const bool sequence_parallel = tp > 1 && norms_cut > 0;
  if (sequence_parallel && norms_cut < norms)
    approximate(out, approximations,
                std::to_string(norms_cut) + " of " + std::to_string(norms) +
                    " norms are cut on the tensor-parallel axes; --sequence-parallel splits "
                    "them all");
  if (tp > 1) {
    const auto [whole, first] = whole_weights(s0, roles);
    if (whole > 0)
      approximate(out, approximations,
                  std::to_string(whole) + " linear-layer weight(s) (first: " + first +
                      ") whole on the tensor-parallel axes; Megatron splits every linear "
                      "layer");
  }
  if (cp > 1)
    approximate(out, approximations,
                "context parallel: the plan splits the inputs' sequence; Megatron's "
                "--context-parallel-size runs ring attention, which the plan did not price");

  const plan::Training& tr = s0.plan->training;
  std::string args;
  const auto arg = [&](const std::string& a) { args += "    " + a + "\n"; };
  arg("--tensor-model-parallel-size " + std::to_string(tp));
  arg("--pipeline-model-parallel-size " + std::to_string(pp));
  if (cp > 1) arg("--context-parallel-size " + std::to_string(cp));
  if (vp > 1) {
    out += "# Set NUM_LAYERS to the model's layer count: each of the " + std::to_string(pp * vp) +
           " stages takes NUM_LAYERS / " + std::to_string(pp * vp) + " layers.\n";
    arg("--num-layers-per-virtual-pipeline-stage $((${NUM_LAYERS:?set NUM_LAYERS to the layer "
        "count} / " +
        std::to_string(pp * vp) + "))");
  }
  if (sequence_parallel) arg("--sequence-parallel");
  arg("--micro-batch-size " + std::to_string(batch / (dp * m)));
  arg("--global-batch-size " + std::to_string(batch));
  switch (tr.recompute) {
    case plan::Recompute::None: break;
    case plan::Recompute::Selective: arg("--recompute-granularity selective"); break;
    case plan::Recompute::Full:
      arg("--recompute-granularity full");
      arg("--recompute-method uniform");
      arg("--recompute-num-layers 1");
      break;
  }
  bool mixed = false;
  for (const ExportStage& s : in.stages) mixed |= plan::mixed_recompute(*s.graph, tr);
  if (mixed)
    approximate(out, approximations,
                "the plan recomputes some operators otherwise than `" +
                    std::string(plan::recompute_name(tr.recompute)) +
                    "` (per block or pinned); Megatron's --recompute-method block "
                    "--recompute-num-layers K says only `full on the first K layers of a stage`");
  if (tr.zero_stage >= 1 && tr.zero_stage <= 2) arg("--use-distributed-optimizer");
  if (tr.zero_stage == 2)
    approximate(out, approximations,
                "ZeRO stage 2: Megatron's distributed optimizer shards the optimizer state "
                "and reduce-scatters gradients, but keeps a whole gradient buffer per rank");
  if (tr.zero_stage == 3) {
    arg("--use-torch-fsdp2");
    approximate(out, approximations,
                "ZeRO stage 3: --use-torch-fsdp2 (Megatron-Core 0.9 or later) shards the "
                "weights too, with PyTorch's FSDP2 rather than the plan's gathers");
  }
  out += "\nTENSOR_PARALLEL=" + std::to_string(tp) + "\nPIPELINE_PARALLEL=" + std::to_string(pp) +
         "\nCONTEXT_PARALLEL=" + std::to_string(cp) + "\nDATA_PARALLEL=" + std::to_string(dp) +
         "  # derived by Megatron, not an argument\n" + "WORLD_SIZE=" + std::to_string(world) +
         "\n\nMEGATRON_ARGS=(\n" + args + ")\n";
  out +=
      "\n# e.g.  torchrun --nproc-per-node GPUS_PER_NODE --nnodes NODES ... \\\n"
      "#           pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" MODEL_AND_DATA_ARGS...\n";
  return out;
}

}  // namespace recsearch::cli
