// SPDX-License-Identifier: Apache-2.0
// Reads an ONNX model's structure while skipping its weights (see
// model_reader.hpp). Fields are walked with protobuf's own wire-format
// routines; every field the reader does not need to look into is copied
// verbatim and parsed by the generated ModelProto/GraphProto code, so that
// the result is exactly what ParseFromString would give minus the payloads.
#include "onnx/model_reader.hpp"

#include <cstdint>

#include <google/protobuf/io/coded_stream.h>                // CodedInput/OutputStream
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>  // StringOutputStream
#include <google/protobuf/wire_format_lite.h>               // tag helpers, SkipField

#include "recsearch/error.hpp"

namespace recsearch::onnx_import {
namespace {

namespace pb = google::protobuf;
using WFL = pb::internal::WireFormatLite;

// Field numbers of onnx.proto that the reader treats specially.
constexpr int kModelGraph = 7;
constexpr int kGraphInitializer = 5;
// TensorProto fields that hold values: segment excluded (metadata).
constexpr int kTensorDataFields[] = {4, 5, 6, 7, 9, 10, 11};

bool is_tensor_data_field(int f) {
  for (const int d : kTensorDataFields) {
    if (d == f) return true;
  }
  return false;
}

[[noreturn]] void corrupt(const std::string& source, const std::string& where) {
  throw Error(Errc::kParse,
              "not a valid ONNX model: the protobuf encoding breaks off in " + where +
                  " (truncated or corrupt file?)",
              {}, source);
}

// Copies one length-delimited field's payload into a string, or skips it.
bool read_length(pb::io::CodedInputStream& in, std::uint32_t* len) { return in.ReadVarint32(len); }

// A TensorProto whose large payloads are skipped.
onnx::TensorProto read_initializer(pb::io::CodedInputStream& in, const std::string& source,
                                   std::size_t index, std::size_t& skipped) {
  const std::string where = "graph.initializer[" + std::to_string(index) + "]";
  std::string kept;
  bool dropped = false;
  std::size_t data_bytes = 0;
  {
    pb::io::StringOutputStream sink(&kept);
    pb::io::CodedOutputStream out(&sink);
    while (true) {
      const std::uint32_t tag = in.ReadTag();
      if (tag == 0) break;
      const int field = WFL::GetTagFieldNumber(tag);
      if (is_tensor_data_field(field)) {
        std::size_t size = 0;
        switch (WFL::GetTagWireType(tag)) {
          case WFL::WIRETYPE_LENGTH_DELIMITED: {
            std::uint32_t len = 0;
            if (!read_length(in, &len)) corrupt(source, where);
            if (dropped || data_bytes + len > kKeptPayloadBytes) {
              dropped = true;
              if (!in.Skip(static_cast<int>(len))) corrupt(source, where);
              skipped += len;
              continue;
            }
            std::string payload;
            if (!in.ReadString(&payload, static_cast<int>(len))) corrupt(source, where);
            data_bytes += len;
            out.WriteTag(tag);
            out.WriteVarint32(len);
            out.WriteString(payload);
            continue;
          }
          case WFL::WIRETYPE_FIXED32: size = 4; break;
          case WFL::WIRETYPE_FIXED64: size = 8; break;
          default: size = 10; break;
        }
        if (dropped || data_bytes + size > kKeptPayloadBytes) {
          dropped = true;
          if (!WFL::SkipField(&in, tag)) corrupt(source, where);
          skipped += size;
          continue;
        }
        data_bytes += size;
      }
      if (!WFL::SkipField(&in, tag, &out)) corrupt(source, where);
    }
  }
  onnx::TensorProto t;
  if (!t.ParseFromString(kept)) corrupt(source, where);
  if (dropped) {
    // Never a partial payload: either all values or none.
    t.clear_float_data();
    t.clear_int32_data();
    t.clear_string_data();
    t.clear_int64_data();
    t.clear_raw_data();
    t.clear_double_data();
    t.clear_uint64_data();
  }
  return t;
}

onnx::GraphProto read_graph(pb::io::CodedInputStream& in, const std::string& source,
                            std::size_t& skipped) {
  std::string rest;
  std::vector<onnx::TensorProto> initializers;
  {
    pb::io::StringOutputStream sink(&rest);
    pb::io::CodedOutputStream out(&sink);
    while (true) {
      const std::uint32_t tag = in.ReadTag();
      if (tag == 0) break;
      if (WFL::GetTagFieldNumber(tag) == kGraphInitializer &&
          WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED) {
        std::uint32_t len = 0;
        if (!read_length(in, &len)) corrupt(source, "graph.initializer");
        const auto limit = in.PushLimit(static_cast<int>(len));
        initializers.push_back(read_initializer(in, source, initializers.size(), skipped));
        if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0)
          corrupt(source, "graph.initializer[" + std::to_string(initializers.size() - 1) + "]");
        in.PopLimit(limit);
        continue;
      }
      if (!WFL::SkipField(&in, tag, &out)) corrupt(source, "graph");
    }
  }
  onnx::GraphProto g;
  if (!g.ParseFromString(rest)) corrupt(source, "graph (nodes, inputs, outputs or value_info)");
  for (auto& t : initializers) *g.add_initializer() = std::move(t);
  return g;
}

}  // namespace

ModelSkeleton read_model_skeleton(pb::io::ZeroCopyInputStream& stream, const std::string& source) {
  ModelSkeleton s;
  pb::io::CodedInputStream in(&stream);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  std::string rest;
  onnx::GraphProto graph;
  bool has_graph = false;
  {
    pb::io::StringOutputStream sink(&rest);
    pb::io::CodedOutputStream out(&sink);
    while (true) {
      const std::uint32_t tag = in.ReadTag();
      if (tag == 0) break;
      if (WFL::GetTagFieldNumber(tag) == kModelGraph &&
          WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED) {
        std::uint32_t len = 0;
        if (!read_length(in, &len)) corrupt(source, "graph");
        const auto limit = in.PushLimit(static_cast<int>(len));
        graph.MergeFrom(read_graph(in, source, s.skipped_bytes));
        if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) corrupt(source, "graph");
        in.PopLimit(limit);
        has_graph = true;
        continue;
      }
      if (!WFL::SkipField(&in, tag, &out)) corrupt(source, "the model header");
    }
  }
  // ReadTag() returns 0 both at the end and on a malformed tag.
  if (!in.ConsumedEntireMessage()) corrupt(source, "the model header");
  if (!s.model.ParseFromString(rest)) corrupt(source, "the model header");
  if (!has_graph) throw Error(Errc::kParse, "not an ONNX model: it has no graph", "/graph", source);
  *s.model.mutable_graph() = std::move(graph);
  return s;
}

}  // namespace recsearch::onnx_import
