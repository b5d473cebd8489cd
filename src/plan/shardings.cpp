// SPDX-License-Identifier: Apache-2.0
// The shardings of an evaluation (plan::TensorShardings): one byte per
// tensor and mesh axis, turned into lists of axes when a tensor is read.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "recsearch/plan/evaluator.hpp"

namespace recsearch::plan {

TensorShardings::TensorShardings(std::vector<std::uint32_t> ranks, std::size_t axes)
    : ranks_(std::move(ranks)), axes_(axes) {
  const bool coded =
      std::all_of(ranks_.begin(), ranks_.end(), [](std::uint32_t r) { return r <= kMaxCodedRank; });
  if (coded) {
    codes_.assign(ranks_.size() * axes_, kNone);
    return;
  }
  lists_.resize(ranks_.size());
  for (std::size_t t = 0; t < ranks_.size(); ++t) lists_[t].dims.resize(ranks_[t]);
}

void TensorShardings::insert_axis(std::vector<std::uint32_t>& list, std::size_t axis) {
  const auto a = static_cast<std::uint32_t>(axis);
  const auto it = std::lower_bound(list.begin(), list.end(), a);
  if (it == list.end() || *it != a) list.insert(it, a);
}

void TensorShardings::read(std::size_t t, TensorSharding& out) const {
  if (!lists_.empty()) {
    out = lists_[t];
    return;
  }
  out.dims.resize(ranks_[t]);
  for (auto& d : out.dims) d.clear();
  out.partial.clear();
  for (std::size_t a = 0; a < axes_; ++a) {
    const std::uint8_t c = codes_[a * size() + t];
    const auto axis = static_cast<std::uint32_t>(a);
    if (c == kPartial) out.partial.push_back(axis);
    if (c >= kSplit) out.dims[c - kSplit].push_back(axis);
  }
}

TensorSharding TensorShardings::operator[](std::size_t t) const {
  TensorSharding s;
  read(t, s);
  return s;
}

TensorSharding TensorShardings::at(std::size_t t) const {
  if (t >= size())
    throw std::out_of_range("TensorShardings::at: tensor " + std::to_string(t) + " of " +
                            std::to_string(size()));
  return (*this)[t];
}

}  // namespace recsearch::plan
