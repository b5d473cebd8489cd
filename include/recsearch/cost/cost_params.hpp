// SPDX-License-Identifier: Apache-2.0
// Coefficients of the symbolic cost model, with documented defaults.
//
// Every constant the cost model uses lives here, so that users can calibrate
// it (graph JSON `"cost"` object, cluster JSON, CLI flags) instead of editing
// code.
#pragma once

#include <cstdint>
#include <memory>

namespace recsearch {

namespace cost {
class CostModel;  // recsearch/cost/cost_model.hpp: a user's own costs
}  // namespace cost

// Training counts backward work, gradient synchronisation, the backward dual
// of every redistribution and optimizer memory; inference counts none.
enum class Mode { Train, Infer };

// Bytes of training state per parameter element (docs/cost-model.md,
// Parameter state), for a parameter of e bytes per element:
//  MixedAdam    e weight + e gradient + 12 (f32 master copy, Adam m and v):
//               16 bytes for f16/bf16 weights;
//  AdamF32      weight, gradient, m and v all of the weight's dtype: 4e;
//  Sgd          weight and gradient: 2e;
//  SgdMomentum  plus a momentum buffer: 3e;
//  Auto         MixedAdam for parameters of at most 2 bytes, else AdamF32;
//  Factors      gradient_bytes_factor and optimizer_bytes_factor below.
enum class Optimizer : std::uint8_t { Auto, MixedAdam, AdamF32, Sgd, SgdMomentum, Factors };

struct CostParams {
  // Backward flops relative to forward (dX and dW: 2x).
  double backward_flops_factor = 2.0;
  // Fraction of the device's peak flops that kernels reach.
  double compute_efficiency = 0.5;
  // Optimizer preset that sets the bytes of parameter state.
  Optimizer optimizer = Optimizer::Auto;
  // With Optimizer::Factors: gradient bytes per parameter byte.
  double gradient_bytes_factor = 1.0;
  // With Optimizer::Factors: optimizer-state bytes per parameter byte
  // (Adam's m and v: 2).
  double optimizer_bytes_factor = 2.0;
  // Count per-step latency of collectives (alpha term).
  bool count_latency = true;
  // Parameter gradients are all-reduced in fused buckets (as DDP, FSDP and
  // Megatron do), so their latency is amortised: only the bandwidth term of
  // a parameter's gradient all-reduce is charged. Activation gradients
  // (replicated inputs of a cut operator) always pay their latency.
  bool bucket_gradients = true;
  // Parameter-gradient reductions overlap the backward pass and ZeRO-3
  // gathers are prefetched (as DDP, FSDP and Megatron run them); false
  // charges every collective on the critical path.
  bool overlap = true;
  // f32 contractions (MatMul, BatchMatMul, Einsum, Conv2D, Attention) run
  // on TF32 tensor cores at the device's tf32 peak, as PyTorch's
  // `allow_tf32` settings let them; false: at its f32 peak.
  bool tf32 = false;
  // Memory budget per device in bytes; <= 0 means the device's capacity.
  double memory_budget_bytes = 0.0;
  // A user's cost model (recsearch/cost/cost_model.hpp) that replaces the
  // symbolic formulas for every collective, gradient synchronisation,
  // operator compute time and parameter state; null: the symbolic model.
  // Shared, so that copies of these settings stay cheap.
  std::shared_ptr<const cost::CostModel> model;
};

}  // namespace recsearch
