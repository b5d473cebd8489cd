// SPDX-License-Identifier: Apache-2.0
// Generator specs shared by the tests: a small GPT whose blocks repeat, cheap
// enough to search and evaluate many times.
#pragma once

#include <cstdint>

#include "recsearch/gen/generate.hpp"

namespace recsearch::testing {

// A GPT of `layers` blocks: hidden 256, 8 heads, sequence 128, vocabulary
// 1000, batch 16.
inline gen::ModelSpec small_gpt(std::int64_t layers) {
  gen::ModelSpec s;
  s.family = gen::Family::Gpt;
  s.layers = layers;
  s.hidden = 256;
  s.heads = 8;
  s.seq = 128;
  s.vocab = 1000;
  s.batch = 16;
  return s;
}

}  // namespace recsearch::testing
