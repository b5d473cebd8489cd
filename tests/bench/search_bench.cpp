// `meson benchmark`: time of building operator spaces and of the rec search
// on large graphs (a stacked transformer and a random DAG) over 1,024
// devices, and how it grows with the graph (ratios near 2 per doubling mean
// near-linear work). Prints one line per run; not a test: it asserts only
// that the plan it times is the one the evaluator accepts.
#include <chrono>
#include <cstdio>
#include <string>

#include "graph_factories.hpp"
#include "recsearch/search/search.hpp"

using namespace recsearch;
using recsearch::testing::add_op;

namespace {

// `layers` pre-LN transformer blocks (23 operators each), chained.
ir::Graph gpt_stack(int layers, std::int64_t b = 8, std::int64_t s = 1024, std::int64_t h = 2048,
                    std::int64_t heads = 16) {
  ir::Graph g("gpt" + std::to_string(layers));
  const std::int64_t d = h / heads;
  const auto dt = ir::DType::BF16;
  g.add_tensor("x", {b, s, h}, dt, ir::TensorKind::Input);
  std::string in = "x";
  using V = std::vector<std::int64_t>;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    auto T = [&](const std::string& n, ir::Shape shp, bool param = false) {
      g.add_tensor(p + n, std::move(shp), dt,
                   param ? ir::TensorKind::Parameter : ir::TensorKind::Input);
    };
    auto O = [&](const std::string& n, const char* type, std::vector<std::string> ins,
                 std::vector<std::string> outs, ir::Attrs a = {}) {
      for (auto& i : ins)
        if (i != in) i = p + i;
      for (auto& o : outs) o = p + o;
      add_op(g, p + n, type, ins, outs, std::move(a));
    };
    T("ln1_s", {h}, true);
    T("ln1_b", {h}, true);
    T("ln1", {b, s, h});
    for (const char* n : {"wq", "wk", "wv", "wo"}) T(n, {h, h}, true);
    for (const char* n : {"q", "k", "v", "ctx2", "o", "res1"}) T(n, {b, s, h});
    for (const char* n : {"q4", "k4", "v4"}) T(n, {b, s, heads, d});
    T("qt", {b, heads, s, d});
    T("kt", {b, heads, d, s});
    T("vt", {b, heads, s, d});
    T("sc", {b, heads, s, s});
    T("pr", {b, heads, s, s});
    T("ctx", {b, heads, s, d});
    T("ctxt", {b, s, heads, d});
    T("ln2_s", {h}, true);
    T("ln2_b", {h}, true);
    T("ln2", {b, s, h});
    T("w1", {h, 4 * h}, true);
    T("f1", {b, s, 4 * h});
    T("g1", {b, s, 4 * h});
    T("w2", {4 * h, h}, true);
    T("f2", {b, s, h});
    T("out", {b, s, h});
    O("ln1", "LayerNorm", {in, "ln1_s", "ln1_b"}, {"ln1"});
    O("q_proj", "MatMul", {"ln1", "wq"}, {"q"});
    O("k_proj", "MatMul", {"ln1", "wk"}, {"k"});
    O("v_proj", "MatMul", {"ln1", "wv"}, {"v"});
    O("q_split", "Reshape", {"q"}, {"q4"});
    O("k_split", "Reshape", {"k"}, {"k4"});
    O("v_split", "Reshape", {"v"}, {"v4"});
    O("q_t", "Transpose", {"q4"}, {"qt"}, {{"perm", V{0, 2, 1, 3}}});
    O("k_t", "Transpose", {"k4"}, {"kt"}, {{"perm", V{0, 2, 3, 1}}});
    O("v_t", "Transpose", {"v4"}, {"vt"}, {{"perm", V{0, 2, 1, 3}}});
    O("scores", "BatchMatMul", {"qt", "kt"}, {"sc"});
    O("softmax", "Softmax", {"sc"}, {"pr"});
    O("context", "BatchMatMul", {"pr", "vt"}, {"ctx"});
    O("ctx_t", "Transpose", {"ctx"}, {"ctxt"}, {{"perm", V{0, 2, 1, 3}}});
    O("ctx_merge", "Reshape", {"ctxt"}, {"ctx2"});
    O("o_proj", "MatMul", {"ctx2", "wo"}, {"o"});
    O("res1", "Add", {in, "o"}, {"res1"});
    O("ln2", "LayerNorm", {"res1", "ln2_s", "ln2_b"}, {"ln2"});
    O("fc1", "MatMul", {"ln2", "w1"}, {"f1"});
    O("gelu", "GeLU", {"f1"}, {"g1"});
    O("fc2", "MatMul", {"g1", "w2"}, {"f2"});
    O("res2", "Add", {"res1", "f2"}, {"out"});
    in = p + "out";
  }
  g.finalize();
  return g;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const ir::Graph& g, const Cluster& c) {
  auto t0 = std::chrono::steady_clock::now();
  const auto spaces = algebra::build_op_spaces(g);
  const double t_spaces = seconds_since(t0);
  search::SearchOptions o;
  // Time the search itself: a budget no plan exceeds, so the memory ladder
  // never climbs (each rung would be one more search of the same cost).
  o.cost.memory_budget_bytes = 1e30;
  const auto r = search::run(g, spaces, c, o);
  // The search time includes the independent evaluation of the plan.
  t0 = std::chrono::steady_clock::now();
  const auto ev = plan::evaluate(g, spaces, c, r.plan, o.cost);
  const double t_eval = seconds_since(t0);
  std::printf("%-10s %9zu ops  %-22s spaces %7.3f s  search+eval %7.3f s  (eval %6.3f s)  "
              "step %.4g s\n",
              g.name().c_str(), g.num_operators(), c.name().c_str(), t_spaces, r.search_time_s,
              t_eval, ev.summary.step_time_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const Cluster flat = Cluster::flat(1024);
  const Cluster mesh = Cluster::mesh({128, 8});
  // 100,000 operators over 1,024 devices, then doublings for the growth.
  const int layers_100k = 100'000 / 23 + 1;
  bench(gpt_stack(layers_100k), flat);
  bench(gpt_stack(layers_100k), mesh);
  bench(recsearch::testing::random_dag(1, 100'000), flat);
  if (quick) return 0;
  for (int layers : {layers_100k / 4, layers_100k / 2, layers_100k, layers_100k * 2})
    bench(gpt_stack(layers), mesh);
  for (std::int64_t n : {8, 64, 1024, 1 << 14, 1 << 20}) bench(gpt_stack(layers_100k / 4), Cluster::flat(n));
  return 0;
}
