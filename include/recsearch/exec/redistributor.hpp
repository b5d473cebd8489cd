// SPDX-License-Identifier: Apache-2.0
// Moves one rank's block of a tensor between layouts with the collectives
// of exec/layout.hpp's redistribution_plan, on local buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "recsearch/exec/communicator.hpp"
#include "recsearch/exec/layout.hpp"

namespace recsearch::exec {

// One rank's block of a tensor: its full shape, layout and local data
// (row-major, local_shape(full, layout) elements).
struct LocalTensor {
  ir::Shape full;
  Layout layout;
  std::vector<float> data;
};

class Redistributor {
 public:
  explicit Redistributor(Communicator& comm);

  // The block `t` becomes in layout `to` (never partial), through the
  // collectives of redistribution_plan(t.layout, to).
  [[nodiscard]] LocalTensor redistribute(const LocalTensor& t, const Layout& to);
  // The block `t` becomes in layout `to` by reduce-scatters over the axes
  // of zero_scatter_axes(t.layout, to), one after the other from the
  // outermost. Error(kInternal) when those are empty.
  [[nodiscard]] LocalTensor scatter_partial(const LocalTensor& t, const Layout& to);
  // Sums the axes on which `t` is partial (all-reduce), in place.
  void reduce_partial(LocalTensor& t);

 private:
  Communicator& comm_;
  std::vector<std::int64_t> coords_;
};

}  // namespace recsearch::exec
