// SPDX-License-Identifier: Apache-2.0
// Folding of repeated blocks (see fold.hpp).
//
// Detection: every operator gets a structural signature (type, attributes,
// operand shapes, dtypes and kinds, pinned strategy); a repeated block shows
// up as a frequent gap between equal signatures. For each frequent gap P the
// longest run with sig[i] == sig[i + P] is a candidate, and its wiring is
// then verified block by block: block k must take its inputs from block k-1
// (or itself) exactly as block k-1 does from block k-2, share outside
// tensors, own its parameters, and feed only itself and the next block.
// Only a verified repetition is folded, so the folded graph's weighted cost
// is the full graph's for any plan that treats the middle blocks alike.
#include "search/fold.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>

#include "recsearch/error.hpp"

namespace recsearch::search::detail {

namespace {

// FNV-1a over the bytes of what decides an operator's cost and choices.
class Hasher {
 public:
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= c[i];
      h_ *= 1099511628211ULL;
    }
  }
  template <class T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  void str(std::string_view s) {
    pod(s.size());
    bytes(s.data(), s.size());
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 14695981039346656037ULL;
};

std::uint64_t signature(const ir::Graph& g, ir::OpId o) {
  const ir::Operator& op = g.op(o);
  Hasher h;
  h.str(op.type);
  for (const auto& [name, value] : op.attrs.items()) {
    h.str(name);
    h.pod(value.index());
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            h.str(v);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& s : v) h.str(s);
          } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> ||
                               std::is_same_v<T, std::vector<double>>) {
            h.pod(v.size());
            h.bytes(v.data(), v.size() * sizeof(v[0]));
          } else {
            h.pod(v);
          }
        },
        value);
  }
  auto tensor = [&](ir::TensorId t) {
    const ir::Tensor& x = g.tensor(t);
    h.pod(x.shape.size());
    h.bytes(x.shape.data(), x.shape.size() * sizeof(x.shape[0]));
    h.pod(x.dtype);
    h.pod(x.kind);
    h.pod(x.producer == ir::kNone);
  };
  h.pod(op.inputs.size());
  for (const auto t : op.inputs) tensor(t);
  h.pod(op.outputs.size());
  for (const auto t : op.outputs) tensor(t);
  h.pod(op.strategy.has_value());
  if (op.strategy) {
    for (const auto& s : *op.strategy) {
      h.pod(s.size());
      h.bytes(s.data(), s.size() * sizeof(s[0]));
    }
  }
  h.pod(op.allowed.has_value());
  if (op.allowed) {
    for (const auto& s : *op.allowed) h.str(s);
  }
  // A pinned recomputation is a constraint like a pinned strategy: blocks
  // pinned differently are not copies of one another.
  h.pod(op.recompute.has_value());
  if (op.recompute) h.pod(*op.recompute);
  return h.value();
}

// Output slot of t in its producer.
std::size_t producer_slot(const ir::Graph& g, ir::TensorId t) {
  const auto& outs = g.op(g.tensor(t).producer).outputs;
  return static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin());
}

class Verifier {
 public:
  Verifier(const ir::Graph& g, std::size_t start, std::size_t period, std::size_t repeats)
      : g_(g), a_(start), p_(period), r_(repeats) {}

  // Block of operator o in the run, or -1 outside it.
  [[nodiscard]] long block(ir::OpId o) const {
    if (o == ir::kNone || o < a_ || o >= a_ + p_ * r_) return -1;
    return static_cast<long>((o - a_) / p_);
  }

  // Whether every consumer of block k's outputs lies in blocks k or k + 1.
  [[nodiscard]] bool consumers_ok(std::size_t k) const {
    for (std::size_t o = a_ + k * p_; o < a_ + (k + 1) * p_; ++o) {
      for (const auto t : g_.op(static_cast<ir::OpId>(o)).outputs) {
        for (const auto c : g_.tensor(t).consumers) {
          const long b = block(c);
          if (b != static_cast<long>(k) && b != static_cast<long>(k) + 1) return false;
        }
      }
    }
    return true;
  }

  // Whether no consumer of block k's outputs lies in blocks [0, k).
  [[nodiscard]] bool last_ok(std::size_t k) const {
    for (std::size_t o = a_ + k * p_; o < a_ + (k + 1) * p_; ++o) {
      for (const auto t : g_.op(static_cast<ir::OpId>(o)).outputs) {
        for (const auto c : g_.tensor(t).consumers) {
          const long b = block(c);
          if (b >= 0 && b < static_cast<long>(k)) return false;
        }
      }
    }
    return true;
  }

  // Whether block k (k >= 1) takes its inputs as block k-1 does.
  [[nodiscard]] bool inputs_ok(std::size_t k) const {
    for (std::size_t o = a_ + k * p_; o < a_ + (k + 1) * p_; ++o) {
      const ir::Operator& x = g_.op(static_cast<ir::OpId>(o));
      const ir::Operator& y = g_.op(static_cast<ir::OpId>(o - p_));
      if (x.inputs.size() != y.inputs.size()) return false;
      for (std::size_t j = 0; j < x.inputs.size(); ++j) {
        const ir::TensorId t = x.inputs[j];
        const ir::TensorId u = y.inputs[j];
        const ir::OpId pt = g_.tensor(t).producer;
        const ir::OpId pu = g_.tensor(u).producer;
        const long bt = block(pt);
        if (bt >= 0) {
          // Produced in the run: block 1 may take anything from block 0
          // (that wiring is what the fold copies); later blocks must mirror it.
          if (k == 1 && bt == 0) continue;
          if (pu == ir::kNone || pt != pu + p_ || producer_slot(g_, t) != producer_slot(g_, u))
            return false;
          continue;
        }
        if (t == u) continue;  // shared with the previous block, from outside the run
        // Own tensors (parameters): used by this block only, as the other by its own.
        if (pt != ir::kNone || pu != ir::kNone) return false;
        if (!used_only_in(t, static_cast<long>(k)) || !used_only_in(u, static_cast<long>(k) - 1))
          return false;
      }
    }
    return true;
  }

 private:
  [[nodiscard]] bool used_only_in(ir::TensorId t, long k) const {
    for (const auto c : g_.tensor(t).consumers)
      if (block(c) != k) return false;
    return true;
  }

  const ir::Graph& g_;
  std::size_t a_, p_, r_;
};

// The longest verified prefix of the run's blocks.
std::size_t verified_repeats(const ir::Graph& g, std::size_t start, std::size_t period,
                             std::size_t repeats) {
  const Verifier v(g, start, period, repeats);
  std::size_t r = 1;
  while (r < repeats && v.inputs_ok(r) && v.consumers_ok(r - 1)) ++r;
  // The last block may feed anything after the run, but nothing inside it.
  while (r > 1 && !v.last_ok(r - 1)) --r;
  return r;
}

}  // namespace

std::optional<Repetition> find_repetition(const ir::Graph& g, std::size_t min_repeats) {
  const std::size_t n = g.num_operators();
  if (n < 2 * min_repeats) return std::nullopt;
  std::vector<std::uint64_t> sig(n);
  for (std::size_t o = 0; o < n; ++o) sig[o] = signature(g, static_cast<ir::OpId>(o));

  // Frequent gaps between equal signatures are the candidate periods.
  std::unordered_map<std::uint64_t, std::size_t> last;
  std::unordered_map<std::size_t, std::size_t> gaps;
  last.reserve(1024);
  for (std::size_t o = 0; o < n; ++o) {
    const auto [it, fresh] = last.try_emplace(sig[o], o);
    if (!fresh) {
      ++gaps[o - it->second];
      it->second = o;
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> cands;  // (count, gap)
  for (const auto& [gap, count] : gaps)
    if (count >= min_repeats) cands.emplace_back(count, gap);
  // Most frequent first; ties to the smaller gap, so the choice is deterministic.
  std::sort(cands.begin(), cands.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  constexpr std::size_t kCandidates = 8;
  if (cands.size() > kCandidates) cands.resize(kCandidates);

  std::optional<Repetition> best;
  for (const auto& [count, p] : cands) {
    // Maximal runs with sig[i] == sig[i + p]: [a, a + len) gives (len + p) / p blocks.
    std::size_t i = 0;
    while (i + p < n) {
      if (sig[i] != sig[i + p]) {
        ++i;
        continue;
      }
      const std::size_t a = i;
      while (i + p < n && sig[i] == sig[i + p]) ++i;
      const std::size_t blocks = (i - a + p) / p;
      if (blocks >= min_repeats && (!best || blocks * p > best->repeats * best->period)) {
        const std::size_t r = verified_repeats(g, a, p, blocks);
        if (r >= min_repeats && (!best || r * p > best->repeats * best->period))
          best = Repetition{a, p, r};
      }
    }
  }
  return best;
}

std::size_t folded_op(const Repetition& rep, std::size_t copies, std::size_t o) {
  const std::size_t end = rep.start + rep.period * rep.repeats;
  if (o < rep.start) return o;
  if (o >= end) return o - (rep.repeats - copies) * rep.period;
  const std::size_t k = (o - rep.start) / rep.period;
  const std::size_t i = (o - rep.start) % rep.period;
  std::size_t kf;
  if (k == 0) {
    kf = 0;
  } else if (k == rep.repeats - 1) {
    kf = copies - 1;
  } else if (k <= rep.repeats - copies + 1) {
    kf = 1;
  } else {
    kf = k - (rep.repeats - copies);
  }
  return rep.start + kf * rep.period + i;
}

Folded fold(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Repetition& rep,
            std::size_t copies) {
  if (copies < 3 || copies > rep.repeats)
    throw Error(Errc::kInternal, "fold: copies must be in [3, repeats]");
  const std::size_t n = g.num_operators();
  const std::size_t end = rep.start + rep.period * rep.repeats;
  const std::size_t shift = (rep.repeats - copies) * rep.period;
  Folded f;
  f.graph = ir::Graph(g.name());
  std::vector<ir::TensorId> map(g.num_tensors(), ir::kNone);
  auto kept = [&](std::size_t o) { return o < rep.start + copies * rep.period || o >= end; };
  // A tensor of the full graph as the folded graph sees it: outputs of
  // the last block are those of the last copy.
  auto mapped = [&](ir::TensorId t) {
    const ir::OpId p = g.tensor(t).producer;
    if (p != ir::kNone && p >= rep.start + (rep.repeats - 1) * rep.period && p < end) {
      const ir::OpId q = static_cast<ir::OpId>(p - shift);
      return g.op(q).outputs[producer_slot(g, t)];
    }
    return t;
  };
  auto add = [&](ir::TensorId t) {
    if (map[t] != ir::kNone) return map[t];
    const ir::Tensor& x = g.tensor(t);
    const auto kind = x.kind == ir::TensorKind::Activation ? ir::TensorKind::Input : x.kind;
    map[t] = f.graph.add_tensor(x.name, x.shape, x.dtype, kind);
    return map[t];
  };
  f.spaces.reserve(n - shift);
  f.weight.reserve(n - shift);
  for (std::size_t o = 0; o < n; ++o) {
    if (!kept(o)) continue;
    ir::Operator op = g.op(static_cast<ir::OpId>(o));
    for (auto& t : op.inputs) t = add(mapped(t));
    for (auto& t : op.outputs) t = add(t);
    f.graph.add_operator(std::move(op));
    f.spaces.push_back(spaces[o]);
    const bool middle = o >= rep.start + rep.period && o < rep.start + 2 * rep.period;
    f.weight.push_back(middle ? static_cast<double>(rep.repeats - copies + 1) : 1.0);
  }
  // Tensors nobody touches still take memory (held whole).
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(t);
    if (x.producer == ir::kNone && x.consumers.empty()) add(t);
  }
  std::vector<ir::TensorId> gradient_inputs;
  for (const ir::TensorId t : g.gradient_inputs())
    if (map[t] != ir::kNone) gradient_inputs.push_back(map[t]);
  f.graph.set_gradient_inputs(std::move(gradient_inputs));
  f.graph.finalize();
  return f;
}

plan::Plan unfold(const plan::Plan& folded, const Repetition& rep, std::size_t num_ops) {
  plan::Plan p = folded;
  p.cuts.resize(num_ops);
  for (std::size_t o = 0; o < num_ops; ++o) p.cuts[o] = folded.cuts[folded_op(rep, 3, o)];
  return p;
}

plan::Plan refold(const plan::Plan& folded3, const Repetition& rep, std::size_t copies,
                  std::size_t full_ops) {
  plan::Plan p = folded3;
  const std::size_t n = full_ops - (rep.repeats - copies) * rep.period;
  const std::size_t blocks_end = rep.start + copies * rep.period;
  p.cuts.resize(n);
  // Op j of the copies-fold, straight to the 3-fold op that stands for the
  // same full ops (O(fold), not O(full graph): the folded ladder refolds
  // every plan it weighs): the first copy and the last keep their places,
  // every copy between is the middle copy.
  for (std::size_t j = 0; j < n; ++j) {
    std::size_t j3 = j;
    if (j >= blocks_end) {
      j3 = j - (copies - 3) * rep.period;
    } else if (j >= rep.start) {
      const std::size_t kf = (j - rep.start) / rep.period;
      const std::size_t k3 = kf == 0 ? 0 : kf == copies - 1 ? 2 : 1;
      j3 = rep.start + k3 * rep.period + (j - rep.start) % rep.period;
    }
    p.cuts[j] = folded3.cuts[j3];
  }
  return p;
}

}  // namespace recsearch::search::detail
