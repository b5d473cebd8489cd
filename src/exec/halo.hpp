// SPDX-License-Identifier: Apache-2.0
// Private: the geometry of a sliding-window operator (Conv2D, MaxPool,
// AvgPool) whose spatial dims (H = dim 2, W = dim 3 of its input x) are cut.
// Each rank computes a block of output rows; the input rows those windows
// read reach past its own block of x by up to the window's overlap, and it
// receives them (the halo) from the ranks that hold them, point to point.
// The executor moves the rows (executor.cpp), and predict_halo_bytes counts
// them (halo.cpp) from the same ranges, so the two agree by construction.
// Also here: which mesh axes a BatchNorm's batch statistics are summed over.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "recsearch/exec/layout.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::exec::detail {

// One spatial dim of a window: output row i reads input rows
// i·stride − pad_begin + [0, extent) (extent = (kernel−1)·dilation + 1).
struct WindowDim {
  std::int64_t stride = 1, pad_begin = 0, extent = 1, dilation = 1;
};

// The H and W windows of a Conv2D (its kernel from the weight's shape,
// OIHW), MaxPool or AvgPool (the defaults the algebra uses: a pool's
// strides default to its kernel); nullopt for any other kind.
[[nodiscard]] std::optional<std::array<WindowDim, 2>> window_dims(const ir::Operator& op,
                                                                  const ir::Shape& conv_weight);

// Rows [begin, end) of one dim.
struct Range {
  std::int64_t begin = 0, end = 0;
  [[nodiscard]] std::int64_t size() const noexcept { return end > begin ? end - begin : 0; }
};
[[nodiscard]] Range intersect(Range a, Range b) noexcept;

// One cut window dim of an operator's input x.
struct HaloDim {
  int dim = 2;                      // 2 (H) or 3 (W)
  std::vector<std::uint32_t> axes;  // the mesh axes splitting it, outermost first
  std::vector<std::int64_t> sizes;  // their sizes
  std::int64_t parts = 1;           // product of the sizes
  WindowDim window;
  std::int64_t in_full = 0, out_full = 0;  // whole extents of x and of the output
  [[nodiscard]] Range own(std::int64_t block) const noexcept;     // x rows block holds
  [[nodiscard]] Range needed(std::int64_t block) const noexcept;  // x rows its outputs read
  [[nodiscard]] std::int64_t out_begin(std::int64_t block) const noexcept;
  // The block a rank at `coords` holds (mixed radix of its digits on `axes`).
  [[nodiscard]] std::int64_t block_of(const std::vector<std::int64_t>& coords) const;
  // The rank (numbered in the mesh) that holds `block` and agrees with `coords` elsewhere.
  [[nodiscard]] std::int64_t rank_of(std::int64_t block, std::vector<std::int64_t> coords,
                                     const std::vector<std::int64_t>& mesh) const;
  // Elements of one row of this dim in a block of `shape` (the product of the other dims).
  [[nodiscard]] std::int64_t row_elements(const ir::Shape& shape) const;
};

// The cut window dims of operator `op` whose input x has layout `x_layout`
// (the operator's input layout), H first. Empty when no window dim is cut.
[[nodiscard]] std::vector<HaloDim> halo_dims(const ir::Graph& g, const ir::Operator& op,
                                             const Layout& x_layout,
                                             const std::vector<std::int64_t>& mesh);

// Elements a rank at `coords` sends in the halo exchange of operator `op`
// (x in layout `x_layout`): per cut window dim in order, the rows of its
// block that each other block needs, times the row size of the block as
// the earlier dims' exchanges left it.
[[nodiscard]] double halo_send_elements(const ir::Graph& g, const ir::Operator& op,
                                        const Layout& x_layout,
                                        const std::vector<std::int64_t>& mesh,
                                        const std::vector<std::int64_t>& coords);

// Elements the rank at `coords` sends in the reverse of that exchange (the
// backward pass): per cut window dim, last first, the gradients of the halo
// rows it received, times the row size of the block the kernel saw with
// the earlier dims' halos still on.
[[nodiscard]] double halo_return_elements(const ir::Graph& g, const ir::Operator& op,
                                          const Layout& x_layout,
                                          const std::vector<std::int64_t>& mesh,
                                          const std::vector<std::int64_t>& coords);

// Whether a BatchNorm normalises with the statistics of its batch (a
// training plan, or no running statistics given) rather than its running
// mean and variance (inputs 3 and 4, an inference plan).
[[nodiscard]] bool batch_norm_batch_stats(const ir::Operator& op, bool train) noexcept;
// The mesh axes on which such a BatchNorm's input x (in layout x_layout) is
// sharded along a dim other than its channels (batch or spatial): its
// per-channel sums are all-reduced over them, as SyncBatchNorm does.
[[nodiscard]] std::vector<std::uint32_t> batch_norm_stat_axes(const Layout& x_layout);

}  // namespace recsearch::exec::detail
