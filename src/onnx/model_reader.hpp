// SPDX-License-Identifier: Apache-2.0
// Private to the onnx module: reads an ONNX ModelProto without its weights.
//
// A model file is mostly initializer payloads. Parsing it with
// ModelProto::ParseFromString would hold all of them in memory, so the
// reader walks the protobuf wire format itself at the two levels that hold
// weights (ModelProto.graph and GraphProto.initializer) and hands every
// other field to the generated parser. Initializer payloads larger than
// kKeptPayloadBytes are skipped; smaller ones (shape vectors, axes, scalars)
// are kept, because shape inference needs their values.
#pragma once

#include <cstddef>
#include <string>

#include <google/protobuf/io/zero_copy_stream.h>  // the stream the reader walks
#include <onnx/onnx_pb.h>                         // ModelProto (Debian libonnx-dev)

namespace recsearch::onnx_import {

// Initializer payloads up to this size are kept (values of shape tensors).
inline constexpr std::size_t kKeptPayloadBytes = 4096;

struct ModelSkeleton {
  onnx::ModelProto model;         // graph.initializer entries carry dims and type only
  std::size_t skipped_bytes = 0;  // weight payload bytes never loaded
};

// Reads a ModelProto from `in`. Throws recsearch::Error(kParse) naming
// `source` and the field at which the bytes stopped making sense.
[[nodiscard]] ModelSkeleton read_model_skeleton(google::protobuf::io::ZeroCopyInputStream& in,
                                                const std::string& source);

}  // namespace recsearch::onnx_import
