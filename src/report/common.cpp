// SPDX-License-Identifier: Apache-2.0
// Shared parts of the plan reports: strategy classes and their colours, the
// split of each operator's communication by reason, and strategies as text.
#include <algorithm>
#include <unordered_map>

#include "recsearch/report/report.hpp"
#include "report/text.hpp"

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

}  // namespace recsearch::report
