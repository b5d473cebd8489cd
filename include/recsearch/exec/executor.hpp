// SPDX-License-Identifier: Apache-2.0
// The executor: runs the forward pass (inference semantics: Dropout is the
// identity) of a planned graph on each rank's blocks.
//
// Every tensor lives in its holder's layout (exec/layout.hpp). Before an
// operator runs, each input is brought to the layout the operator's cuts
// require (once per distinct layout; later uses reuse it), the local kernel
// runs on the blocks, and its outputs stay as the operator leaves them:
// partial sums where a Reduction loop was cut, reduced only when a consumer
// (or the user, for a graph output) needs them otherwise. Graph inputs,
// parameters and constants are seeded random values, generated per element
// from the seed, the tensor and the element's index in the full tensor, so
// that every rank and the one-device run see the same numbers.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/exec/communicator.hpp"
#include "recsearch/exec/layout.hpp"
#include "recsearch/exec/redistributor.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::exec {

// Operators the executor cannot run under `p`, one line each ("name (Type):
// why"): kinds without a kernel, and cuts whose blocks a kernel cannot
// combine (e.g. ReduceMax cut on a reduced dim, an operand that maps one
// cut loop to two of its dims).
[[nodiscard]] std::vector<std::string> unsupported_operators(
    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p);

// The value of element `index` (row-major in the full tensor) of tensor t.
[[nodiscard]] float input_value(const ir::Graph& g, ir::TensorId t, std::int64_t index,
                                std::uint64_t seed);

struct ExecOptions {
  std::uint64_t seed = 1;
  bool use_gpu = false;  // GEMMs on the GPU (cuBLAS), elementwise kernels in CUDA
  // Called before each operator runs (tests inject failures through it).
  std::function<void(ir::OpId)> before_op;
};

class Executor {
 public:
  // Throws Error(kUsage) listing unsupported_operators, and Error(kPlan)
  // when the plan's mesh does not match the communicator's, before any
  // collective runs.
  Executor(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const plan::Plan& p,
           Communicator& comm, ExecOptions options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // One forward pass (the inputs' blocks are made once, by the constructor);
  // graph outputs left partial are all-reduced at the end.
  void run();
  // Graph outputs (produced tensors nobody consumes), in tensor id order.
  [[nodiscard]] const std::vector<ir::TensorId>& outputs() const noexcept { return outputs_; }
  // This rank's block of a tensor after run().
  [[nodiscard]] const LocalTensor& block(ir::TensorId t) const;
  // The full tensor on rank 0 (empty elsewhere), assembled from every
  // rank's block; collective (uncounted).
  [[nodiscard]] std::vector<float> gather_full(ir::TensorId t);
  [[nodiscard]] const PlanLayouts& layouts() const noexcept { return layouts_; }

 private:
  void make_inputs();
  void run_op(ir::OpId o);

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  Communicator& comm_;
  ExecOptions options_;
  PlanLayouts layouts_;
  Redistributor redist_;
  std::vector<std::int64_t> coords_;
  std::vector<std::unique_ptr<LocalTensor>> held_;  // per tensor, holder layout
  std::vector<std::deque<LocalTensor>> copies_;     // per tensor, other layouts made
  std::vector<ir::TensorId> outputs_;
};

}  // namespace recsearch::exec
