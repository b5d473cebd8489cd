// SPDX-License-Identifier: Apache-2.0
// Shared parts of the plan reports: strategy classes and their colours, the
// split of each operator's communication by reason, strategies as text, and
// the training settings in words (per block and per parameter).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "recsearch/io/mesh_names.hpp"
#include "recsearch/report/report.hpp"
#include "report/text.hpp"
#include "search/fold.hpp"

namespace recsearch::report {
namespace {

// Colour-blind-safe qualitative palette (Tableau 10 and two more); the
// replicated class is always grey.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                    "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
                                    "#9c755f", "#86bcb6", "#d37295", "#a0cbe8"};
constexpr const char* kReplicatedColour = "#d9d9d9";
constexpr const char* kOtherColour = "#8c8c8c";

}  // namespace

std::vector<CommBreakdown> comm_breakdown(const ReportInput& in) {
  std::vector<CommBreakdown> out(in.graph.num_operators());
  for (const plan::CommEvent& e : in.eval.events) {
    const ir::OpId op = e.reason == plan::CommReason::Layout ? e.to : e.from;
    if (op == ir::kNone || op >= out.size()) continue;
    switch (e.reason) {
      case plan::CommReason::Layout: out[op].layout_s += e.seconds; break;
      case plan::CommReason::Gradient: out[op].gradient_s += e.seconds; break;
      case plan::CommReason::Halo: out[op].halo_s += e.seconds; break;
      case plan::CommReason::Output: out[op].output_s += e.seconds; break;
    }
  }
  return out;
}

std::string strategy_text(const ir::Strategy& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += i ? ", [" : "[";
    for (std::size_t d = 0; d < s[i].size(); ++d) out += (d ? ", " : "") + std::to_string(s[i][d]);
    out += "]";
  }
  return out + "]";
}

std::string sig(double v, int digits) {
  // Below 1e-9 is rounding noise of a sum (an exposed time of 1e-17 s).
  if (std::abs(v) < 1e-9 || !std::isfinite(v)) return std::isfinite(v) ? "0" : std::to_string(v);
  const int magnitude = static_cast<int>(std::floor(std::log10(std::abs(v))));
  const int decimals = std::clamp(digits - 1 - magnitude, 0, 12);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string ms_text(double seconds) { return sig(seconds * 1e3) + " ms"; }

std::string gib_text(double bytes) { return sig(bytes / (1024.0 * 1024.0 * 1024.0)) + " GiB"; }

std::string cut_signature(const ReportInput& in, ir::OpId op) {
  std::string s;
  const auto& cuts = in.plan.cuts.at(op);
  const algebra::OpSpace& space = in.spaces.at(op);
  for (std::size_t a = 0; a < cuts.size() && a < in.plan.mesh.size(); ++a) {
    if (cuts[a] == plan::kReplicated) continue;
    const auto l = static_cast<std::size_t>(cuts[a]);
    if (!s.empty()) s += ' ';
    s += in.plan.mesh[a].axis + ":" + (l < space.loops.size() ? space.loops[l].name : "?");
  }
  return s.empty() ? "replicated" : s;
}

ColourClasses colour_classes(const ReportInput& in) {
  const std::size_t n = in.graph.num_operators();
  std::vector<std::string> sig(n);
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> count;  // count, first
  std::vector<std::string> order;
  for (std::size_t o = 0; o < n; ++o) {
    sig[o] = cut_signature(in, static_cast<ir::OpId>(o));
    auto [it, fresh] = count.try_emplace(sig[o], 0, o);
    if (fresh) order.push_back(sig[o]);
    ++it->second.first;
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return count[a].first > count[b].first;
  });
  ColourClasses c;
  std::unordered_map<std::string, std::size_t> index;
  const bool overflow = order.size() > kMaxColourClasses;
  const std::size_t kept = overflow ? kMaxColourClasses - 1 : order.size();
  std::size_t palette = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    index[order[i]] = i;
    c.names.push_back(order[i]);
    c.colours.push_back(order[i] == "replicated" ? kReplicatedColour : kPalette[palette++]);
  }
  if (overflow) {
    c.names.push_back("other");
    c.colours.push_back(kOtherColour);
  }
  c.of_op.resize(n);
  for (std::size_t o = 0; o < n; ++o) {
    const auto it = index.find(sig[o]);
    c.of_op[o] = it != index.end() ? it->second : c.names.size() - 1;
  }
  return c;
}

namespace {

// Shades of the layout families, darkest first; kReplicatedColour and
// kOtherColour as for the strategy classes.
constexpr const char* kDpShades[] = {"#4e79a7", "#a0cbe8", "#2a5783", "#7aa6d6"};
constexpr const char* kTpShades[] = {"#f28e2b", "#ffbe7d", "#b85f0d", "#f7a35c"};
constexpr const char* kMixedShades[] = {"#59a14f", "#8cd17d", "#2f6b28", "#b6e3a8"};

}  // namespace

std::string layout_class(const ReportInput& in, ir::OpId op) {
  const ir::Operator& o = in.graph.op(op);
  if (o.outputs.empty() || o.outputs[0] >= in.eval.tensors.size()) return cut_signature(in, op);
  const plan::TensorSharding& ts = in.eval.tensors[o.outputs[0]];
  std::vector<std::uint32_t> dp, tp;
  for (std::size_t d = 0; d < ts.dims.size(); ++d)
    (d == 0 ? dp : tp).insert((d == 0 ? dp : tp).end(), ts.dims[d].begin(), ts.dims[d].end());
  tp.insert(tp.end(), ts.partial.begin(), ts.partial.end());
  std::sort(tp.begin(), tp.end());
  tp.erase(std::unique(tp.begin(), tp.end()), tp.end());
  std::string out;
  if (!dp.empty()) out = "DP " + io::mesh_dims_text(in.cluster, in.plan, dp);
  if (!tp.empty())
    out += (out.empty() ? "" : " + ") + std::string("TP ") +
           io::mesh_dims_text(in.cluster, in.plan, tp);
  return out.empty() ? "replicated" : out;
}

ColourClasses layout_classes(const ReportInput& in) {
  const std::size_t n = in.graph.num_operators();
  std::vector<std::string> name(n);
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> count;  // count, first
  std::vector<std::string> order;
  for (std::size_t o = 0; o < n; ++o) {
    name[o] = layout_class(in, static_cast<ir::OpId>(o));
    auto [it, fresh] = count.try_emplace(name[o], 0, o);
    if (fresh) order.push_back(name[o]);
    ++it->second.first;
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return count[a].first > count[b].first;
  });
  ColourClasses c;
  std::unordered_map<std::string, std::size_t> index;
  std::size_t dp = 0, tp = 0, mixed = 0;
  const auto shade = [](const auto& shades, std::size_t& used) -> const char* {
    return used < std::size(shades) ? shades[used++] : nullptr;
  };
  for (const std::string& cls : order) {
    const bool has_dp = cls.rfind("DP ", 0) == 0, has_tp = cls.find("TP ") != std::string::npos;
    const char* colour = cls == "replicated" ? kReplicatedColour
                         : has_dp && has_tp  ? shade(kMixedShades, mixed)
                         : has_dp            ? shade(kDpShades, dp)
                         : has_tp            ? shade(kTpShades, tp)
                                             : nullptr;
    if (colour == nullptr) continue;  // its family is out of shades: "other"
    index[cls] = c.names.size();
    c.names.push_back(cls);
    c.colours.push_back(colour);
  }
  if (index.size() < order.size()) {
    c.names.push_back("other");
    c.colours.push_back(kOtherColour);
  }
  c.of_op.resize(n);
  for (std::size_t o = 0; o < n; ++o) {
    const auto it = index.find(name[o]);
    c.of_op[o] = it != index.end() ? it->second : c.names.size() - 1;
  }
  return c;
}

Parallelism parallelism(const ReportInput& in) {
  Parallelism p;
  const std::size_t axes = in.plan.mesh.size();
  p.devices = in.plan.num_devices();
  p.axis_share.assign(axes, 0);
  std::vector<bool> used(axes, false);
  double total = 0, weighted = 0;
  for (std::size_t o = 0; o < in.graph.num_operators() && o < in.plan.cuts.size(); ++o) {
    const double c = o < in.eval.op_costs.size() ? in.eval.op_costs[o].compute_s : 0;
    double degree = 1;
    for (std::size_t a = 0; a < axes && a < in.plan.cuts[o].size(); ++a) {
      if (in.plan.cuts[o][a] == plan::kReplicated) continue;
      used[a] = true;
      degree *= static_cast<double>(in.plan.mesh[a].size);
      p.axis_share[a] += c;
    }
    total += c;
    weighted += c * degree;
  }
  if (total > 0) {
    p.effective = weighted / total;
    for (double& s : p.axis_share) s /= total;
  }
  for (std::size_t a = 0; a < axes; ++a)
    if (!used[a]) p.idle_axes.push_back(static_cast<std::uint32_t>(a));
  return p;
}

std::string parallelism_text(const ReportInput& in) {
  const Parallelism p = parallelism(in);
  const std::string devices = std::to_string(p.devices);
  if (p.devices > 1 && p.idle_axes.size() == in.plan.mesh.size())
    return "fully replicated: no operator is cut, all " + devices +
           " devices compute the same thing";
  std::string out = sig(p.effective, 3) + " of " + devices + " devices (compute-weighted)";
  // Axes that cut some operators but under half of the compute: on the
  // rest their devices duplicate work, which the effective figure averages
  // away.
  std::string partly;
  for (std::size_t a = 0; a < p.axis_share.size(); ++a) {
    const double share = p.axis_share[a];
    if (share <= 0 || share >= kPartlyUsedShare) continue;
    partly += (partly.empty() ? "" : ", ") + in.plan.mesh[a].axis + " (" +
              io::mesh_dims_text(in.cluster, in.plan, {static_cast<std::uint32_t>(a)}) + ") cuts " +
              sig(100 * share, 2) + " %";
  }
  if (!partly.empty())
    out += "; partly used: " + partly + " of the compute, the rest is duplicated on its devices";
  if (p.idle_axes.empty()) return out;
  std::string axes;
  std::int64_t idle = 1;
  for (const std::uint32_t a : p.idle_axes) {
    if (!axes.empty()) axes += ", ";
    axes += in.plan.mesh[a].axis + " (" + io::mesh_dims_text(in.cluster, in.plan, {a}) + ")";
    idle *= in.plan.mesh[a].size;
  }
  return out + "; " + axes + (p.idle_axes.size() == 1 ? " cuts" : " cut") +
         " no operator: every device has " + std::to_string(idle - 1) +
         (idle == 2 ? " replica" : " replicas") + " doing the same work";
}

namespace {

// "full on 11 of 24 blocks, selective on 13": count[v] of `total` things per
// value name, most recomputed first; values of no thing are left out.
std::string counts_text(const std::vector<std::pair<std::string, std::size_t>>& count,
                        std::size_t total, const std::string& things) {
  std::string out;
  for (const auto& [name, n] : count) {
    if (n == 0) continue;
    out += out.empty()
               ? name + " on " + std::to_string(n) + " of " + std::to_string(total) + " " + things
               : ", " + name + " on " + std::to_string(n);
  }
  return out;
}

constexpr plan::Recompute kRecomputeOrder[] = {plan::Recompute::Full, plan::Recompute::Selective,
                                               plan::Recompute::None};

// Per-operator counts of the operators in [begin, end).
std::string operator_counts(const std::vector<plan::Recompute>& rc, std::size_t begin,
                            std::size_t end) {
  std::vector<std::pair<std::string, std::size_t>> count;
  for (const plan::Recompute v : kRecomputeOrder)
    count.emplace_back(
        std::string(plan::recompute_name(v)),
        static_cast<std::size_t>(std::count(rc.begin() + static_cast<std::ptrdiff_t>(begin),
                                            rc.begin() + static_cast<std::ptrdiff_t>(end), v)));
  return counts_text(count, end - begin, "operators");
}

}  // namespace

std::string recompute_text(const ir::Graph& g, const plan::Training& t) {
  if (!plan::mixed_recompute(g, t)) return std::string(plan::recompute_name(t.recompute));
  const std::vector<plan::Recompute> rc = plan::operator_recompute(g, t);
  const auto rep = search::detail::find_repetition(g, 3);
  if (!rep || rep->period == 0) return operator_counts(rc, 0, rc.size());
  // Each block by the one value of its operators, or "mixed".
  std::vector<std::pair<std::string, std::size_t>> count;
  for (const plan::Recompute v : kRecomputeOrder)
    count.emplace_back(std::string(plan::recompute_name(v)), 0);
  count.emplace_back("mixed", 0);
  for (std::size_t b = 0; b < rep->repeats; ++b) {
    const std::size_t first = rep->start + b * rep->period;
    const bool uniform = std::all_of(rc.begin() + static_cast<std::ptrdiff_t>(first),
                                     rc.begin() + static_cast<std::ptrdiff_t>(first + rep->period),
                                     [&](plan::Recompute v) { return v == rc[first]; });
    std::size_t i = count.size() - 1;
    for (std::size_t k = 0; k < 3 && uniform; ++k)
      if (kRecomputeOrder[k] == rc[first]) i = k;
    ++count[i].second;
  }
  std::string out = counts_text(count, rep->repeats, "blocks");
  // The operators before and after the stack, where they differ.
  std::vector<plan::Recompute> outside(rc.begin(),
                                       rc.begin() + static_cast<std::ptrdiff_t>(rep->start));
  outside.insert(outside.end(),
                 rc.begin() + static_cast<std::ptrdiff_t>(rep->start + rep->period * rep->repeats),
                 rc.end());
  if (std::any_of(outside.begin(), outside.end(),
                  [&](plan::Recompute v) { return v != t.recompute; }))
    out += "; outside the blocks " + operator_counts(outside, 0, outside.size());
  return out;
}

std::string zero_text(const ir::Graph& g, const plan::Training& t) {
  if (!plan::mixed_zero(g, t)) return std::to_string(t.zero_stage);
  const std::vector<int> z = plan::parameter_zero(g, t);
  std::vector<std::size_t> count(plan::kMaxZeroStage + 1, 0);
  std::vector<double> bytes(plan::kMaxZeroStage + 1, 0.0);
  std::size_t params = 0;
  double total = 0;
  for (ir::TensorId i = 0; i < g.num_tensors(); ++i) {
    if (g.tensor(i).kind != ir::TensorKind::Parameter) continue;
    ++params;
    ++count[static_cast<std::size_t>(z[i])];
    bytes[static_cast<std::size_t>(z[i])] += g.tensor(i).bytes();
    total += g.tensor(i).bytes();
  }
  std::string out;
  for (int s = plan::kMaxZeroStage; s >= 0; --s) {
    const auto k = static_cast<std::size_t>(s);
    if (count[k] == 0) continue;
    if (out.empty()) {
      char share[32];
      std::snprintf(share, sizeof share, "%.0f%%", total > 0 ? 100.0 * bytes[k] / total : 0.0);
      out = std::to_string(s) + " on " + std::to_string(count[k]) + " of " +
            std::to_string(params) + " parameters (" + share + " of the parameter bytes)";
    } else {
      out += ", " + std::to_string(s) + " on " + std::to_string(count[k]);
    }
  }
  return out;
}

std::optional<Fold> find_fold(const ReportInput& in, std::size_t min_operators) {
  if (in.graph.num_operators() <= min_operators) return std::nullopt;
  const auto rep = search::detail::find_repetition(in.graph, 3);
  if (!rep || rep->period == 0 || rep->repeats < 3) return std::nullopt;
  Fold f{rep->start, rep->period, rep->repeats, 0};
  for (std::size_t b = 1; b < f.repeats; ++b) {
    for (std::size_t k = 0; k < f.period; ++k) {
      const std::size_t o = f.start + b * f.period + k;
      if (o < in.plan.cuts.size() && in.plan.cuts[o] != in.plan.cuts[f.start + k]) {
        ++f.differing_blocks;
        break;
      }
    }
  }
  return f;
}

}  // namespace recsearch::report
