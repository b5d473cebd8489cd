// SPDX-License-Identifier: Apache-2.0
// The ONNX readers of a build without the `onnx` feature: they say so.
#include "recsearch/error.hpp"
#include "recsearch/io/onnx.hpp"

namespace recsearch::io {
namespace {

[[noreturn]] void unavailable(const std::string& source) {
  throw Error(Errc::kUsage,
              "this recsearch was built without ONNX support (install libonnx-dev and "
              "libprotobuf-dev, then reconfigure with -Donnx=enabled)",
              {}, source);
}

}  // namespace

bool onnx_import_available() noexcept { return false; }

OnnxImport parse_onnx(std::string_view, const std::string& source, const OnnxImportOptions&) {
  unavailable(source);
}

OnnxImport read_onnx_file(const std::string& path, const OnnxImportOptions&) { unavailable(path); }

}  // namespace recsearch::io
