// SPDX-License-Identifier: Apache-2.0
// The cost model as an extension point: a compiler that links recsearch can
// supply its own compute, collective and memory costs per device.
//
// CostModel's virtual functions default to the symbolic model of
// recsearch/cost/model.hpp; a subclass overrides the ones it knows better
// (measured collectives, a kernel library's GEMM speed) and is handed to
// the search and the evaluator through CostParams::model:
//
//   struct SlowLinks : recsearch::cost::CostModel {
//     double collective_seconds(recsearch::cost::Collective c, double bytes,
//                               const recsearch::Cut& cut,
//                               const recsearch::CostParams& p) const noexcept override {
//       return 2 * CostModel::collective_seconds(c, bytes, cut, p);
//     }
//   };
//   auto options = problem.options();
//   options.cost.model = std::make_shared<SlowLinks>();
//
// Every account of the step time (the evaluator, the search's bookkeeping,
// polish, ilp, exhaustive) prices through these functions, so they all
// agree under any model. The functions are called concurrently from the
// search's threads and must not throw; they must be non-negative, and
// collective costs should not fall as bytes grow, or the search's ranking
// loses its meaning.
#pragma once

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/cost/model.hpp"

namespace recsearch::cost {

class CostModel {
 public:
  CostModel() = default;
  CostModel(const CostModel&) = default;
  CostModel& operator=(const CostModel&) = default;
  CostModel(CostModel&&) = default;
  CostModel& operator=(CostModel&&) = default;
  virtual ~CostModel() = default;

  // Seconds for collective c across `cut` on a tensor of group_bytes bytes
  // within the group (cost/model.hpp's conventions). 0 when cut.size == 1.
  [[nodiscard]] virtual double collective_seconds(Collective c, double group_bytes, const Cut& cut,
                                                  const CostParams& p) const noexcept;

  // Seconds of the backward all-reduce of a gradient slice; `parameter`
  // gradients may be bucketed (CostParams::bucket_gradients). The default
  // prices it through this model's collective_seconds (without latency when
  // bucketed).
  [[nodiscard]] virtual double gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                                                const CostParams& p) const noexcept;

  // Forward+backward (training) or forward (inference) seconds of an
  // operator slice of `flops` forward flops touching `bytes` bytes.
  [[nodiscard]] virtual double compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                               const CostParams& p, Mode mode) const noexcept;

  // Bytes per device of parameter state per parameter byte.
  [[nodiscard]] virtual double parameter_state_factor(const CostParams& p,
                                                      Mode mode) const noexcept;
};

// The symbolic formulas themselves, whatever CostParams::model says: what
// CostModel's defaults return.
[[nodiscard]] double symbolic_collective_seconds(Collective c, double group_bytes, const Cut& cut,
                                                 const CostParams& p) noexcept;
[[nodiscard]] double symbolic_gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                                               const CostParams& p) noexcept;
[[nodiscard]] double symbolic_compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                              const CostParams& p, Mode mode) noexcept;
[[nodiscard]] double symbolic_parameter_state_factor(const CostParams& p, Mode mode) noexcept;

}  // namespace recsearch::cost
