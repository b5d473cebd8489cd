// SPDX-License-Identifier: Apache-2.0
// The quality suite's corners (issue 19; docs/quality.md, "Corners"): rec
// against the proven optimum (the exhaustive search, or ilp where that runs
// out of nodes) on shapes away from the zoo's friendly ones: batch and
// feature sizes the device count does not divide, 3, 6 and 12 devices and
// meshes 2x3, 2x4, 3x4, latency-bound graphs of microseconds beside
// compute-bound ones of up to seconds, training and inference, with no
// budget and with budgets at 0.9, 0.7 and 0.5 of the unconstrained
// optimum's memory. Properties: rec fits whenever the optimum does, its gap
// is within the targets on every proven case, and it is monotone in the
// budget (a looser budget never gives a slower plan).
//
// The case set is fixed (seeded); RECSEARCH_QUALITY=full runs the larger one
// of tools/quality_corners.sh, and builds with AddressSanitizer run a fifth
// of the default set (RECSEARCH_QUALITY=small elsewhere), which the
// sanitizer slows down ten-fold.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "recsearch/error.hpp"
#include "recsearch/search/search.hpp"
#include "support/corner_graphs.hpp"
#include "support/search_options.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

enum class Size { Sanitized, Default, Full };

Size suite_size() {
  const char* env = std::getenv("RECSEARCH_QUALITY");
  if (env != nullptr && std::string(env) == "full") return Size::Full;
  if (env != nullptr && std::string(env) == "small") return Size::Sanitized;
  return kSanitized ? Size::Sanitized : Size::Default;
}

struct Corner {
  std::string name;
  ir::Graph g;
  Cluster c;
  Mode mode;
};

std::string mode_name(Mode m) { return m == Mode::Train ? "train" : "infer"; }

std::vector<Cluster> corner_clusters() {
  return {Cluster::flat(2),      Cluster::flat(3),      Cluster::flat(4),
          Cluster::flat(6),      Cluster::flat(8),      Cluster::flat(12),
          Cluster::mesh({2, 3}), Cluster::mesh({2, 4}), Cluster::mesh({3, 4})};
}

// The graphs: model-like blocks at odd sizes, from latency-bound to
// compute-bound, and random DAGs of 10 to 14 operators.
std::vector<ir::Graph> corner_graphs() {
  std::vector<ir::Graph> gs;
  auto named = [&](ir::Graph g, const std::string& name) {
    g.set_name(name);
    gs.push_back(std::move(g));
  };
  named(t::attention_block(12, 128, 768, 12), "attn-b12-s128-h768");
  named(t::attention_block(9, 36, 360, 6), "attn-b9-s36-h360");
  named(t::attention_block(20, 1024, 2048, 16), "attn-b20-s1024-h2048");
  named(t::mlp_block(12, 1, 60, 240), "mlp-b12-h60");
  named(t::mlp_block(10, 128, 1020, 4080), "mlp-b10-s128-h1020");
  named(t::mlp_block(36, 2048, 4096, 16384), "mlp-b36-s2048-h4096");
  named(t::conv_stem(15, 20, 36, 10), "stem-b15-c20-hw36");
  named(t::conv_stem(360, 64, 224, 1000), "stem-b360-c64-hw224");
  named(t::embedding_head(10, 15, 50257, 768), "embed-b10-v50257");
  named(t::embedding_head(18, 36, 32000, 360), "embed-b18-v32000");
  const std::vector<std::int64_t> batches = {9, 10, 12, 15, 18, 20, 36, 60, 360};
  const std::vector<std::int64_t> small_w = {10, 12, 15, 18, 20, 36, 60};
  const std::vector<std::int64_t> big_w = {360, 1020, 1536, 3600, 4096};
  const int seeds = 8;
  for (int s = 0; s < seeds; ++s) {
    const auto seed = static_cast<std::uint32_t>(1900 + s);
    const std::int64_t b = batches[static_cast<std::size_t>(s) % batches.size()];
    const int ops = 10 + s % 5;
    // Alternately latency-bound (tiny widths, no sequence) and compute-bound.
    const bool tiny = s % 2 == 0;
    named(t::odd_random_dag(seed, ops, b, tiny ? 1 : 60, tiny ? small_w : big_w),
          "odd" + std::to_string(seed) + "-" + std::to_string(ops) + "ops-b" + std::to_string(b) +
              (tiny ? "-us" : "-ms"));
  }
  return gs;
}

std::vector<Corner> corner_cases(Size size) {
  const auto gs = corner_graphs();
  const auto cs = corner_clusters();
  // Each graph on a few clusters, rotated so that every cluster meets every
  // kind of graph across the set; both modes.
  const std::size_t per_graph = size == Size::Full ? 2 : 1;
  std::vector<Corner> out;
  for (std::size_t i = 0; i < gs.size(); ++i)
    for (std::size_t k = 0; k < per_graph; ++k) {
      const Cluster& c = cs[(i * 5 + k * 4) % cs.size()];
      const Mode mode = (i + k) % 2 == 0 ? Mode::Train : Mode::Infer;
      out.push_back({gs[i].name() + " on " + c.name() + " " + mode_name(mode), gs[i], c, mode});
    }
  // The case: an attention block of batch 12 on 8 devices, training.
  out.push_back({"attn-b12-s128-h768 on 8 train", gs[0], Cluster::flat(8), Mode::Train});
  if (size != Size::Sanitized) return out;
  std::vector<Corner> fifth;
  for (std::size_t i = 0; i < out.size(); i += 5) fifth.push_back(std::move(out[i]));
  return fifth;
}

struct Outcome {
  bool fits = false;
  bool proven = false;
  double step = 0, mem = 0;
  plan::Plan plan;
};

search::SearchOptions options_for(const Corner& k, search::Algorithm algo, double budget) {
  search::SearchOptions o = t::operator_level_options();
  o.mode = k.mode;
  o.algorithm = algo;
  o.cost.memory_budget_bytes = budget;
  o.exhaustive_max_nodes = 1'000'000;
  o.ilp_time_limit_s = 20;
  return o;
}

Outcome run_one(const Corner& k, const std::vector<algebra::OpSpace>& spaces,
                search::Algorithm algo, double budget) {
  Outcome out;
  try {
    const auto r = search::run(k.g, spaces, k.c, options_for(k, algo, budget));
    out.fits = true;
    out.proven = r.proven_optimal && !r.ilp_restricted;
    out.step = r.eval.summary.step_time_s;
    out.mem = r.eval.summary.memory_per_device_bytes;
    out.plan = r.plan;
  } catch (const Error& e) {
    REQUIRE(e.code() == Errc::kNoFit);
  }
  return out;
}

// The exact reference: the exhaustive search, then ilp where it did not
// finish its proof.
Outcome reference(const Corner& k, const std::vector<algebra::OpSpace>& spaces, double budget) {
  Outcome ex;
  if (k.g.num_operators() <= 16) ex = run_one(k, spaces, search::Algorithm::Exhaustive, budget);
  if (ex.proven || !search::ilp_available()) return ex;
  if (!ex.fits && k.g.num_operators() <= 16) return ex;  // nothing fits: proven by exhaustion
  const Outcome ilp = run_one(k, spaces, search::Algorithm::Ilp, budget);
  return ilp.fits ? ilp : ex;
}

struct Gap {
  std::string name;
  double gap;
};

}  // namespace

TEST_CASE("corners: rec against the proven optimum, fit and monotone in the budget") {
  const Size size = suite_size();
  const auto cases = corner_cases(size);
  // RECSEARCH_QUALITY_LOG: one line per budget on stdout (tools/quality_corners.sh).
  const bool verbose = std::getenv("RECSEARCH_QUALITY_LOG") != nullptr;
  std::vector<Gap> gaps;
  int unproven = 0, budgets = 0;
  double rec_seconds = 0;  // rec's own search time, over every budget
  double min_step = 1e300, max_step = 0;
  // RECSEARCH_QUALITY_ONLY: only the cases whose name contains it.
  const char* only = std::getenv("RECSEARCH_QUALITY_ONLY");
  const bool plans = std::getenv("RECSEARCH_QUALITY_PLANS") != nullptr;
  for (const Corner& k : cases) {
    if (only != nullptr && k.name.find(only) == std::string::npos) continue;
    CAPTURE(k.name);
    const auto spaces = algebra::build_op_spaces(k.g);
    const Outcome free_ref = reference(k, spaces, 0);
    if (!free_ref.fits) continue;  // the device cannot hold even the optimum
    min_step = std::min(min_step, free_ref.step);
    max_step = std::max(max_step, free_ref.step);
    // rec's step per budget, loosest first, for the monotonicity property.
    std::vector<std::pair<double, double>> rec_steps;  // budget fraction, step
    for (double f : {0.0, 0.9, 0.7, 0.5}) {
      CAPTURE(f);
      const double budget = f == 0 ? 0 : free_ref.mem * f;
      const Outcome ref = f == 0 ? free_ref : reference(k, spaces, budget);
      const auto t0 = std::chrono::steady_clock::now();
      const Outcome rec = run_one(k, spaces, search::Algorithm::Rec, budget);
      const double rec_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rec_seconds += rec_s;
      ++budgets;
      if (ref.fits) CHECK(rec.fits);  // rec fits whenever the optimum fits
      if (!rec.fits) continue;
      if (f > 0) CHECK(rec.mem <= budget);
      rec_steps.emplace_back(f, rec.step);
      if (!ref.fits) continue;
      if (!ref.proven) {
        ++unproven;
        continue;
      }
      const double gap = rec.step / ref.step - 1;
      CHECK(gap >= -1e-9);
      char label[48];
      std::snprintf(label, sizeof label, " @%s",
                    f == 0 ? "free" : std::to_string(f).substr(0, 3).c_str());
      gaps.push_back({k.name + label, gap});
      if (gap > 0.01) MESSAGE(k.name << label << ": rec/optimum - 1 = " << 100 * gap << "%");
      if (verbose)
        std::printf("case %s%s ops %zu ref %.6g rec %.6g gap %.4f%% rec time %.3f s\n",
                    k.name.c_str(), label, k.g.num_operators(), ref.step, rec.step, 100 * gap,
                    rec_s);
      // RECSEARCH_QUALITY_PLANS: beside each gap over 1%, both plans' cuts
      // per operator (optimum | rec), to see which moves rec missed.
      if (plans && gap > 0.01)
        for (std::size_t o = 0; o < k.g.num_operators(); ++o) {
          const auto& op = k.g.op(static_cast<ir::OpId>(o));
          std::string ins;
          for (auto t : op.inputs) ins += k.g.tensor(t).name + ",";
          std::printf("  %-6s %-8s %-14s", op.name.c_str(), op.type.c_str(), ins.c_str());
          for (auto c : ref.plan.cuts[o]) std::printf(" %d", c);
          std::printf("  |");
          for (auto c : rec.plan.cuts[o]) std::printf(" %d", c);
          std::printf("\n");
        }
    }
    // Monotone: a looser budget never gives a slower plan than a tighter one.
    for (std::size_t i = 0; i + 1 < rec_steps.size(); ++i)
      for (std::size_t j = i + 1; j < rec_steps.size(); ++j) {
        CAPTURE(rec_steps[i].first);
        CAPTURE(rec_steps[j].first);
        CHECK(rec_steps[i].second <= rec_steps[j].second * (1 + 1e-9));
      }
  }
  REQUIRE(!gaps.empty());
  std::sort(gaps.begin(), gaps.end(), [](const Gap& a, const Gap& b) { return a.gap > b.gap; });
  double sum = 0;
  for (const Gap& g : gaps) sum += g.gap;
  const double mean = sum / static_cast<double>(gaps.size());
  const double p95 = gaps[gaps.size() / 20].gap;
  MESSAGE("corners: " << cases.size() << " cases, " << budgets << " budgets, " << gaps.size()
                      << " with a proven optimum (" << unproven << " unproven); optimum step "
                      << min_step << " s to " << max_step << " s; rec searched for " << rec_seconds
                      << " s");
  MESSAGE("rec/optimum - 1: mean " << 100 * mean << "%, p95 " << 100 * p95 << "%, worst "
                                   << 100 * gaps[0].gap << "% (" << gaps[0].name << ")");
  for (std::size_t i = 0; i < std::min<std::size_t>(5, gaps.size()); ++i)
    MESSAGE("  worst " << i + 1 << ": " << gaps[i].name << " " << 100 * gaps[i].gap << "%");
  // The targets of issue 19: mean gap at most 0.5%, worst at most 5% on
  // every case with a proven optimum (docs/quality.md, "Corners"). The
  // sanitized subset and a run cut down by RECSEARCH_QUALITY_ONLY are too
  // small for a mean.
  if (size != Size::Sanitized && only == nullptr) CHECK(mean <= 0.005);
  CHECK(gaps[0].gap <= 0.05);
}
