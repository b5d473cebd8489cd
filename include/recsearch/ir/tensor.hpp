// SPDX-License-Identifier: Apache-2.0
// Tensors of the graph IR: element types, shapes and the role a tensor plays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recsearch::ir {

using TensorId = std::uint32_t;
using OpId = std::uint32_t;
// Marks "no operator" (a tensor nobody produces) or "no tensor".
inline constexpr std::uint32_t kNone = 0xFFFFFFFFu;

// Element types of the graph file (`"dtype"`).
enum class DType : std::uint8_t { F64, F32, F16, BF16, F8, I64, I32, I16, I8, U8, Bool };
inline constexpr std::size_t kDTypeCount = 11;  // the DType values, 0 to Bool
static_assert(static_cast<std::size_t>(DType::Bool) + 1 == kDTypeCount);

// Bytes per element (bool and f8 take one byte).
[[nodiscard]] std::size_t dtype_size(DType t) noexcept;
// Whether t holds exact whole values (the integer types and bool: ids,
// indices, masks) rather than floating-point numbers: such tensors take no
// gradient and are filled with valid indices, not random reals.
[[nodiscard]] bool is_integer(DType t) noexcept;
// File spelling, e.g. "bf16".
[[nodiscard]] std::string_view dtype_name(DType t) noexcept;
// Inverse of dtype_name; nullopt for unknown spellings.
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view s) noexcept;

using Shape = std::vector<std::int64_t>;

// Number of elements, or nullopt when the product overflows int64 or a dim
// is negative. A rank-0 shape has one element.
[[nodiscard]] std::optional<std::int64_t> checked_num_elements(const Shape& s) noexcept;
// Product of dims as a double (never overflows; used by the cost model).
[[nodiscard]] double num_elements(const Shape& s) noexcept;
// "[32, 784]".
[[nodiscard]] std::string shape_to_string(const Shape& s);

// What a tensor is. Tensors produced by an operator are activations; the
// others are graph inputs (data), parameters (trained weights: they get
// gradients and optimizer state) or constants.
enum class TensorKind : std::uint8_t { Input, Parameter, Constant, Activation };

[[nodiscard]] std::string_view tensor_kind_name(TensorKind k) noexcept;
[[nodiscard]] std::optional<TensorKind> parse_tensor_kind(std::string_view s) noexcept;

struct Tensor {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  TensorKind kind = TensorKind::Input;
  OpId producer = kNone;        // kNone for inputs, parameters, constants
  std::vector<OpId> consumers;  // in increasing operator id, one entry per use

  [[nodiscard]] std::size_t rank() const noexcept { return shape.size(); }
  // Full size in bytes, as a double so that huge tensors never overflow.
  [[nodiscard]] double bytes() const noexcept {
    return num_elements(shape) * static_cast<double>(dtype_size(dtype));
  }
};

}  // namespace recsearch::ir
