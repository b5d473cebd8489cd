// SPDX-License-Identifier: Apache-2.0
// Forward declarations of the public types, for headers that only pass them
// by reference (as nlohmann/json's json_fwd.hpp does for its users).
#pragma once

#include <cstdint>

namespace recsearch {

class Cluster;
class Error;
struct CostParams;
struct Cut;
struct DeviceSpec;
struct Level;
enum class Errc : int;
enum class Mode;

namespace ir {
class Attrs;
class Graph;
struct Operator;
struct Tensor;
enum class DType : std::uint8_t;
enum class OpKind : std::uint8_t;
enum class TensorKind : std::uint8_t;
}  // namespace ir

namespace algebra {
struct LoopDim;
struct OpSpace;
}  // namespace algebra

namespace plan {
struct CommEvent;
struct Evaluation;
struct Plan;
struct Summary;
struct TensorSharding;
}  // namespace plan

namespace search {
struct SearchOptions;
struct SearchResult;
enum class Algorithm;
}  // namespace search

}  // namespace recsearch
