// SPDX-License-Identifier: Apache-2.0
// Private to the algebra module: the state shared by the per-kind builders.
//
// Every operator kind is described by one function (kinds_*.cpp) that first
// works out the output shapes the kind implies, then — unless only inference
// was asked for — lays out loops and operand mappings. SpaceBuilder carries
// what those functions need in common: operand shapes, attribute access whose
// errors carry the operator's JSON path, overflow-safe arithmetic, and the
// check of the produced outputs against the inferred shapes. Keeping both
// modes in one function per kind means validation, inference and the search
// can never disagree about what an operator means.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::algebra::detail {

// ---- overflow-safe integer helpers -------------------------------------

[[nodiscard]] inline std::optional<std::int64_t> checked_mul(std::int64_t a,
                                                             std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

[[nodiscard]] inline std::optional<std::int64_t> checked_add(std::int64_t a,
                                                             std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of dims, nullopt on overflow (dims are known to be >= 0 here).
[[nodiscard]] std::optional<std::int64_t> checked_product(
    std::span<const std::int64_t> dims) noexcept;
// Product as a double: flops and element counts never overflow this way.
[[nodiscard]] double product_d(std::span<const std::int64_t> dims) noexcept;
[[nodiscard]] std::string fmt_shape(std::span<const std::int64_t> s);
// "d3", "b0": loop names built from a prefix and an index.
[[nodiscard]] std::string indexed(std::string_view prefix, std::size_t i);

// Loop name of dim d of an [N, C, spatial...] tensor: n, c, then h, w for
// 4-D tensors and d2, d3, ... otherwise.
[[nodiscard]] std::string nchw_name(std::size_t rank, std::size_t d);

// numpy broadcasting of two shapes, right-aligned. On failure, `bad_a` and
// `bad_b` receive the offending dim of each operand.
[[nodiscard]] std::optional<ir::Shape> broadcast(std::span<const std::int64_t> a,
                                                 std::span<const std::int64_t> b,
                                                 std::size_t* bad_a = nullptr,
                                                 std::size_t* bad_b = nullptr);

// ---- the builder ----------------------------------------------------------

class SpaceBuilder {
 public:
  // `id` is the operator's index in the graph (its JSON path is then
  // "/operators/<id>"), or nullopt when the operator is not (yet) part of
  // the graph and paths are relative to it. In infer-only mode the output
  // tensors are never looked at (they may not exist yet).
  SpaceBuilder(const ir::Graph& g, const ir::Operator& op, ir::OpKind kind,
               std::optional<ir::OpId> id, bool infer_only);

  [[nodiscard]] const ir::Graph& graph() const noexcept { return g_; }
  [[nodiscard]] const ir::Operator& op() const noexcept { return op_; }
  [[nodiscard]] std::optional<ir::OpId> id() const noexcept { return id_; }
  [[nodiscard]] ir::OpKind kind() const noexcept { return kind_; }
  [[nodiscard]] std::string_view type() const noexcept { return op_.type; }
  [[nodiscard]] bool infer_only() const noexcept { return infer_only_; }
  [[nodiscard]] std::size_t num_inputs() const noexcept { return op_.inputs.size(); }
  [[nodiscard]] std::size_t num_outputs() const noexcept { return op_.outputs.size(); }

  [[nodiscard]] const ir::Tensor& in_tensor(std::size_t j) const;
  [[nodiscard]] const ir::Shape& in(std::size_t j) const { return in_tensor(j).shape; }
  [[nodiscard]] std::int64_t in_rank(std::size_t j) const {
    return static_cast<std::int64_t>(in(j).size());
  }
  // Output shapes: build mode only (after outputs_checked()).
  [[nodiscard]] const ir::Tensor& out_tensor(std::size_t j) const;
  [[nodiscard]] const ir::Shape& out(std::size_t j) const { return out_tensor(j).shape; }

  // ---- paths and errors
  // The operator's JSON path; built on demand since only errors need it.
  [[nodiscard]] std::string path() const;
  [[nodiscard]] std::string in_path(std::size_t j) const;
  [[nodiscard]] std::string out_path(std::size_t j) const;
  [[nodiscard]] std::string attr_path(std::string_view name) const;
  // "'x' [32, 784]" for messages.
  [[nodiscard]] std::string describe_in(std::size_t j) const;
  [[nodiscard]] std::string describe_out(std::size_t j) const;
  [[noreturn]] void fail(Errc code, const std::string& path, const std::string& msg) const;
  [[noreturn]] void fail_shape(const std::string& path, const std::string& msg) const {
    fail(Errc::kShape, path, msg);
  }
  [[noreturn]] void fail_attr(std::string_view name, const std::string& msg) const {
    fail(Errc::kSchema, attr_path(name), msg);
  }

  // Throws kSchema at ".../inputs" (".../outputs") unless lo <= count <= hi.
  void expect_inputs(std::size_t lo, std::size_t hi) const;
  void expect_outputs(std::size_t lo, std::size_t hi) const;
  void expect_in_rank(std::size_t j, std::int64_t rank, std::string_view what) const;
  void expect_in_min_rank(std::size_t j, std::int64_t rank, std::string_view what) const;

  // ---- attributes (errors re-rooted at the operator's path)
  [[nodiscard]] bool has_attr(std::string_view name) const noexcept { return op_.attrs.has(name); }
  [[nodiscard]] bool attr_bool(std::string_view name, bool def) const;
  [[nodiscard]] std::int64_t attr_int(std::string_view name, std::int64_t def) const;
  [[nodiscard]] std::string attr_string(std::string_view name, std::string_view def) const;
  [[nodiscard]] std::optional<std::vector<std::int64_t>> attr_ints(std::string_view name) const;
  // An integer list of exactly n values (default when absent), each >= min_value.
  [[nodiscard]] std::vector<std::int64_t> attr_ints_n(std::string_view name, std::size_t n,
                                                      std::vector<std::int64_t> def,
                                                      std::int64_t min_value) const;
  // Normalises a possibly negative axis against `rank` positions
  // ([-rank, rank-1]); kSchema at /attrs/<name> when out of range.
  [[nodiscard]] std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank,
                                            std::string_view name) const;
  [[nodiscard]] std::int64_t axis_attr(std::string_view name, std::int64_t def,
                                       std::int64_t rank) const {
    return normalize_axis(attr_int(name, def), rank, name);
  }
  // A list of distinct normalised axes.
  [[nodiscard]] std::vector<std::int64_t> normalize_axes(const std::vector<std::int64_t>& axes,
                                                         std::int64_t rank,
                                                         std::string_view name) const;

  // ---- inference
  void set_inferred(std::size_t j, ir::Shape s);
  // Build mode: compares every produced output with its inferred shape
  // (kShape at ".../outputs/<j>"). Returns true when only inference was
  // asked for, so kinds write `if (b.outputs_checked()) return;`.
  [[nodiscard]] bool outputs_checked();
  // Element-count helper that fails with a clear message on overflow.
  [[nodiscard]] std::int64_t product_or_fail(std::span<const std::int64_t> dims,
                                             const std::string& path, std::string_view what) const;

  // ---- the space
  int add_loop(std::string_view name, std::int64_t size, DimRole role, std::int64_t halo = 0);
  void map_in(std::size_t j, std::size_t dim, int loop);
  void map_out(std::size_t j, std::size_t dim, int loop);
  // The space built so far, for rules that revise a mapping (merge regions).
  [[nodiscard]] OpSpace& space() noexcept { return space_; }
  void set_flops(double f) noexcept { space_.flops = f; }
  void set_opaque() noexcept { space_.opaque = true; }

  // The space, its loop list cut to size (the constructor reserves one
  // loop more than most kinds add).
  [[nodiscard]] OpSpace take_space() {
    if (space_.loops.capacity() > space_.loops.size()) space_.loops.shrink_to_fit();
    return std::move(space_);
  }
  [[nodiscard]] std::vector<std::optional<ir::Shape>> take_inferred() {
    return std::move(inferred_);
  }

 private:
  const ir::Graph& g_;
  const ir::Operator& op_;
  ir::OpKind kind_;
  std::optional<ir::OpId> id_;
  bool infer_only_;
  OpSpace space_;
  std::vector<std::optional<ir::Shape>> inferred_;
};

// ---- merge regions (merge_region.cpp) --------------------------------------

// The kind of an operator, from its type when it was built outside a Graph.
[[nodiscard]] ir::OpKind kind_of(const ir::Operator& op) noexcept;

// The space of operator `id` as its kind alone describes it, before the
// merge-region rule revises it (op_space.cpp).
[[nodiscard]] OpSpace build_raw_space(const ir::Graph& g, ir::OpId id);

// A merge region (docs/design.md, Operator kinds): a Reshape or Flatten
// `merge` whose output's dim 0 is the merge [outer, inner] of its input's
// dim 0 (outer) and the outer factor of its dim 1 (inner), a chain of row
// operators each using the previous tensor once as the rows of one Parallel
// loop, and a Reshape `split` that splits dim 0 back into [outer, inner...].
// Every tensor from the merge's output to the split's input is used once,
// by the next operator of the region.
struct MergeRegion {
  ir::OpId merge = 0;
  ir::OpId split = 0;
  std::int64_t outer = 1;
  std::int64_t inner = 1;
  std::vector<ir::OpId> chain;            // the row operators, in order
  std::vector<std::uint32_t> row_inputs;  // per chain operator, its rows' input slot
};

// The merge region operator `id` belongs to, if any. Depends only on the
// shapes, kinds and uses of the operators around it, so that every member
// finds the same region.
[[nodiscard]] std::optional<MergeRegion> merge_region(const ir::Graph& g, ir::OpId id);

// Revises the space of a chain operator of `r` (slot: its rows' input):
// its row loop cuts the inner factor.
void stride_chain_space(OpSpace& s, const MergeRegion& r, std::uint32_t slot);

// ---- per-kind builders (kinds_*.cpp) ---------------------------------------

void build_matmul(SpaceBuilder& b);
void build_einsum(SpaceBuilder& b, std::string_view attr_name);
void build_attention(SpaceBuilder& b);

void build_conv2d(SpaceBuilder& b);
void build_pool(SpaceBuilder& b);
void build_global_avg_pool(SpaceBuilder& b);

void build_batch_norm(SpaceBuilder& b);
void build_layer_norm(SpaceBuilder& b);
void build_softmax(SpaceBuilder& b);
void build_binary(SpaceBuilder& b);
void build_bias_add(SpaceBuilder& b);
void build_unary(SpaceBuilder& b);

void build_reshape(SpaceBuilder& b);
void build_transpose(SpaceBuilder& b);
void build_concat(SpaceBuilder& b);
void build_split(SpaceBuilder& b);
void build_slice(SpaceBuilder& b);

void build_reduce(SpaceBuilder& b);
void build_gather(SpaceBuilder& b);
void build_one_hot(SpaceBuilder& b);
void build_softmax_cross_entropy(SpaceBuilder& b);

void build_opaque(SpaceBuilder& b);

}  // namespace recsearch::algebra::detail
