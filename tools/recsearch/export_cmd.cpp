// SPDX-License-Identifier: Apache-2.0
// `recsearch export PLAN --graph GRAPH --to jax|dtensor|mindspore|megatron
// [-o OUT]`: a plan as a file for the framework that will run it.
//
//   jax        a Mesh over the plan's axes and a jax.sharding.PartitionSpec
//              per tensor (PARAMETERS and ACTIVATIONS), with NamedShardings,
//              and the same layouts as XLA HloSharding and Shardy strings;
//   dtensor    a torch DeviceMesh over the same axes and per tensor one
//              placement per mesh axis (Shard(d), Replicate(), Partial()),
//              with a helper that distributes a model's parameters;
//   mindspore  per operator its shard() strategy, and megatron the
//              arguments of pretrain_gpt.py (export_frameworks.cpp); these
//              two also take pipelined plans.
//
// The mesh is the plan's: one axis per cut (c0, c1, ...), outermost first,
// each named with its cluster level in a comment. Device d sits at the
// mixed-radix coordinates of its cut digits, cut 0 most significant, which is
// the row-major order both frameworks use for a reshaped device list, so the
// files need no device permutation. The plan is read back and evaluated as
// `eval` does, so the layouts are the evaluator's, not the file's text.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "export_frameworks.hpp"
#include "pipeline_cmd.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/solution.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

struct ExportArgs {
  std::string plan;
  std::string graph;
  ReadOptions read;
  std::string to;
  std::string output = "-";
  ClusterArgs cluster;
};

// A Python string literal: what JSON escapes, Python reads alike.
std::string py_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// `(2, 2, 2)`, `("c0", "c1")`: a Python tuple, with the trailing comma of a
// one-element tuple.
std::string py_tuple(const std::vector<std::string>& items) {
  std::string out = "(";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + (items.size() == 1 ? ",)" : ")");
}

// The head both files share: what was exported, the file's imports, the
// mesh constants.
std::string mesh_preamble(const Solution& s, const ExportArgs& a, std::string_view framework,
                          std::string_view imports) {
  const Cluster& c = s.cluster();
  std::vector<std::string> sizes;
  std::vector<std::string> names;
  std::string levels;
  for (const Cut& cut : c.cuts()) {
    sizes.push_back(std::to_string(cut.size));
    names.push_back(py_string(cut.axis));
    levels += (levels.empty() ? "" : ", ") + cut.axis + " on " + c.levels().at(cut.level).name;
  }
  std::string out;
  out += "# " + std::string(framework) + " layouts of a recsearch plan, written by\n";
  out += "#   recsearch export " + source_name(a.plan) + " --graph " + source_name(a.graph) +
         " --to " + a.to + "\n";
  out += "# graph " + s.problem().graph().name() + ", " + std::to_string(c.num_devices()) +
         " devices; " + s.summary() + ".\n";
  out += "# Mesh axes, outermost first: " + (levels.empty() ? "none (one device)" : levels) + ".\n";
  out += "# Device d is at the row-major coordinates of d in MESH_SHAPE.\n";
  out += imports;
  out += "\nMESH_SHAPE = " + py_tuple(sizes) + "\n";
  out += "MESH_AXES = " + py_tuple(names) + "\n";
  return out;
}

// The tensors of the graph, parameters first, in graph order.
std::vector<const ir::Tensor*> tensors_of(const Solution& s, bool parameters) {
  std::vector<const ir::Tensor*> out;
  for (const ir::Tensor& t : s.problem().graph().tensors())
    if ((t.kind == ir::TensorKind::Parameter) == parameters) out.push_back(&t);
  return out;
}

// P(None, "c0", ("c1", "c2")): per tensor dim, the axes that split it, in
// order (major first, as PartitionSpec reads a tuple).
std::string partition_spec(const TensorPlacement& p) {
  std::string out = "P(";
  for (std::size_t d = 0; d < p.dims.size(); ++d) {
    const auto& axes = p.dims[d];
    out += d ? ", " : "";
    if (axes.empty()) {
      out += "None";
    } else if (axes.size() == 1) {
      out += py_string(axes[0]);
    } else {
      std::vector<std::string> quoted;
      for (const auto& x : axes) quoted.push_back(py_string(x));
      out += py_tuple(quoted);
    }
  }
  return out + ")";
}

// Where a sharded dim of tensor t holds strided rows (a merge region,
// algebra::StridedDim): "dim 0 holds strided rows: view it as [128, 8]
// and split dim 1 instead", else empty. Neither PartitionSpec, HloSharding,
// Shardy nor DTensor has a word for it: they would read contiguous blocks.
std::string strided_note(const Solution& s, const ir::Tensor& t, const TensorPlacement& p) {
  const ir::Graph& g = s.problem().graph();
  const std::optional<ir::TensorId> id = g.find_tensor(t.name);
  if (!id) return "";
  for (std::size_t d = 0; d < p.dims.size() && d < t.shape.size(); ++d) {
    if (p.dims[d].empty()) continue;
    const std::int64_t outer = algebra::produced_outer(g, s.problem().spaces(), *id, d);
    if (outer > 1)
      return "dim " + std::to_string(d) + " holds strided rows: view it as [" +
             std::to_string(outer) + ", " + std::to_string(t.shape[d] / outer) +
             "] and split the second instead";
  }
  return "";
}

// Counts the strided tensors it finds into `strided`.
std::string jax_entries(const Solution& s, bool parameters, std::size_t& strided) {
  std::string out;
  for (const ir::Tensor* t : tensors_of(s, parameters)) {
    const TensorPlacement p = s.sharding(t->name);
    out += "    " + py_string(t->name) + ": " + partition_spec(p) + ",";
    if (!p.partial.empty()) {
      out += "  # partial sum over";
      for (const auto& x : p.partial) out += " " + x;
    }
    const std::string note = strided_note(s, *t, p);
    if (!note.empty()) {
      out += (p.partial.empty() ? "  # " : "; ") + note;
      ++strided;
    }
    out += "\n";
  }
  return out;
}

// The warning of an export whose file marks strided tensors.
void warn_strided(std::size_t strided, std::string_view to) {
  if (strided > 0)
    std::cerr << "recsearch: warning: " << strided << " tensor(s) are sharded as strided rows "
              << "(merge regions), which " << to << " cannot say; the file marks each with a "
              << "comment naming the view to split instead\n";
}

// The mesh axes of p in tile order: those that split dim 0 (major first),
// then dim 1, ..., then the axes that split nothing (the replicated ways).
std::vector<std::size_t> tile_axes(const TensorPlacement& p, const std::vector<Cut>& cuts) {
  std::vector<std::size_t> order;
  std::vector<bool> used(cuts.size(), false);
  for (const auto& axes : p.dims)
    for (const auto& name : axes)
      for (std::size_t i = 0; i < cuts.size(); ++i)
        if (cuts[i].axis == name && !used[i]) {
          used[i] = true;
          order.push_back(i);
        }
  for (std::size_t i = 0; i < cuts.size(); ++i)
    if (!used[i]) order.push_back(i);
  return order;
}

// XLA's HloSharding text of p in the iota form: the device list is the
// mesh's row-major device ids reshaped to the mesh, transposed to tile_axes
// order and read as tiles, e.g. {devices=[1,2,4]<=[2,4]T(1,0)
// last_tile_dim_replicate}.
std::string hlo_sharding(const TensorPlacement& p, const std::vector<Cut>& cuts) {
  std::int64_t devices = 1;
  for (const Cut& c : cuts) devices *= c.size;
  std::vector<std::int64_t> tiles;
  std::int64_t tiled = 1;
  for (const auto& axes : p.dims) {
    std::int64_t t = 1;
    for (const auto& name : axes)
      for (const Cut& c : cuts)
        if (c.axis == name) t *= c.size;
    tiles.push_back(t);
    tiled *= t;
  }
  if (tiled == 1) return "{replicated}";
  const bool replicate = tiled < devices;
  if (replicate) tiles.push_back(devices / tiled);
  std::string out = "{devices=[";
  for (std::size_t i = 0; i < tiles.size(); ++i) out += (i ? "," : "") + std::to_string(tiles[i]);
  out += "]<=[";
  for (std::size_t i = 0; i < cuts.size(); ++i)
    out += (i ? "," : "") + std::to_string(cuts[i].size);
  out += "]";
  const std::vector<std::size_t> order = tile_axes(p, cuts);
  bool identity = true;
  for (std::size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == i;
  if (!identity) {
    out += "T(";
    for (std::size_t i = 0; i < order.size(); ++i) out += (i ? "," : "") + std::to_string(order[i]);
    out += ")";
  }
  return out + (replicate ? " last_tile_dim_replicate}" : "}");
}

// Shardy's attribute of p on the mesh @mesh: #sdy.sharding<@mesh, [{"c0"},
// {}]>, the axes of each dim major first.
std::string sdy_sharding(const TensorPlacement& p) {
  std::string out = "#sdy.sharding<@mesh, [";
  for (std::size_t d = 0; d < p.dims.size(); ++d) {
    out += d ? ", {" : "{";
    for (std::size_t i = 0; i < p.dims[d].size(); ++i)
      out += (i ? ", \"" : "\"") + p.dims[d][i] + "\"";
    out += "}";
  }
  return out + "]>";
}

// Every tensor's HloSharding or Shardy text, parameters first.
std::string sharding_strings(const Solution& s, bool hlo) {
  std::string out;
  for (const bool parameters : {true, false})
    for (const ir::Tensor* t : tensors_of(s, parameters)) {
      const TensorPlacement p = s.sharding(t->name);
      out += "    " + py_string(t->name) + ": " +
             py_string(hlo ? hlo_sharding(p, s.cluster().cuts()) : sdy_sharding(p)) + ",";
      if (!p.partial.empty()) {
        out += "  # partial sum over";
        for (const auto& x : p.partial) out += " " + x;
      }
      out += "\n";
    }
  return out;
}

// sdy.mesh @mesh = <["c0"=2, "c1"=4]>
std::string sdy_mesh(const std::vector<Cut>& cuts) {
  std::string out = "sdy.mesh @mesh = <[";
  for (std::size_t i = 0; i < cuts.size(); ++i)
    out += (i ? ", \"" : "\"") + cuts[i].axis + "\"=" + std::to_string(cuts[i].size);
  return out + "]>";
}

std::string export_jax(const Solution& s, const ExportArgs& a) {
  std::string out = mesh_preamble(s, a, "JAX", R"(
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
)");
  out += R"(

def make_mesh(devices=None):
    """The plan's mesh over `devices` (default: jax.devices())."""
    if devices is None:
        import jax
        devices = jax.devices()
    return Mesh(np.asarray(devices).reshape(MESH_SHAPE), MESH_AXES)


# Per parameter, its PartitionSpec. A tensor that is a partial sum over some
# axes (PartitionSpec has no word for it) says so in a comment.
PARAMETERS = {
)";
  std::size_t strided = 0;
  out += jax_entries(s, true, strided);
  out += "}\n\n# Inputs, activations and constants, as the plan lays them out.\nACTIVATIONS = {\n";
  out += jax_entries(s, false, strided);
  warn_strided(strided, "JAX's PartitionSpec and XLA's sharding strings");
  out += R"(}


def shardings(mesh, specs=PARAMETERS):
    """{tensor name: NamedSharding} on `mesh`, e.g. for jax.device_put."""
    return {name: NamedSharding(mesh, spec) for name, spec in specs.items()}


# The same layouts as XLA sharding strings, for tools below JAX: GSPMD's
# HloSharding text (the iota form: device ids reshaped to MESH_SHAPE,
# transposed, read as tiles, replicated ways last) and Shardy attributes on
# the mesh SDY_MESH. Neither has a word for a partial sum: such a tensor is
# written with its split, and a comment.
)";
  out += "SDY_MESH = " + py_string(sdy_mesh(s.cluster().cuts())) + "\n";
  out += "HLO_SHARDINGS = {\n" + sharding_strings(s, true) + "}\n";
  out += "SDY_SHARDINGS = {\n" + sharding_strings(s, false) + "}\n";
  return out;
}

// (Shard(1), Replicate(), Partial()): one placement per mesh axis. A dim
// split by several axes out of mesh order cannot be said with Shard alone:
// the comment tells which order the plan wants.
std::string placements(const TensorPlacement& p, const std::vector<Cut>& cuts, std::string& note) {
  std::vector<std::string> items;
  for (const Cut& cut : cuts) {
    std::string item = "Replicate()";
    for (std::size_t d = 0; d < p.dims.size(); ++d)
      for (const auto& x : p.dims[d])
        if (x == cut.axis) item = "Shard(" + std::to_string(d) + ")";
    for (const auto& x : p.partial)
      if (x == cut.axis) item = "Partial()";
    items.push_back(item);
  }
  const auto index = [&](const std::string& axis) {
    for (std::size_t i = 0; i < cuts.size(); ++i)
      if (cuts[i].axis == axis) return i;
    return cuts.size();
  };
  for (std::size_t d = 0; d < p.dims.size(); ++d) {
    const auto& axes = p.dims[d];
    for (std::size_t i = 1; i < axes.size(); ++i) {
      if (index(axes[i]) < index(axes[i - 1])) {
        note = "dim " + std::to_string(d) + " is split by";
        for (const auto& x : axes) note += " " + x;
        note += " in this order, not the mesh's";
      }
    }
  }
  return py_tuple(items);
}

std::string dtensor_entries(const Solution& s, bool parameters, std::size_t& strided) {
  std::string out;
  for (const ir::Tensor* t : tensors_of(s, parameters)) {
    std::string note;
    const TensorPlacement p = s.sharding(t->name);
    const std::string pl = placements(p, s.cluster().cuts(), note);
    const std::string rows = strided_note(s, *t, p);
    if (!rows.empty()) {
      note += (note.empty() ? "" : "; ") + rows;
      ++strided;
    }
    out +=
        "    " + py_string(t->name) + ": " + pl + "," + (note.empty() ? "" : "  # " + note) + "\n";
  }
  return out;
}

std::string export_dtensor(const Solution& s, const ExportArgs& a) {
  std::string out = mesh_preamble(s, a, "PyTorch DTensor", R"(
try:  # torch >= 2.4
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
except ImportError:  # torch 2.1 - 2.3
    from torch.distributed._tensor import Replicate, Shard, distribute_tensor
    from torch.distributed._tensor.placement_types import _Partial as Partial
)");
  out += R"(

def make_mesh(device_type="cuda"):
    """The plan's mesh as a named DeviceMesh (run under torchrun with
    prod(MESH_SHAPE) ranks)."""
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_AXES)


# Per parameter, one placement per mesh axis (in MESH_AXES order).
PARAMETERS = {
)";
  std::size_t strided = 0;
  out += dtensor_entries(s, true, strided);
  out += "}\n\n# Inputs, activations and constants, as the plan lays them out.\nACTIVATIONS = {\n";
  out += dtensor_entries(s, false, strided);
  warn_strided(strided, "DTensor's placements");
  out += R"(}


def distribute_parameters(named_tensors, mesh, placements=PARAMETERS):
    """{name: torch.Tensor} -> {name: DTensor} laid out as the plan says;
    names the plan does not know are left out."""
    return {name: distribute_tensor(t, mesh, list(placements[name]))
            for name, t in named_tensors.items() if name in placements}
)";
  return out;
}

// The command line a file says it was made by.
std::string command_of(const ExportArgs& a) {
  return "recsearch export " + source_name(a.plan) + " --graph " + source_name(a.graph) + " --to " +
         a.to;
}

// The plan file's top-level "algorithm" (the first one in the file: stages
// carry none), without "+pipeline"; "file" when there is none.
std::string algorithm_of(std::string_view text) {
  const std::string_view key = "\"algorithm\"";
  std::size_t at = text.find(key);
  if (at == std::string_view::npos) return "file";
  at = text.find('"', text.find(':', at + key.size()));
  const std::size_t end = at == std::string_view::npos ? at : text.find('"', at + 1);
  if (end == std::string_view::npos) return "file";
  std::string name(text.substr(at + 1, end - at - 1));
  if (const std::size_t plus = name.find('+'); plus != std::string::npos) name.resize(plus);
  return name;
}

std::string step_summary(const plan::Summary& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "step %.4g s, %.4g GiB per device", s.step_time_s,
                s.memory_per_device_bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// mindspore or megatron: writes the file; Megatron's approximations are
// also said on stderr, so that none goes unread.
void write_framework(const ExportArgs& a, const ExportInput& in) {
  if (a.to == "mindspore") {
    write_output(a.output, export_mindspore(in));
    return;
  }
  std::vector<std::string> approximations;
  std::string text = export_megatron(in, approximations);
  write_output(a.output, std::move(text));
  for (const std::string& x : approximations)
    std::cerr << "recsearch: warning: megatron export is approximate: " << x << "\n";
}

// A pipelined plan, read and evaluated as `eval` does, as stages on their
// stage graphs and the group cluster.
void export_pipeline(const ExportArgs& a, const Problem& problem, const Cluster& cluster,
                     const CostParams& cost, const std::string& text, const std::string& source) {
  if (a.to == "jax" || a.to == "dtensor")
    throw Error(Errc::kUsage, "--to " + a.to +
                                  " exports plans without stages; a pipelined plan exports "
                                  "--to megatron or --to mindspore");
  const ir::Graph& g = problem.graph();
  const plan::PipelinePlan pp = io::parse_pipeline(text, source, g, problem.spaces(), cluster);
  const plan::PipelineEvaluation pe =
      plan::evaluate_pipeline(g, problem.spaces(), cluster, pp, cost);
  const Cluster group = plan::stage_cluster(cluster, pp.groups);
  std::vector<plan::StageGraph> graphs;
  graphs.reserve(pp.stages.size());
  for (const plan::Stage& st : pp.stages)
    graphs.push_back(plan::stage_graph(g, problem.spaces(), st.first, st.last));
  ExportInput in{
      &g, &cluster, {}, &pp, command_of(a), step_summary(pe.summary), algorithm_of(text)};
  for (std::size_t j = 0; j < pp.stages.size(); ++j)
    in.stages.push_back({&graphs[j].graph, &graphs[j].spaces, &group, &pp.stages[j].plan,
                         &pe.stages[j], pp.stages[j].group});
  write_framework(a, in);
}

int run_export(const ExportArgs& a) {
  if (a.cluster.count() > 1)
    throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
  if (a.graph == "-" && a.plan == "-")
    throw Error(Errc::kUsage, "GRAPH and PLAN cannot both be read from stdin");
  check_output_writable(a.output);
  const Problem problem = load_problem(a.graph, /*quiet=*/true, a.read);
  CostParams cost = problem.cost();
  const std::string plan_source = source_name(a.plan);
  const std::string plan_text = io::read_text_file(a.plan);
  const Cluster cluster = cluster_for_plan(a.cluster, plan_text, plan_source, cost);
  if (is_pipeline_plan(plan_text, plan_source)) {
    export_pipeline(a, problem, cluster, cost, plan_text, plan_source);
    return 0;
  }
  const Solution solution =
      evaluate(problem, problem.parse_plan(plan_text, plan_source, cluster), cluster, cost);
  if (a.to == "jax" || a.to == "dtensor") {
    write_output(a.output, a.to == "jax" ? export_jax(solution, a) : export_dtensor(solution, a));
    return 0;
  }
  const ExportInput in{&problem.graph(),
                       &cluster,
                       {{&problem.graph(), &problem.spaces(), &solution.cluster(), &solution.plan(),
                         &solution.evaluation(), 0}},
                       nullptr,
                       command_of(a),
                       solution.summary(),
                       algorithm_of(plan_text)};
  write_framework(a, in);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<ExportArgs>();
  auto c = std::make_shared<ClusterOptions>();
  auto g = std::make_shared<GraphOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write PLAN for a framework: JAX PartitionSpecs, PyTorch DTensor placements, MindSpore "
      "shard() strategies or Megatron-LM arguments");
  cmd->add_option("PLAN", a->plan, "plan JSON file ('-' for stdin)")->required();
  cmd->add_option("-g,--graph", a->graph, "the graph the plan is for (JSON or .onnx)")
      ->required()
      ->type_name("GRAPH");
  cmd->add_option("--to", a->to,
                  "jax (PartitionSpec per tensor), dtensor (DeviceMesh and placements), "
                  "mindspore (shard() strategy per operator) or megatron (pretrain_gpt.py "
                  "arguments, a bash array)")
      ->required()
      ->check(CLI::IsMember({"jax", "dtensor", "mindspore", "megatron"}));
  cmd->add_option("-o,--output", a->output,
                  "Python file (bash for megatron; '-' for stdout, the default)")
      ->type_name("OUT");
  add_graph_options(cmd, *g);
  add_cluster_options(cmd, *c);
  reg.push_back({cmd, [=] {
                   a->cluster = c->args();
                   a->read = g->read_options();
                   return run_export(*a);
                 }});
}

}  // namespace recsearch::cli
