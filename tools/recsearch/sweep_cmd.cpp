// SPDX-License-Identifier: Apache-2.0
// `recsearch sweep GRAPH`: trade-off curves (docs/sweep.md). Sweeps memory
// budgets on one cluster (`--memory 10:80:5 --mesh 2x8`) or clusters at one
// budget (`--devices 8:4096`, `--mesh 1x8,2x8`, `--nodes 1:64 --cluster
// FILE`), and writes the points as CSV, JSON or an HTML page. The sweep
// itself and the writers are the library's (recsearch/sweep.hpp): this file
// only turns options into a Problem, clusters and budgets.
#include "sweep_cmd.hpp"

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipeline_cmd.hpp"
#include "recsearch/error.hpp"
#include "recsearch/sweep.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct SweepArgs {
  std::string graph;
  std::optional<std::string> devices;  // list or range of counts
  std::optional<std::string> mesh;     // comma list of meshes
  std::optional<std::string> cluster_file;
  std::optional<std::string> nodes;   // range of outermost level sizes
  std::optional<std::string> memory;  // list or range in GiB
  std::string mode = "train";
  std::string algo = "rec";
  std::string effort = "default";  // rec's --effort
  int threads = 0;
  std::optional<std::string> cost_file;
  TrainingArgs training;
  std::string stages = "1";
  std::string format = "csv";
  std::string output = "-";
  bool quiet = false;
};

// The clusters the options name; a cluster file's "cost" goes into `cost`.
std::vector<Cluster> sweep_clusters_of(const SweepArgs& a, CostParams& cost) {
  const int given =
      int{a.devices.has_value()} + int{a.mesh.has_value()} + int{a.cluster_file.has_value()};
  if (given != 1)
    throw Error(Errc::kUsage, given == 0 ? "give one of --devices N[,N..], --mesh AxB[,CxD..] or "
                                           "--cluster FILE"
                                         : "give only one of --devices, --mesh and --cluster");
  if (a.nodes && !a.cluster_file)
    throw Error(Errc::kUsage, "--nodes resizes a --cluster FILE's outermost level: give --cluster");
  std::vector<Cluster> out;
  if (a.devices) {
    for (std::int64_t n : parse_sweep_counts(*a.devices, "--devices"))
      out.push_back(Cluster::flat(n));
  } else if (a.mesh) {
    std::string_view rest = *a.mesh;
    while (true) {
      const std::size_t comma = rest.find(',');
      out.push_back(Cluster::mesh(parse_mesh(std::string(rest.substr(0, comma)))));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  } else {
    ClusterArgs one;
    one.cluster_file = a.cluster_file;
    const Cluster base = cluster_from_args(one, cost);
    if (!a.nodes) return {base};
    for (std::int64_t n : parse_sweep_counts(*a.nodes, "--nodes"))
      out.push_back(with_outer_size(base, n));
  }
  return out;
}

int run_sweep(const SweepArgs& a) {
  check_output_writable(a.output);
  const auto algorithm = search::parse_algorithm(a.algo);
  if (!algorithm) throw Error(Errc::kUsage, "unknown --algo '" + a.algo + "'");
  std::vector<double> budgets;
  if (a.memory) {
    budgets = parse_sweep_reals(*a.memory, "--memory");
    for (double& b : budgets) b *= kGiB;
  }

  const Problem problem = load_problem(a.graph, a.quiet);
  // Coefficients as `search` gathers them: graph file, cluster file, --cost.
  search::SearchOptions opts = problem.options();
  opts.algorithm = *algorithm;
  opts.effort = effort_of(a.effort);
  opts.mode = a.mode == "infer" ? Mode::Infer : Mode::Train;
  opts.threads = a.threads;
  pin_training(a.training, opts.training);
  apply_stages(a.stages, opts);
  const std::vector<Cluster> clusters = sweep_clusters_of(a, opts.cost);
  apply_cost_file(a.cost_file, opts.cost);

  Sweep sweep;
  if (clusters.size() > 1) {
    if (budgets.size() > 1)
      throw Error(Errc::kUsage,
                  "sweep one thing at a time: several clusters and several --memory budgets");
    if (!budgets.empty()) opts.cost.memory_budget_bytes = budgets.front();
    sweep = sweep_clusters(problem, clusters, opts);
  } else {
    if (budgets.empty())
      throw Error(Errc::kUsage,
                  "nothing to sweep: give --memory A:B:STEP (GiB) on one cluster, or several "
                  "clusters (--devices 8,16,32, --mesh 1x8,2x8, --nodes 1:64 with --cluster)");
    sweep = sweep_memory(problem, clusters.front(), opts, std::move(budgets));
  }

  std::string text = a.format == "json"   ? sweep_to_json(sweep)
                     : a.format == "html" ? sweep_to_html(sweep)
                                          : sweep_to_csv(sweep);
  write_output(a.output, std::move(text));
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<SweepArgs>();
  auto devices = std::make_shared<std::string>();
  auto mesh = std::make_shared<std::string>();
  auto cluster = std::make_shared<std::string>();
  auto nodes = std::make_shared<std::string>();
  auto memory = std::make_shared<std::string>();
  auto cost = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "step time and memory of GRAPH's plans across memory budgets or cluster sizes");
  cmd->add_option("GRAPH", a->graph, "graph JSON file or ONNX model ('-' for stdin)")->required();
  CLI::Option* devices_opt =
      cmd->add_option("--devices", *devices, "device counts: 8,16,64 or a range 8:4096 (doubling)")
          ->type_name("LIST");
  CLI::Option* mesh_opt =
      cmd->add_option("--mesh", *mesh, "meshes, outermost level first: 1x8,2x8,4x8")
          ->type_name("AxB[,..]");
  CLI::Option* cluster_opt =
      cmd->add_option("--cluster", *cluster, "cluster JSON file (recsearch.cluster)")
          ->type_name("FILE");
  CLI::Option* nodes_opt =
      cmd->add_option("--nodes", *nodes, "sizes of the cluster file's outermost level: 1:384")
          ->type_name("LIST");
  CLI::Option* memory_opt =
      cmd->add_option("--memory", *memory,
                      "budgets per device in GiB: 10:80:5 (step 5), 10:80 (doubling), 16,40,80; "
                      "one value with several clusters")
          ->type_name("GiB");
  cmd->add_option("--mode", a->mode, "train (default) or infer")
      ->check(CLI::IsMember({"train", "infer"}));
  cmd->add_option("--algo", a->algo,
                  "rec (default), data-parallel, megatron, grid, ilp or exhaustive")
      ->check(CLI::IsMember({"rec", "data-parallel", "megatron", "grid", "ilp", "exhaustive"}));
  add_effort_option(cmd, a->effort);
  cmd->add_option("--threads", a->threads, "worker threads, 0 = all (the plans are the same)")
      ->check(CLI::Range(0, 65536));
  CLI::Option* cost_opt =
      cmd->add_option("--cost", *cost, "cost coefficients JSON file")->type_name("FILE");
  add_training_options(cmd, a->training);
  cmd->add_option("--stages", a->stages,
                  "pipeline device groups: 1 (default, none), N, or auto (searched)")
      ->type_name("N|auto");
  cmd->add_option("--format", a->format, "csv (default), json or html")
      ->check(CLI::IsMember({"csv", "json", "html"}));
  cmd->add_option("-o,--output", a->output, "output file ('-' for stdout, the default)")
      ->type_name("OUT");
  cmd->add_flag("-q,--quiet", a->quiet, "no warnings about the graph on stderr");
  reg.push_back({cmd, [=] {
                   const auto take = [](CLI::Option* o, const std::string& v) {
                     return o->count() > 0 ? std::optional<std::string>(v) : std::nullopt;
                   };
                   a->devices = take(devices_opt, *devices);
                   a->mesh = take(mesh_opt, *mesh);
                   a->cluster_file = take(cluster_opt, *cluster);
                   a->nodes = take(nodes_opt, *nodes);
                   a->memory = take(memory_opt, *memory);
                   a->cost_file = take(cost_opt, *cost);
                   return run_sweep(*a);
                 }});
}

}  // namespace recsearch::cli
