// SPDX-License-Identifier: Apache-2.0
// The dimension algebra: every operator kind described as an iteration space.
//
// An OpSpace lists the loop dimensions of an operator (MatMul `ik,kj->ij` has
// loops i, k, j) with the role each plays when it is cut across devices, and
// maps every dimension of every operand onto a loop (or onto none: broadcast
// dims of size 1, and dims a cut can never reach). The search, the evaluator
// and validation all work on OpSpaces only; nothing downstream knows operator
// kinds.
//
// Cutting loop d by k is legal when k divides the loop's remaining size
// (size / splits so far) and, for every operand dim mapped to d, k divides
// that dim's remaining slice; role Whole is never cut.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/ir/graph.hpp"

namespace recsearch::algebra {

enum class DimRole : std::uint8_t {
  Parallel,   // in every output that has it; inputs lacking it are replicated across the cut
  Reduction,  // in no output: cutting leaves outputs partial (all-reduce / reduce-scatter)
  Window,     // convolution / pooling spatial dim: cutting needs a halo exchange
  Whole,      // must not be cut (softmax axis, normalized axes, concat axis, ...)
};

[[nodiscard]] std::string_view dim_role_name(DimRole r) noexcept;

// A loop's name ("i", "k", "d3", "in12", an einsum letter): at most kMax
// characters, kept inline (a graph of 10^6 operators has some 4·10^6
// loops, and a std::string would take 32 bytes for each).
class LoopName {
 public:
  static constexpr std::size_t kMax = 7;

  LoopName() = default;
  // Implicit, as a name is a string. Error(kInternal) for a name over kMax
  // characters (no kind makes one).
  LoopName(std::string_view name);
  LoopName(const char* name) : LoopName(std::string_view(name)) {}
  LoopName(const std::string& name) : LoopName(std::string_view(name)) {}

  [[nodiscard]] std::string_view view() const noexcept { return {chars_.data(), size_}; }
  operator std::string_view() const noexcept { return view(); }
  [[nodiscard]] std::string str() const { return std::string(view()); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  friend bool operator==(const LoopName& a, std::string_view b) noexcept { return a.view() == b; }
  friend std::string operator+(std::string a, const LoopName& b) { return a.append(b.view()); }
  friend std::string operator+(const LoopName& a, std::string_view b) { return a.str().append(b); }

 private:
  std::array<char, kMax> chars_{};
  std::uint8_t size_ = 0;
};

// 24 bytes: an operator's loops are most of its space.
struct LoopDim {
  LoopName name;          // "i", "k", "j"; einsum letters; "d0".. for elementwise
  std::int64_t size = 1;  // extent of the iteration space along this loop
  DimRole role = DimRole::Parallel;
  // Window dims: input rows exchanged per split boundary (both neighbours
  // together), max(0, (kernel-1)*dilation + 1 - stride). 0 otherwise. A
  // window whose halo would pass 2^31 - 1 rows is refused (kShape).
  std::int32_t halo = 0;
};

// Loop index of one operand dimension, or kUnmapped.
inline constexpr int kUnmapped = -1;

// An operand dim whose loop cuts its inner factor: the dim, of size n, is
// the merge [outer, n / outer] (outer slowest) and a cut of its loop into k
// parts gives part p, for every outer index, the p-th contiguous block of
// the inner factor: a strided set of rows. The loop's size is then at most
// n / outer, so that every legal cut divides the inner factor. Bytes, and
// so every collective's price, are those of an ordinary Shard of the dim;
// which rows a part holds matters only to code that moves the data (exec).
struct StridedDim {
  bool output = false;  // an output (else an input) of the operator
  std::uint32_t operand = 0;
  std::uint32_t dim = 0;
  std::int64_t outer = 1;  // the merged dim's outer factor, > 1
};

// The loops of one side's operands (an operator's inputs, or its outputs):
// (*this)[j][d] is the loop of dim d of operand j, kUnmapped if none. All
// operands in one block, [count, end of each operand's dims, the dims], so
// that an operator holds two blocks, not one vector per operand; the block
// is held by one pointer (none without operands), as every operator of a
// graph holds two.
class OperandLoops {
 public:
  OperandLoops() = default;
  OperandLoops(std::initializer_list<std::initializer_list<int>> maps);
  explicit OperandLoops(const std::vector<std::vector<int>>& maps);
  // ranks.size() operands of these ranks, every dim kUnmapped.
  explicit OperandLoops(std::span<const std::size_t> ranks);
  OperandLoops(const OperandLoops& other);
  OperandLoops& operator=(const OperandLoops& other);
  OperandLoops(OperandLoops&&) noexcept = default;
  OperandLoops& operator=(OperandLoops&&) noexcept = default;
  ~OperandLoops() = default;

  [[nodiscard]] std::size_t size() const noexcept {
    return block_ == nullptr ? 0 : static_cast<std::size_t>(block_[0]);
  }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] std::span<const int> operator[](std::size_t j) const noexcept {
    const std::size_t n = size();
    const auto from = static_cast<std::size_t>(j == 0 ? 0 : block_[j]);
    const auto to = static_cast<std::size_t>(block_[j + 1]);
    return {block_.get() + 1 + n + from, to - from};
  }
  // operator[] with j checked (std::out_of_range).
  [[nodiscard]] std::span<const int> at(std::size_t j) const;

  // The operands' lists in order (a range-for over the operands).
  class Iterator {
   public:
    using value_type = std::span<const int>;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(const OperandLoops* of, std::size_t j) noexcept : of_(of), j_(j) {}
    std::span<const int> operator*() const noexcept { return (*of_)[j_]; }
    Iterator& operator++() noexcept {
      ++j_;
      return *this;
    }
    Iterator operator++(int) noexcept {
      Iterator was = *this;
      ++j_;
      return was;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) noexcept { return a.j_ == b.j_; }

   private:
    const OperandLoops* of_ = nullptr;
    std::size_t j_ = 0;
  };
  [[nodiscard]] Iterator begin() const noexcept { return {this, 0}; }
  [[nodiscard]] Iterator end() const noexcept { return {this, size()}; }
  // Sets dim d of operand j (the builder's and a merge region's revisions).
  void set(std::size_t j, std::size_t d, int loop);

  friend bool operator==(const OperandLoops& a, const OperandLoops& b) noexcept;

 private:
  explicit OperandLoops(const std::vector<int>& block);
  // Ints in the block: 1 + count + the dims.
  [[nodiscard]] std::size_t length() const noexcept {
    const std::size_t n = size();
    return n == 0 ? 0 : 1 + n + static_cast<std::size_t>(block_[n]);
  }

  std::unique_ptr<int[]> block_;
};

struct OpSpace {
  std::vector<LoopDim> loops;
  // inputs[j][d]: loop of dim d of input j (kUnmapped if none). Same for outputs.
  OperandLoops inputs;
  OperandLoops outputs;
  // Forward flops of the whole (uncut) operator; backward is counted by the
  // cost model (CostParams::backward_flops_factor).
  double flops = 0.0;
  // Unknown kind without an `einsum` attribute: cannot be cut, runs replicated.
  bool opaque = false;
  // Operand dims cut on an inner factor (docs/design.md, Operator kinds:
  // merge regions); empty for almost every operator.
  std::vector<StridedDim> strided;

  // Index of the loop called `name`, or kUnmapped.
  [[nodiscard]] int find_loop(std::string_view name) const noexcept;
  // The outer factor of an operand dim cut on its inner factor, else 1.
  [[nodiscard]] std::int64_t outer_of(bool output, std::size_t operand,
                                      std::size_t dim) const noexcept;
  // Whether cutting `loop` shards some operand dim on its inner factor.
  [[nodiscard]] bool cuts_inner_factor(int loop) const noexcept;
};

// The outer factor of dim d of tensor t as its producer lays it out: > 1
// where the producer cuts that dim on its inner factor (StridedDim: a
// strided shard, when the dim is sharded), 1 for contiguous rows and for
// tensors nobody produces.
[[nodiscard]] std::int64_t produced_outer(const ir::Graph& g, const std::vector<OpSpace>& spaces,
                                          ir::TensorId t, std::size_t d) noexcept;

// Builds the iteration space of operator `id` from its kind, attributes and
// tensor shapes. This is also the semantic validation of the operator:
// throws recsearch::Error(kShape or kSchema) with the JSON path
// "/operators/<id>/..." when shapes or attributes contradict the kind
// (MatMul inner dims, broadcasting, Reshape element count, Conv channels and
// groups, output shapes that do not match the inferred ones, ...).
[[nodiscard]] OpSpace build_op_space(const ir::Graph& g, ir::OpId id);

// build_op_space for every operator, in id order (parallel over operators,
// deterministic). On errors, the error of the lowest operator id is thrown.
[[nodiscard]] std::vector<OpSpace> build_op_spaces(const ir::Graph& g);

// Output shapes the kind implies for the given inputs and attributes, where
// the kind determines them (empty optional entries where it does not, e.g.
// Reshape, whose output shape is only given by the output tensor).
// Used by generators and importers; build_op_space checks against it.
[[nodiscard]] std::vector<std::optional<ir::Shape>> infer_output_shapes(const ir::Graph& g,
                                                                        const ir::Operator& op);

// Whether a loop split factor can be applied: `splits[d]` is the product of
// earlier cuts on loop d. Checks the role, the loop size and every operand
// dim mapped to d (see the file comment).
[[nodiscard]] bool can_cut(const ir::Graph& g, const ir::Operator& op, const OpSpace& s,
                           const std::vector<std::int64_t>& splits, int loop, std::int64_t k);

}  // namespace recsearch::algebra
