// SPDX-License-Identifier: Apache-2.0
// Closed-form collective, redistribution and compute costs (see model.hpp
// for the formulas and their sources).
#include "recsearch/cost/model.hpp"

#include "recsearch/cost/cost_model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace recsearch::cost {
namespace {

double log2_steps(std::int64_t k) {
  return static_cast<double>(std::bit_width(static_cast<std::uint64_t>(k - 1)));  // ceil(log2 k)
}

}  // namespace

std::string_view collective_name(Collective c) noexcept {
  switch (c) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllToAll: return "all_to_all";
    case Collective::Halo: return "halo";
  }
  return "?";
}

std::string_view phase_name(Phase p) noexcept {
  return p == Phase::Forward ? "forward" : "backward";
}

double collective_bytes(Collective c, double group_bytes, const Cut& cut) noexcept {
  const std::int64_t k = cut.size;
  if (k <= 1) return 0.0;
  const double kd = static_cast<double>(k);
  group_bytes /= static_cast<double>(std::max<std::int64_t>(cut.devices_below, 1));
  switch (c) {
    case Collective::AllGather:
    case Collective::ReduceScatter: return (kd - 1) / kd * group_bytes;
    case Collective::AllReduce: return 2 * (kd - 1) / kd * group_bytes;
    case Collective::AllToAll: return (kd - 1) / (kd * kd) * group_bytes;
    case Collective::Halo: return group_bytes;
  }
  return 0.0;
}

double symbolic_collective_seconds(Collective c, double group_bytes, const Cut& cut,
                                   const CostParams& p) noexcept {
  if (cut.size <= 1) return 0.0;
  double t = collective_bytes(c, group_bytes, cut) / cut.bandwidth_Bps;
  if (p.count_latency) {
    double steps = 1.0;
    if (c != Collective::Halo) steps = log2_steps(cut.size) * (c == Collective::AllReduce ? 2 : 1);
    t += steps * cut.latency_s;
  }
  return t;
}

double symbolic_gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                                 const CostParams& p) noexcept {
  if (!(parameter && p.bucket_gradients))
    return symbolic_collective_seconds(Collective::AllReduce, group_bytes, cut, p);
  if (cut.size <= 1) return 0.0;
  return collective_bytes(Collective::AllReduce, group_bytes, cut) / cut.bandwidth_Bps;
}

int redistribution_steps(AxisLayout from, AxisLayout to, Mode mode, RedistStep out[2]) noexcept {
  if (from == to || to.kind == LayoutKind::Partial) return 0;
  const bool train = mode == Mode::Train;
  int n = 0;
  auto add = [&](Collective c, Phase ph) { out[n++] = RedistStep{c, ph}; };
  switch (from.kind) {
    case LayoutKind::Shard:
      if (to.kind == LayoutKind::Replicate) {
        add(Collective::AllGather, Phase::Forward);
        if (train) add(Collective::ReduceScatter, Phase::Backward);
      } else {
        add(Collective::AllToAll, Phase::Forward);
        if (train) add(Collective::AllToAll, Phase::Backward);
      }
      break;
    case LayoutKind::Replicate:  // -> Shard: a local slice forward
      if (train) add(Collective::AllGather, Phase::Backward);
      break;
    case LayoutKind::Partial:
      if (to.kind == LayoutKind::Replicate) {
        add(Collective::AllReduce, Phase::Forward);
      } else {
        add(Collective::ReduceScatter, Phase::Forward);
        if (train) add(Collective::AllGather, Phase::Backward);
      }
      break;
  }
  return n;
}

double symbolic_compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                const CostParams& p, Mode mode) noexcept {
  const double t = std::max(flops / (dev.peak_TFLOPs * 1e12 * p.compute_efficiency),
                            bytes / (dev.memory_bandwidth_GBps * 1e9));
  return mode == Mode::Train ? t * (1.0 + p.backward_flops_factor) : t;
}

double symbolic_parameter_state_factor(const CostParams& p, Mode mode) noexcept {
  return mode == Mode::Train ? 1.0 + p.gradient_bytes_factor + p.optimizer_bytes_factor : 1.0;
}

// The entry points every account prices through: a user's model when one
// is set, else the formulas above (one branch; the hot loops stay inline-free
// of virtual calls in the default case).
double collective_seconds(Collective c, double group_bytes, const Cut& cut,
                          const CostParams& p) noexcept {
  return p.model ? p.model->collective_seconds(c, group_bytes, cut, p)
                 : symbolic_collective_seconds(c, group_bytes, cut, p);
}

double gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                        const CostParams& p) noexcept {
  return p.model ? p.model->gradient_seconds(group_bytes, parameter, cut, p)
                 : symbolic_gradient_seconds(group_bytes, parameter, cut, p);
}

double compute_seconds(double flops, double bytes, const DeviceSpec& dev, const CostParams& p,
                       Mode mode) noexcept {
  return p.model ? p.model->compute_seconds(flops, bytes, dev, p, mode)
                 : symbolic_compute_seconds(flops, bytes, dev, p, mode);
}

double compute_seconds(double flops, double bytes, const DeviceSpec& dev, Precision precision,
                       const CostParams& p, Mode mode) noexcept {
  const double peak = dev.peak_TFLOPs_of(precision);
  if (peak == dev.peak_TFLOPs) return compute_seconds(flops, bytes, dev, p, mode);
  DeviceSpec at = dev;
  at.peak_TFLOPs = peak;
  return compute_seconds(flops, bytes, at, p, mode);
}

StepCompute step_compute(double flops, double bytes, const DeviceSpec& dev, Precision precision,
                         const CostParams& p, Mode mode, double backward_share,
                         bool recomputed) noexcept {
  StepCompute c;
  c.forward = compute_seconds(flops, bytes, dev, precision, p, Mode::Infer);
  if (mode != Mode::Train) {
    c.passes = c.forward;
    return c;
  }
  // The symbolic model's training time is its forward's times a constant:
  // one evaluation serves both (the same doubles as two calls).
  const double whole = p.model ? compute_seconds(flops, bytes, dev, precision, p, Mode::Train)
                               : c.forward * (1.0 + p.backward_flops_factor);
  c.passes = backward_share >= 1.0 ? whole : c.forward + backward_share * (whole - c.forward);
  if (recomputed) c.recompute = c.forward;
  return c;
}

double parameter_state_factor(const CostParams& p, Mode mode) noexcept {
  return p.model ? p.model->parameter_state_factor(p, mode)
                 : symbolic_parameter_state_factor(p, mode);
}

int gradient_sync_steps(bool parameter, int zero_stage, SyncStep out[3]) noexcept {
  if (!parameter || zero_stage <= 0) {
    out[0] = {Collective::AllReduce, Phase::Backward, !parameter};
    return 1;
  }
  if (zero_stage <= 2) {
    out[0] = {Collective::ReduceScatter, Phase::Backward, zero_stage == 2};
    out[1] = {Collective::AllGather, Phase::Forward, false};
    return 2;
  }
  out[0] = {Collective::AllGather, Phase::Forward, true};
  out[1] = {Collective::AllGather, Phase::Backward, true};
  out[2] = {Collective::ReduceScatter, Phase::Backward, true};
  return 3;
}

double sync_step_seconds(const SyncStep& s, double group_bytes, bool parameter, const Cut& cut,
                         const CostParams& p) noexcept {
  if (s.collective == Collective::AllReduce)
    return gradient_seconds(group_bytes, parameter, cut, p);
  if (!(parameter && p.bucket_gradients))
    return collective_seconds(s.collective, group_bytes, cut, p);
  if (cut.size <= 1) return 0.0;
  if (!p.model) return collective_bytes(s.collective, group_bytes, cut) / cut.bandwidth_Bps;
  CostParams bandwidth_only = p;
  bandwidth_only.count_latency = false;
  return p.model->collective_seconds(s.collective, group_bytes, cut, bandwidth_only);
}

GradientSync gradient_sync(double group_bytes, bool parameter, int zero_stage,
                           std::int64_t microbatches, const Cut& cut,
                           const CostParams& p) noexcept {
  SyncStep steps[3];
  const int n = gradient_sync_steps(parameter, zero_stage, steps);
  GradientSync out;
  for (int i = 0; i < n; ++i) {
    const double one = sync_step_seconds(steps[i], group_bytes, parameter, cut, p);
    const bool repeated = steps[i].per_microbatch;
    const double t = repeated ? one * static_cast<double>(microbatches) : one;
    out.total += t;
    (repeated && microbatches > 1 ? out.repeated : out.once) += t;
  }
  return out;
}

double gradient_sync_seconds(double group_bytes, bool parameter, int zero_stage,
                             std::int64_t microbatches, const Cut& cut,
                             const CostParams& p) noexcept {
  return gradient_sync(group_bytes, parameter, zero_stage, microbatches, cut, p).total;
}

double CostModel::collective_seconds(Collective c, double group_bytes, const Cut& cut,
                                     const CostParams& p) const noexcept {
  return symbolic_collective_seconds(c, group_bytes, cut, p);
}

// Through this model's own collective_seconds, so that a model overriding
// only the collectives also prices gradients: a bucketed parameter gradient
// is its all-reduce without the latency term, as in the symbolic model.
double CostModel::gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                                   const CostParams& p) const noexcept {
  if (!(parameter && p.bucket_gradients))
    return collective_seconds(Collective::AllReduce, group_bytes, cut, p);
  if (cut.size <= 1) return 0.0;
  CostParams bandwidth_only = p;
  bandwidth_only.count_latency = false;
  return collective_seconds(Collective::AllReduce, group_bytes, cut, bandwidth_only);
}

double CostModel::compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                  const CostParams& p, Mode mode) const noexcept {
  return symbolic_compute_seconds(flops, bytes, dev, p, mode);
}

double CostModel::parameter_state_factor(const CostParams& p, Mode mode) const noexcept {
  return symbolic_parameter_state_factor(p, mode);
}

}  // namespace recsearch::cost
