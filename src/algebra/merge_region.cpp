// SPDX-License-Identifier: Apache-2.0
// Merge regions: where a reshape merges a batch-like dim into the inner
// factor of a merged dim and a later reshape splits it back out, the cut of
// that inner factor survives in between as a strided shard.
//
// torch's nn.MultiheadAttention views its heads as [t*b, d] around the
// output projection (b the inner factor) and back as [t, b, d]. Under the
// plain reshape rule only the outer factor t of a merged dim can be cut, so
// a batch cut dies there. Here the region [merge, row operators, split] is
// found from shapes and uses alone, and its spaces cut the inner factor b:
// the merged dim is cut strided (StridedDim), the outer factor t is Whole in
// the two reshapes. Every member finds the same region, so their spaces
// agree on which rows a part holds, and the cost model prices the strided
// shard as the ordinary Shard it equals in bytes.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

namespace {

// Row operators between the two reshapes; a longer chain is not a region.
constexpr int kMaxChain = 8;

bool is_merge_kind(ir::OpKind k) noexcept {
  return k == ir::OpKind::Reshape || k == ir::OpKind::Flatten;
}

const ir::Shape& in_shape(const ir::Graph& g, ir::OpId o, std::size_t j) {
  return g.tensor(g.op(o).inputs[j]).shape;
}
const ir::Shape& out_shape(const ir::Graph& g, ir::OpId o) {
  return g.tensor(g.op(o).outputs[0]).shape;
}

bool well_formed(const ir::Graph& g, ir::OpId o) {
  const ir::Operator& op = g.op(o);
  if (op.inputs.empty() || op.outputs.size() != 1) return false;
  for (const ir::TensorId t : op.inputs) {
    if (t >= g.num_tensors()) return false;
  }
  return op.outputs[0] < g.num_tensors();
}

// [outer, inner] when `o` merges x = [t, b*h, ...] into y = [t*b, ...].
std::optional<std::pair<std::int64_t, std::int64_t>> merge_factors(const ir::Graph& g, ir::OpId o) {
  if (!is_merge_kind(kind_of(g.op(o))) || !well_formed(g, o)) return std::nullopt;
  const ir::Shape& x = in_shape(g, o, 0);
  const ir::Shape& y = out_shape(g, o);
  if (x.size() < 2 || y.empty() || x[0] < 2 || y[0] % x[0] != 0) return std::nullopt;
  const std::int64_t b = y[0] / x[0];
  if (b < 2 || x[1] % b != 0) return std::nullopt;
  return std::pair{x[0], b};
}

// Whether `o` splits x = [t*b, ...] back into y = [t, b*h, ...].
bool splits_back(const ir::Graph& g, ir::OpId o, std::int64_t t, std::int64_t b) {
  if (kind_of(g.op(o)) != ir::OpKind::Reshape || !well_formed(g, o)) return false;
  const ir::Shape& x = in_shape(g, o, 0);
  const ir::Shape& y = out_shape(g, o);
  return !x.empty() && y.size() >= 2 && x[0] == t * b && y[0] == t && y[1] % b == 0;
}

// The row loop of `o` when it uses tensor `rows` once, at a slot whose dim
// 0 and the output's dim 0 share one Parallel loop as wide as that dim,
// which no other operand dim touches. Returns the slot.
std::optional<std::uint32_t> row_slot(const ir::Graph& g, ir::OpId o, ir::TensorId rows) {
  const ir::Operator& op = g.op(o);
  if (is_merge_kind(kind_of(op)) || kind_of(op) == ir::OpKind::Squeeze ||
      kind_of(op) == ir::OpKind::Unsqueeze || !well_formed(g, o)) {
    return std::nullopt;
  }
  std::optional<std::uint32_t> slot;
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    if (op.inputs[j] != rows) continue;
    if (slot) return std::nullopt;
    slot = static_cast<std::uint32_t>(j);
  }
  const ir::Shape& x = g.tensor(rows).shape;
  if (!slot || x.empty() || out_shape(g, o).empty() || out_shape(g, o)[0] != x[0]) {
    return std::nullopt;
  }
  OpSpace s;
  try {
    s = build_raw_space(g, o);
  } catch (const Error&) {
    return std::nullopt;  // an invalid operator is reported by its own build
  }
  if (s.opaque) return std::nullopt;
  const int l = s.inputs[*slot][0];
  if (l == kUnmapped || s.outputs[0][0] != l) return std::nullopt;
  const LoopDim& loop = s.loops[static_cast<std::size_t>(l)];
  if (loop.role != DimRole::Parallel || loop.size != x[0]) return std::nullopt;
  const auto touches = [&](std::span<const int> dims, std::size_t skip) {
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (d != skip && dims[d] == l) return true;
    }
    return false;
  };
  constexpr auto kNoSkip = static_cast<std::size_t>(-1);
  for (std::size_t j = 0; j < s.inputs.size(); ++j) {
    if (touches(s.inputs[j], j == *slot ? 0 : kNoSkip)) return std::nullopt;
  }
  if (touches(s.outputs[0], 0)) return std::nullopt;
  return slot;
}

// The one input of `o` another operator produces, if exactly one is.
std::optional<ir::OpId> single_producer(const ir::Graph& g, ir::OpId o) {
  std::optional<ir::OpId> p;
  for (const ir::TensorId t : g.op(o).inputs) {
    if (t >= g.num_tensors() || g.tensor(t).producer == ir::kNone) continue;
    if (p) return std::nullopt;
    p = g.tensor(t).producer;
  }
  return p;
}

// The region that starts at merge `m`, walking its single uses down.
std::optional<MergeRegion> region_from(const ir::Graph& g, ir::OpId m) {
  const auto f = merge_factors(g, m);
  if (!f) return std::nullopt;
  MergeRegion r;
  r.merge = m;
  r.outer = f->first;
  r.inner = f->second;
  ir::TensorId rows = g.op(m).outputs[0];
  for (int hop = 0; hop <= kMaxChain; ++hop) {
    const ir::Tensor& t = g.tensor(rows);
    if (t.consumers.size() != 1) return std::nullopt;
    const ir::OpId c = t.consumers[0];
    // Members find the merge by walking up their one produced input, so
    // the rows must be that input: every member then finds this region.
    if (single_producer(g, c) != std::optional<ir::OpId>(t.producer)) return std::nullopt;
    if (splits_back(g, c, r.outer, r.inner) && g.op(c).inputs[0] == rows) {
      r.split = c;
      return r;
    }
    if (hop == kMaxChain) break;
    const auto slot = row_slot(g, c, rows);
    if (!slot) return std::nullopt;
    r.chain.push_back(c);
    r.row_inputs.push_back(*slot);
    rows = g.op(c).outputs[0];
  }
  return std::nullopt;
}

}  // namespace

std::optional<MergeRegion> merge_region(const ir::Graph& g, ir::OpId id) {
  if (id >= g.num_operators()) return std::nullopt;
  // Walk up to the nearest merge; the region it starts must contain `id`.
  ir::OpId cur = id;
  for (int hop = 0; hop <= kMaxChain + 1; ++hop) {
    if (merge_factors(g, cur)) {
      auto r = region_from(g, cur);
      if (!r) return std::nullopt;
      const bool member = r->merge == id || r->split == id ||
                          std::find(r->chain.begin(), r->chain.end(), id) != r->chain.end();
      return member ? r : std::nullopt;
    }
    const auto up = single_producer(g, cur);
    if (!up) return std::nullopt;
    cur = *up;
  }
  return std::nullopt;
}

void stride_chain_space(OpSpace& s, const MergeRegion& r, std::uint32_t slot) {
  const int l = s.inputs[slot][0];
  s.loops[static_cast<std::size_t>(l)].size = r.inner;
  s.strided.push_back({false, slot, 0, r.outer});
  s.strided.push_back({true, 0, 0, r.outer});
}

}  // namespace recsearch::algebra::detail
