// SPDX-License-Identifier: Apache-2.0
// Plan axes named on the cluster's levels (io/mesh_names.hpp): the digits of
// a level's index that a run of its cuts takes.
#include "recsearch/io/mesh_names.hpp"

namespace recsearch::io {
namespace {

// The level of axis a, or nullptr when the cluster does not list it (a plan
// read onto a guessed mesh).
const Level* level_of(const Cluster& cluster, const plan::Plan& p, std::size_t a) {
  if (a >= p.mesh.size() || p.mesh[a].level >= cluster.levels().size()) return nullptr;
  return &cluster.levels()[p.mesh[a].level];
}

// The product of the sizes of axes [first, last) of the plan.
std::int64_t span_size(const plan::Plan& p, std::size_t first, std::size_t last) {
  std::int64_t n = 1;
  for (std::size_t a = first; a < last && a < p.mesh.size(); ++a) n *= p.mesh[a].size;
  return n;
}

// The piece of the level that axes [first, last] take: the level's name,
// or its index divided by the size of the level's later cuts and taken
// modulo the run's size.
std::string piece_name(const plan::Plan& p, const Level& level, std::size_t first,
                       std::size_t last) {
  std::size_t end = last + 1;  // one past the level's last cut
  while (end < p.mesh.size() && p.mesh[end].level == p.mesh[last].level) ++end;
  const std::int64_t size = span_size(p, first, last + 1);
  const std::int64_t below = span_size(p, last + 1, end);
  if (size == level.size) return level.name;
  std::string out = level.name;
  if (below > 1) out += "/" + std::to_string(below);
  if (below * size < level.size) out += "%" + std::to_string(size);
  return out;
}

}  // namespace

std::vector<std::string> mesh_dim_names(const Cluster& cluster, const plan::Plan& p,
                                        const std::vector<std::uint32_t>& axes) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < axes.size()) {
    const std::size_t first = axes[i];
    const Level* level = level_of(cluster, p, first);
    if (level == nullptr) {
      out.push_back(first < p.mesh.size() ? p.mesh[first].axis : "c" + std::to_string(first));
      ++i;
      continue;
    }
    // Extend the run while the next axis is the next cut of the same level.
    std::size_t last = first;
    while (i + 1 < axes.size() && axes[i + 1] == last + 1 && last + 1 < p.mesh.size() &&
           p.mesh[last + 1].level == p.mesh[first].level) {
      ++last;
      ++i;
    }
    out.push_back(piece_name(p, *level, first, last));
    ++i;
  }
  return out;
}

std::string mesh_dims_text(const Cluster& cluster, const plan::Plan& p,
                           const std::vector<std::uint32_t>& axes) {
  std::string out;
  for (const std::string& s : mesh_dim_names(cluster, p, axes)) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::vector<std::uint32_t>> loop_axes(const plan::Plan& p, std::size_t loops,
                                                  ir::OpId op) {
  std::vector<std::vector<std::uint32_t>> out(loops);
  if (op >= p.cuts.size()) return out;
  for (std::size_t a = 0; a < p.cuts[op].size() && a < p.mesh.size(); ++a) {
    const std::int16_t l = p.cuts[op][a];
    if (l >= 0 && static_cast<std::size_t>(l) < loops)
      out[static_cast<std::size_t>(l)].push_back(static_cast<std::uint32_t>(a));
  }
  return out;
}

std::string axis_levels_text(const Cluster& cluster, const plan::Plan& p) {
  std::string out;
  std::size_t a = 0;
  while (a < p.mesh.size()) {
    std::size_t end = a + 1;
    while (end < p.mesh.size() && p.mesh[end].level == p.mesh[a].level) ++end;
    const Level* level = level_of(cluster, p, a);
    if (!out.empty()) out += ", ";
    out += p.mesh[a].axis;
    if (end - a > 1) out += "-" + p.mesh[end - 1].axis;
    out += " " + (level != nullptr ? level->name : std::string("?")) + " (" +
           std::to_string(span_size(p, a, end)) + ")";
    a = end;
  }
  return out;
}

}  // namespace recsearch::io
