// SPDX-License-Identifier: Apache-2.0
// Parts of the ONNX interface that need no ONNX library.
#include <cctype>

#include "recsearch/io/onnx.hpp"

namespace recsearch::io {

bool is_onnx_path(std::string_view path) noexcept {
  constexpr std::string_view kExt = ".onnx";
  if (path.size() < kExt.size()) return false;
  const std::string_view tail = path.substr(path.size() - kExt.size());
  for (std::size_t i = 0; i < kExt.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(tail[i])) != kExt[i]) return false;
  }
  return true;
}

}  // namespace recsearch::io
