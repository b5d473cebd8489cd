// SPDX-License-Identifier: Apache-2.0
// scale_probe: one point of a scaling experiment. Reads (or generates) a
// graph, builds its operator spaces, runs the search once and prints one JSON
// line with the time of each phase and the memory used, so that the sweep
// script (sweep.py) can fit growth exponents phase by phase.
//
//   scale_probe GRAPH.json --mesh 64x64 [--threads 1]
//   scale_probe gen:gpt:layers=30300,hidden=1024,heads=16,batch=64 --devices 4096
//   scale_probe GRAPH.json --mesh 64x64 --write plan.json   (also times the plan writer)
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "recsearch/gen/generate.hpp"
#include "recsearch/recsearch.hpp"

using namespace recsearch;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU seconds of the whole process: on a shared machine they are a steadier
// measure of the work than wall time (with --threads 1 they are the work).
double cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Resident set now, in MiB (statm counts pages).
double rss_mib() {
  std::ifstream f("/proc/self/statm");
  long size = 0;
  long resident = 0;
  f >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

double peak_rss_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// "gen:gpt:layers=10,hidden=1024" -> ModelSpec.
gen::ModelSpec parse_gen(const std::string& text) {
  const auto rest = text.substr(4);
  const auto colon = rest.find(':');
  gen::ModelSpec s;
  const std::string model = rest.substr(0, colon);
  bool is_preset = false;
  for (const auto& n : gen::preset_names()) is_preset |= n == model;
  if (is_preset) {
    s = gen::preset(model);
  } else {
    s.family = gen::parse_family(model);
  }
  if (colon == std::string::npos) return s;
  std::string kv = rest.substr(colon + 1);
  std::size_t pos = 0;
  while (pos < kv.size()) {
    auto end = kv.find(',', pos);
    if (end == std::string::npos) end = kv.size();
    const std::string item = kv.substr(pos, end - pos);
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw Error(Errc::kUsage, "probe: expected key=value in " + item);
    const std::string k = item.substr(0, eq);
    const std::int64_t v = std::stoll(item.substr(eq + 1));
    if (k == "layers") s.layers = v;
    else if (k == "hidden") s.hidden = v;
    else if (k == "heads") s.heads = v;
    else if (k == "seq") s.seq = v;
    else if (k == "vocab") s.vocab = v;
    else if (k == "batch") s.batch = v;
    else if (k == "experts") s.experts = v;
    else if (k == "depth") s.depth = v;
    else if (k == "width") s.width = v;
    else if (k == "ops") s.ops = v;
    else if (k == "seed") s.seed = static_cast<std::uint64_t>(v);
    else throw Error(Errc::kUsage, "probe: unknown key " + k);
    pos = end + 1;
  }
  return s;
}

std::vector<std::int64_t> parse_mesh(const std::string& s) {
  std::vector<std::int64_t> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto end = s.find('x', pos);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoll(s.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: scale_probe GRAPH|gen:MODEL[:k=v,..] [--devices N|--mesh AxB] "
                 "[--threads N] [--mode train|infer] [--memory GiB] [--eval] [--write PLAN]\n";
    return 2;
  }
  const std::string input = argv[1];
  std::vector<std::int64_t> mesh = {8};
  search::SearchOptions opts;
  opts.threads = 1;
  // The plan is not written out: the summary is all a scaling point needs.
  opts.detailed_evaluation = false;
  bool time_eval = false;
  std::string write_path;
  for (int i = 2; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--eval") {
      time_eval = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) throw Error(Errc::kUsage, "probe: " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--devices") mesh = {std::stoll(v)};
    else if (k == "--mesh") mesh = parse_mesh(v);
    else if (k == "--threads") opts.threads = std::stoi(v);
    else if (k == "--mode") opts.mode = v == "infer" ? Mode::Infer : Mode::Train;
    else if (k == "--memory") opts.cost.memory_budget_bytes = std::stod(v) * (1 << 30);
    else if (k == "--write") write_path = v;
    else throw Error(Errc::kUsage, "probe: unknown option " + k);
  }
  // Writing a plan needs the detailed evaluation the CLI keeps for it.
  if (!write_path.empty()) opts.detailed_evaluation = true;
  const Cluster cluster = mesh.size() == 1 ? Cluster::flat(mesh[0]) : Cluster::mesh(mesh);

  const double rss0 = rss_mib();
  double read_s = 0;
  double parse_s = 0;
  std::size_t file_bytes = 0;
  auto t = Clock::now();
  double c = cpu_s();
  ir::Graph g;
  if (input.rfind("gen:", 0) == 0) {
    g = gen::build_graph(parse_gen(input));
    parse_s = since(t);
  } else {
    g = io::read_graph_file(input);
    parse_s = since(t);
    std::ifstream f(input, std::ios::binary | std::ios::ate);
    file_bytes = static_cast<std::size_t>(f.tellg());
  }
  const double parse_cpu = cpu_s() - c;
  const double rss_graph = rss_mib();
  c = cpu_s();
  t = Clock::now();
  const auto spaces = algebra::build_op_spaces(g);
  const double spaces_s = since(t);
  const double spaces_cpu = cpu_s() - c;
  const double rss_spaces = rss_mib();
  // As `recsearch search -o` at the default detail: a summary plan file
  // needs its redistributions summed, not listed.
  if (!write_path.empty())
    opts.list_redistributions = io::lists_redistributions(io::PlanDetail::Auto, g.num_operators());
  c = cpu_s();
  t = Clock::now();
  const auto res = search::run(g, spaces, cluster, opts);
  const double search_s = since(t);
  const double search_cpu = cpu_s() - c;
  const double rss_search = rss_mib();
  // The plan file as `recsearch search -o` writes it (default detail, indent 2).
  double write_s = 0;
  double write_cpu = 0;
  if (!write_path.empty()) {
    c = cpu_s();
    t = Clock::now();
    io::write_plan_file(write_path, g, spaces, cluster, res.plan, res.eval);
    write_s = since(t);
    write_cpu = cpu_s() - c;
  }
  // search::run already evaluates its plan; a second evaluation is timed
  // only on request, since its memory would inflate the peak.
  double eval_s = 0;
  if (time_eval) {
    t = Clock::now();
    (void)plan::evaluate(g, spaces, cluster, res.plan, opts.cost);
    eval_s = since(t);
  }
  const auto& ev = res.eval;

  std::printf(
      "{\"graph\":\"%s\",\"ops\":%zu,\"tensors\":%zu,\"devices\":%lld,\"mesh_axes\":%zu,"
      "\"threads\":%d,\"file_bytes\":%zu,\"read_s\":%.4f,\"parse_s\":%.4f,\"spaces_s\":%.4f,"
      "\"search_s\":%.4f,\"eval_s\":%.4f,\"rungs\":%d,\"step_time_s\":%.6g,"
      "\"memory_per_device_gib\":%.4g,\"graph_mib\":%.1f,\"spaces_mib\":%.1f,"
      "\"peak_rss_mib\":%.1f,\"fold_period\":%zu,\"fold_repeats\":%zu,"
      "\"parse_cpu_s\":%.4f,\"spaces_cpu_s\":%.4f,\"search_cpu_s\":%.4f,"
      "\"search_mib\":%.1f,\"write_s\":%.4f,\"write_cpu_s\":%.4f}\n",
      g.name().c_str(), g.num_operators(), g.num_tensors(),
      static_cast<long long>(cluster.num_devices()), cluster.cuts().size(), opts.threads,
      file_bytes, read_s, parse_s, spaces_s, search_s, eval_s, res.memory_rungs,
      ev.summary.step_time_s, ev.summary.memory_per_device_bytes / (1024.0 * 1024 * 1024),
      rss_graph - rss0, rss_spaces - rss_graph, peak_rss_mib(), res.fold_period, res.fold_repeats,
      parse_cpu, spaces_cpu, search_cpu, rss_search - rss_spaces, write_s, write_cpu);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "scale_probe: " << e.what() << '\n';
  return 1;
}
