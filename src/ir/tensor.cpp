// SPDX-License-Identifier: Apache-2.0
// Element types, shape arithmetic and tensor-kind spellings of the IR.
#include "recsearch/ir/tensor.hpp"

#include <array>
#include <limits>

namespace recsearch::ir {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {"f64", 8},
    {"f32", 4},
    {"f16", 2},
    {"bf16", 2},
    {"f8", 1},
    {"i64", 8},
    {"i32", 4},
    {"i16", 2},
    {"i8", 1},
    {"u8", 1},
    {"bool", 1},
}};

constexpr std::array<std::string_view, 4> kTensorKinds = {"input", "parameter", "constant",
                                                          "activation"};

}  // namespace

std::size_t dtype_size(DType t) noexcept { return kDTypes[static_cast<std::size_t>(t)].size; }

bool is_integer(DType t) noexcept {
  switch (t) {
    case DType::I64:
    case DType::I32:
    case DType::I16:
    case DType::I8:
    case DType::U8:
    case DType::Bool: return true;
    case DType::F64:
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F8: return false;
  }
  return false;
}

std::string_view dtype_name(DType t) noexcept { return kDTypes[static_cast<std::size_t>(t)].name; }

std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (std::size_t i = 0; i < kDTypes.size(); ++i)
    if (kDTypes[i].name == s) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<std::int64_t> checked_num_elements(const Shape& s) noexcept {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

double num_elements(const Shape& s) noexcept {
  double n = 1.0;
  for (std::int64_t d : s) n *= static_cast<double>(d);
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string_view tensor_kind_name(TensorKind k) noexcept {
  return kTensorKinds[static_cast<std::size_t>(k)];
}

std::optional<TensorKind> parse_tensor_kind(std::string_view s) noexcept {
  for (std::size_t i = 0; i < kTensorKinds.size(); ++i)
    if (kTensorKinds[i] == s) return static_cast<TensorKind>(i);
  return std::nullopt;
}

}  // namespace recsearch::ir
