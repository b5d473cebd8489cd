// SPDX-License-Identifier: Apache-2.0
// Private helpers shared by the JSON readers and writers of src/io.
//
// Readers never call nlohmann's throwing accessors on data they have not
// type-checked: every access goes through a Reader, which checks the JSON
// type first and otherwise throws recsearch::Error naming the file, the
// RFC 6901 path and the expected type. That is what keeps "no crash on any
// input" true without wrapping every line in try/catch. Big files stream:
// readers get one record at a time (stream_object), writers print one
// record at a time (LayoutWriter), so no reader or writer ever holds a
// whole million-operator document as a DOM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::io::detail {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// read_text_file with `padding` bytes of spare capacity past the text (for
// parsers that read beyond the end), reserved before reading: no copy.
[[nodiscard]] std::string read_text_file_padded(const std::string& path, std::size_t padding);

// A file's text with `padding` readable bytes past its end, mapped from the
// page cache when it is a regular file (no copy of a 200 MB graph into
// fresh, zeroed pages), else read as read_text_file_padded reads it, with
// its errors. The mapping is private and read-only; a file truncated while
// it is mapped would fault, as with any mapped reader.
class PaddedText {
 public:
  PaddedText(const std::string& path, std::size_t padding);
  PaddedText(const PaddedText&) = delete;
  PaddedText& operator=(const PaddedText&) = delete;
  ~PaddedText();
  [[nodiscard]] std::string_view text() const noexcept { return text_; }
  // Readable bytes from text().data(), padding included.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  bool map(const std::string& path, std::size_t padding);

  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  std::string read_;  // when not mapped
  std::string_view text_;
  std::size_t capacity_ = 0;
};

// RFC 6901 child pointers ("~" -> "~0", "/" -> "~1" in keys).
[[nodiscard]] std::string child(const std::string& path, std::string_view key);
[[nodiscard]] std::string child(const std::string& path, std::size_t index);

// Parses text; Error(kParse) with the byte offset on malformed input, and
// on nesting deeper than kMaxDepth (nlohmann recurses when copying or
// comparing values; a hostile file must not exhaust the stack).
inline constexpr int kMaxDepth = 256;
[[nodiscard]] Json parse_json(std::string_view text, const std::string& source);

// Streams a document whose top level is an object, so that huge arrays
// (a graph's tensors and operators, a plan's per-tensor records) never exist
// as one DOM: each element of a streamed array is built, handed over and
// dropped. Memory stays proportional to one record, and freeing a
// multi-gigabyte DOM at the end (a large share of the time) disappears.
class StreamHandler {
 public:
  enum class Mode : std::uint8_t {
    kCollect,  // kept in the head object returned by stream_object
    kStream,   // an array: each element goes to record(); anything else is collected
    kSkip,     // parsed (so it must be valid JSON) and dropped
  };
  virtual ~StreamHandler() = default;
  [[nodiscard]] virtual Mode mode(const std::string& key) = 0;
  // One element of the streamed array under `key`, in file order.
  virtual void record(const std::string& key, std::size_t index, Json&& value) = 0;
  // The value of top-level field `key` is complete (`head` holds the
  // collected fields so far).
  virtual void field_done(const std::string& key, const Json& head) = 0;
  // Whether the handler needs nothing more of the file once `head` holds
  // what it does: stream_object_fast then stops after the current
  // top-level field and leaves the rest of the file unread, and unchecked.
  [[nodiscard]] virtual bool done(const Json& /*head*/) const { return false; }
};

// Parses `text` (kParse errors as parse_json; kSchema at "" when the top
// level is not an object; kDuplicate at "/<key>" when a streamed key occurs
// twice) and returns the collected fields. Records are delivered while
// parsing: an error in the file after them is reported after they were
// handled.
[[nodiscard]] Json stream_object(std::string_view text, const std::string& source,
                                 StreamHandler& handler);

// stream_object read with simdjson (stream_simd.cpp): the same records and
// fields, in the same order, several times faster. Returns false the moment
// the text, up to where it stops (its end, or where the handler is done),
// holds anything it does not read exactly as stream_object does (malformed
// or truncated JSON, an escape in a string or key, a key given
// twice, "-0", a number out of range, deep nesting); the handler has then
// seen part of the file, and the caller reads the text again with
// stream_object and a fresh handler, which reports what is wrong. Errors
// the handler throws pass through. `capacity`: readable bytes from
// text.data(); with less than simdjson's padding past the end, the text is
// copied. `head` receives the collected fields.
[[nodiscard]] bool stream_object_fast(std::string_view text, std::size_t capacity,
                                      StreamHandler& handler, Json& head);

// simdjson's padding: bytes past the text that its parser may read.
[[nodiscard]] std::size_t simd_padding() noexcept;

// Typed access with error reporting against one source file.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  [[noreturn]] void fail(Errc code, std::string detail, const std::string& path) const;
  // Rethrows an error raised by a library call, attributed to this file.
  [[noreturn]] void rethrow(const Error& e, const std::string& path_prefix = {}) const;

  void expect_object(const Json& j, const std::string& path) const;
  // Field of an object (already checked to be one): nullptr when absent.
  [[nodiscard]] const Json* find(const Json& obj, std::string_view key) const;
  // Field that must be present: Error(kSchema) at its would-be path.
  [[nodiscard]] const Json& require(const Json& obj, std::string_view key,
                                    const std::string& path) const;

  const Json& array(const Json& j, const std::string& path) const;
  const Json& object(const Json& j, const std::string& path) const;
  [[nodiscard]] std::string string(const Json& j, const std::string& path) const;
  [[nodiscard]] std::string nonempty_string(const Json& j, const std::string& path) const;
  [[nodiscard]] bool boolean(const Json& j, const std::string& path) const;
  // Any finite number.
  [[nodiscard]] double number(const Json& j, const std::string& path) const;
  // An integer in int64 range; integral floats up to 2^53 are accepted
  // (1e3 is a fine way to write 1000), anything else is kSchema.
  [[nodiscard]] std::int64_t integer(const Json& j, const std::string& path) const;
  [[nodiscard]] std::int64_t positive_integer(const Json& j, const std::string& path) const;
  [[nodiscard]] std::vector<std::int64_t> positive_integers(const Json& j,
                                                            const std::string& path) const;
  [[nodiscard]] std::vector<std::string> strings(const Json& j, const std::string& path) const;

  // "format" must be `format` and "version" one of 1 to `newest` (kSchema
  // otherwise).
  void check_format(const Json& root, std::string_view format, std::int64_t newest = 1) const;

 private:
  std::string source_;
};

// A MindSpore-style strategy: an array of arrays of positive integers.
[[nodiscard]] ir::Strategy read_strategy(const Reader& r, const Json& j, const std::string& path);

// A recomputation name: "none", "selective" or "full" (kSchema otherwise).
[[nodiscard]] ir::Recompute read_recompute(const Reader& r, const Json& j, const std::string& path);

// A ZeRO stage, 0 to 3 (kSchema otherwise).
[[nodiscard]] int read_zero_stage(const Reader& r, const Json& j, const std::string& path);

// A graph's "training" object: recompute, zero_stage and microbatches, each
// optional; unknown keys are errors (they would silently pin nothing).
[[nodiscard]] ir::TrainingPins read_training_pins(const Reader& r, const Json& j,
                                                  const std::string& path);

// Whether j holds an integer that integer() would accept, and its value.
[[nodiscard]] bool as_int64(const Json& j, std::int64_t& out) noexcept;

// Reads a CostParams object (fields optional; unknown keys are errors).
// `out` is only modified when the whole object is valid.
void read_cost_params(const Reader& r, const Json& j, const std::string& path, CostParams& out);

// A double as JSON: integral values that a double holds exactly are written
// as integers (65536, not 65536.0), so byte counts read naturally.
[[nodiscard]] OrderedJson number_json(double v);

// Where a writer's text goes: a string handed back at the end, or a file
// (stdout for "-") filled in blocks of kBlock bytes, so that a writer never
// holds a whole document. Errors are Error(kIo) naming the file and the OS
// reason, as write_text_file's.
class TextSink {
 public:
  static constexpr std::size_t kBlock = std::size_t{1} << 20;
  TextSink() = default;  // into a string
  // Opens `path` for writing ("-": standard output).
  explicit TextSink(const std::string& path);
  TextSink(const TextSink&) = delete;
  TextSink& operator=(const TextSink&) = delete;
  ~TextSink();

  // The pending text; writers append here and call maybe_flush() between records.
  [[nodiscard]] std::string& buffer() noexcept { return buf_; }
  void maybe_flush() {
    if (file_ != nullptr && buf_.size() >= kBlock) flush();
  }
  // Writes out what is pending and closes the file (a no-op for strings).
  void close();
  // The whole text of a string sink.
  [[nodiscard]] std::string take() { return std::move(buf_); }

 private:
  void flush();

  std::string buf_;
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Appenders for writers that print records without building them as
// nlohmann values (the big arrays of a plan): the same bytes nlohmann's
// dump() gives. `spaced` is the indented layout's ", " and ": " (else "," and ":").
void append_string(std::string& out, std::string_view s);
void append_int(std::string& out, std::int64_t v);
// number_json(v), printed.
void append_number(std::string& out, double v);
void append_int_array(std::string& out, const std::vector<std::int64_t>& v, bool spaced);
// A value on one line: spaced as the indented layout's records ({"a": [1, 2]}),
// else as dump(-1) ({"a":[1,2]}).
void append_json(std::string& out, const OrderedJson& value, bool spaced);
inline std::string_view comma(bool spaced) noexcept { return spaced ? ", " : ","; }
inline std::string_view colon(bool spaced) noexcept { return spaced ? ": " : ":"; }
// '"key": ' (spaced) or '"key":'; keys are plain ASCII.
inline void append_key(std::string& out, std::string_view key, bool spaced) {
  out += '"';
  out += key;
  out += spaced ? "\": " : "\":";
}

// Writes a top-level object field by field, so that a writer never holds
// the whole document as a DOM: the records of big arrays are built, printed
// and dropped one at a time. Layout (indent >= 0): one field per line, the
// containers of a field spread one level deep, each record on one line
// ({"name": "x", "shape": [4, 8]}), which keeps files diffable and
// greppable. indent < 0: everything on one line, no spaces. Invalid UTF-8
// (possible in names built through the C++ API) is replaced, never thrown.
class LayoutWriter {
 public:
  // Into a string (finish() returns it) or into `sink` (finish() closes it
  // and returns an empty string).
  explicit LayoutWriter(int indent);
  LayoutWriter(int indent, TextSink& sink);
  LayoutWriter(const LayoutWriter&) = delete;
  LayoutWriter& operator=(const LayoutWriter&) = delete;
  // A whole field (its containers spread over lines one level deep).
  void field(std::string_view key, const OrderedJson& value);
  // An object field: the members of `head` (an object), then, when `tail`
  // is given, one more member `tail_key` whose value `tail(out, spaced)`
  // prints: for a member too big to build as values. The same bytes as
  // field() of the whole object.
  void object_field(std::string_view key, const OrderedJson& head, std::string_view tail_key,
                    const std::function<void(std::string&, bool)>* tail);
  // An array field written record by record, one record per line.
  void begin_array(std::string_view key);
  void element(const OrderedJson& value);
  // A record printed by `print(out, spaced)` straight into the output:
  // for the big arrays, whose records are not worth building as values.
  template <class Print>
  void element_with(Print&& print) {
    start_element();
    print(sink_.buffer(), indent_ >= 0);
    sink_.maybe_flush();
  }
  void end_array();
  // Writes out what is pending once a block has gathered (file sinks): for
  // object_field's tail, between the members it prints.
  void maybe_flush() { sink_.maybe_flush(); }
  // The document, with a final newline when indented.
  [[nodiscard]] std::string finish();

 private:
  void key(std::string_view k);
  void start_element();

  int indent_;
  TextSink own_;
  TextSink& sink_;
  bool first_field_ = true;
  bool first_element_ = true;
};

}  // namespace recsearch::io::detail
