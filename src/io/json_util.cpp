// SPDX-License-Identifier: Apache-2.0
// Shared JSON plumbing of src/io: reading files, parsing with byte-accurate
// errors, typed access that reports paths, the CostParams object, and a
// line-per-record printer for the writers.
#include "io/json_util.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <utility>

#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::io {

std::string read_text_file(const std::string& path) {
  if (path == "-") {
    std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (std::cin.bad()) throw Error(Errc::kIo, "cannot read standard input", {}, path);
    return text;
  }
  return detail::read_text_file_padded(path, detail::simd_padding());  // one file reader
}

namespace detail {

std::string read_text_file_padded(const std::string& path, std::size_t padding) {
  if (path == "-") {
    std::string text = read_text_file(path);
    text.reserve(text.size() + padding);
    return text;
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw Error(Errc::kIo, std::string("cannot open: ") + std::strerror(errno), {}, path);
  }
  std::string text;
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
    text.reserve(static_cast<std::size_t>(st.st_size) + padding);
  }
  char buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    text.append(buf, n);
    if (n < sizeof buf) break;
  }
  // A directory opens fine on Linux and only fails here (EISDIR).
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) throw Error(Errc::kIo, std::string("cannot read: ") + std::strerror(err), {}, path);
  // A file that grew while it was read.
  if (text.capacity() < text.size() + padding) text.reserve(text.size() + padding);
  return text;
}

PaddedText::PaddedText(const std::string& path, std::size_t padding) {
  if (path != "-" && map(path, padding)) return;
  read_ = read_text_file_padded(path, padding);
  text_ = read_;
  capacity_ = read_.capacity();
}

PaddedText::~PaddedText() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

// Zeroed anonymous pages for the text and its padding, then the file mapped
// over their start: the bytes past the end of the file read as zeros, on
// the file's last page and on the pages after it. false (nothing mapped)
// for anything but a non-empty regular file, or when a call fails: the
// caller then reads the file, and reports its errors.
bool PaddedText::map(const std::string& path, std::size_t padding) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return false;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t bytes = (size + padding + page - 1) / page * page;
  void* area = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  // MAP_POPULATE: the file's pages are entered at once, not fault by fault.
  void* file = ::mmap(area, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (file == MAP_FAILED) {
    ::munmap(area, bytes);
    return false;
  }
  map_ = area;
  map_bytes_ = bytes;
  text_ = std::string_view(static_cast<const char*>(area), size);
  capacity_ = bytes;
  return true;
}

}  // namespace detail

void write_text_file(const std::string& path, std::string text) {
  if (text.empty() || text.back() != '\n') text.push_back('\n');
  if (path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    throw Error(Errc::kIo, std::string("cannot open for writing: ") + std::strerror(errno), {},
                path);
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !written) {
    throw Error(Errc::kIo, std::string("cannot write: ") + std::strerror(written ? errno : err), {},
                path);
  }
}

void parse_cost_params(std::string_view text, const std::string& source, CostParams& out) {
  const detail::Json j = detail::parse_json(text, source);
  detail::read_cost_params(detail::Reader(source), j, "", out);
}

}  // namespace recsearch::io

namespace recsearch::io::detail {

namespace {

// 2^53: the largest magnitude up to which every integer is a double.
constexpr double kExactIntLimit = 9007199254740992.0;

std::string escape_token(std::string_view key) {
  std::string s;
  s.reserve(key.size());
  for (char c : key) {
    if (c == '~') {
      s += "~0";
    } else if (c == '/') {
      s += "~1";
    } else {
      s += c;
    }
  }
  return s;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the
// id means nothing to a user.
std::string strip_exception_id(const char* what) {
  std::string s(what);
  if (!s.empty() && s.front() == '[') {
    const auto end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

// nlohmann reports the number of bytes read (the 1-based position of the
// last one); messages give 0-based offsets, as too_deep_at does, so that a
// file cut off after N bytes fails "at byte N", not past its end.
std::size_t offset_of(std::size_t bytes_read) { return bytes_read > 0 ? bytes_read - 1 : 0; }

// Byte offset of the first container opened more than kMaxDepth deep, or
// npos. Strings are skipped so that brackets inside names do not count.
std::size_t too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string json_quote(std::string_view s) {
  return OrderedJson(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

void dump_compact(const OrderedJson& j, std::string& out) {
  if (j.is_object() && !j.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += json_quote(k);
      out += ": ";
      dump_compact(v, out);
    }
    out += '}';
  } else if (j.is_array() && !j.empty()) {
    out += '[';
    bool first = true;
    for (const auto& v : j) {
      if (!first) out += ", ";
      first = false;
      dump_compact(v, out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

void dump_expanded(const OrderedJson& j, int indent, int depth, int expand_depth,
                   std::string& out) {
  const bool container = (j.is_object() || j.is_array()) && !j.empty();
  if (!container || depth >= expand_depth) {
    dump_compact(j, out);
    return;
  }
  const std::string pad(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth + 1),
                        ' ');
  out += j.is_object() ? "{\n" : "[\n";
  bool first = true;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ",\n";
      first = false;
      out += pad;
      out += json_quote(k);
      out += ": ";
      dump_expanded(v, indent, depth + 1, expand_depth, out);
    }
  } else {
    for (const auto& v : j) {
      if (!first) out += ",\n";
      first = false;
      out += pad;
      dump_expanded(v, indent, depth + 1, expand_depth, out);
    }
  }
  out += '\n';
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
  out += j.is_object() ? '}' : ']';
}

}  // namespace

std::string child(const std::string& path, std::string_view key) {
  return path + "/" + escape_token(key);
}

std::string child(const std::string& path, std::size_t index) {
  return path + "/" + std::to_string(index);
}

Json parse_json(std::string_view text, const std::string& source) {
  if (const auto at = too_deep_at(text); at != std::string_view::npos) {
    throw Error(Errc::kParse,
                "not valid JSON at byte " + std::to_string(at) + ": nesting deeper than " +
                    std::to_string(kMaxDepth) + " levels",
                {}, source);
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    throw Error(Errc::kParse,
                "not valid JSON at byte " + std::to_string(offset_of(e.byte)) + ": " +
                    strip_exception_id(e.what()),
                {}, source);
  } catch (const Json::exception& e) {
    // e.g. out_of_range 406 "number overflow parsing '1e999'".
    throw Error(Errc::kParse, "not valid JSON: " + strip_exception_id(e.what()), {}, source);
  }
}

namespace {

// SAX consumer behind stream_object. Values are built the way nlohmann's
// own DOM parser builds them (a stack of open containers, the slot of the
// pending object key), but rooted per top-level field or per record.
class StreamSax final : public nlohmann::json_sax<Json> {
 public:
  StreamSax(const std::string& source, StreamHandler& handler)
      : source_(source), handler_(handler) {}

  Json take_head() { return std::move(head_); }
  [[nodiscard]] bool root_closed() const noexcept { return state_ == State::kDone; }

  bool null() override { return value(Json(nullptr), false); }
  bool boolean(bool v) override { return value(Json(v), false); }
  bool number_integer(number_integer_t v) override { return value(Json(v), false); }
  bool number_unsigned(number_unsigned_t v) override { return value(Json(v), false); }
  bool number_float(number_float_t v, const string_t&) override { return value(Json(v), false); }
  bool string(string_t& v) override { return value(Json(std::move(v)), false); }
  bool binary(binary_t&) override { return true; }  // not produced by the JSON lexer
  bool start_object(std::size_t) override { return value(Json(Json::value_t::object), true); }
  bool start_array(std::size_t) override { return value(Json(Json::value_t::array), true); }
  bool end_object() override { return end_container(); }
  bool end_array() override { return end_container(); }

  bool key(string_t& k) override {
    if (!open_.empty()) {
      // nlohmann's own parser keeps the last of two equal keys; here the
      // second is an error, or {"c0": "i", "c0": "j"} would lose a cut.
      auto& object = open_.back()->get_ref<Json::object_t&>();
      const auto [it, added] = object.emplace(k, nullptr);
      if (!added) {
        throw Error(Errc::kDuplicate, "key '" + k + "' is given twice in one object",
                    in_stream_ ? child(child("", key_), index_) : child("", key_), source_);
      }
      slot_ = &it->second;
    } else if (skip_depth_ == 0 && !in_stream_) {
      key_ = std::move(k);
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    throw Error(Errc::kParse,
                "not valid JSON at byte " + std::to_string(offset_of(position)) + ": " +
                    strip_exception_id(ex.what()),
                {}, source_);
  }

 private:
  enum class State : std::uint8_t { kBefore, kRoot, kDone };

  // A value starts (scalar) or a container opens.
  bool value(Json&& v, bool container) {
    if (!open_.empty()) {
      Json* top = open_.back();
      Json* placed = nullptr;
      if (top->is_array()) {
        top->push_back(std::move(v));
        placed = &top->back();
      } else {
        *slot_ = std::move(v);
        placed = slot_;
      }
      if (container) open_.push_back(placed);
      return true;
    }
    if (state_ == State::kBefore) {
      if (!v.is_object()) {
        throw Error(Errc::kSchema,
                    std::string("expected a JSON object at the top level, got ") + v.type_name(),
                    {}, source_);
      }
      state_ = State::kRoot;
      return true;
    }
    if (skip_depth_ > 0) {
      if (container) ++skip_depth_;
      return true;
    }
    if (in_stream_) {
      current_ = std::move(v);
      if (container) {
        open_.push_back(&current_);
      } else {
        deliver();
      }
      return true;
    }
    // The value of top-level field key_.
    const StreamHandler::Mode mode = handler_.mode(key_);
    if (mode == StreamHandler::Mode::kStream && v.is_array()) {
      for (const auto& k : streamed_) {
        if (k == key_) {
          throw Error(Errc::kDuplicate, "field '" + key_ + "' is given twice", child("", key_),
                      source_);
        }
      }
      streamed_.push_back(key_);
      in_stream_ = true;
      index_ = 0;
      return true;
    }
    if (mode == StreamHandler::Mode::kSkip) {
      if (container) {
        skip_depth_ = 1;
      } else {
        handler_.field_done(key_, head_);
      }
      return true;
    }
    Json& slot = head_[key_];
    slot = std::move(v);
    if (container) {
      open_.push_back(&slot);
    } else {
      handler_.field_done(key_, head_);
    }
    return true;
  }

  bool end_container() {
    if (!open_.empty()) {
      open_.pop_back();
      if (open_.empty()) {
        if (in_stream_) {
          deliver();
        } else {
          handler_.field_done(key_, head_);
        }
      }
      return true;
    }
    if (skip_depth_ > 0) {
      if (--skip_depth_ == 0) handler_.field_done(key_, head_);
      return true;
    }
    if (in_stream_) {
      in_stream_ = false;
      handler_.field_done(key_, head_);
      return true;
    }
    state_ = State::kDone;
    return true;
  }

  void deliver() {
    Json record = std::move(current_);
    current_ = Json();
    handler_.record(key_, index_++, std::move(record));
  }

  const std::string& source_;
  StreamHandler& handler_;
  State state_ = State::kBefore;
  Json head_ = Json::object();
  std::string key_;                    // current top-level key
  std::vector<std::string> streamed_;  // streamed keys seen so far
  std::vector<Json*> open_;            // open containers of the value being built
  Json* slot_ = nullptr;               // where the next value of the innermost object goes
  Json current_;                       // the record being built
  bool in_stream_ = false;
  std::size_t index_ = 0;
  int skip_depth_ = 0;
};

}  // namespace

Json stream_object(std::string_view text, const std::string& source, StreamHandler& handler) {
  // A truncated file (an interrupted copy or download) is caught here at
  // once, instead of after parsing and building everything before the cut.
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{' &&
      (last == first || text[last] != '}')) {
    throw Error(Errc::kParse,
                "not valid JSON at byte " + std::to_string(text.size()) +
                    ": the document does not end with its closing '}' (truncated file?)",
                {}, source);
  }
  if (const auto at = too_deep_at(text); at != std::string_view::npos) {
    throw Error(Errc::kParse,
                "not valid JSON at byte " + std::to_string(at) + ": nesting deeper than " +
                    std::to_string(kMaxDepth) + " levels",
                {}, source);
  }
  StreamSax sax(source, handler);
  try {
    (void)Json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const Json::exception& e) {
    // parse_error() turns the parser's own errors into recsearch::Error;
    // this only guards against anything else nlohmann might raise.
    throw Error(Errc::kParse, "not valid JSON: " + strip_exception_id(e.what()), {}, source);
  }
  if (!sax.root_closed()) {
    // sax_parse reports every malformed input through parse_error(), which
    // throws; reaching here without a closed root would be a parser bug.
    throw Error(Errc::kParse, "not valid JSON: the document ended early", {}, source);
  }
  return sax.take_head();
}

void Reader::fail(Errc code, std::string detail, const std::string& path) const {
  throw Error(code, std::move(detail), path, source_);
}

void Reader::rethrow(const Error& e, const std::string& path_prefix) const {
  throw e.in_file(source_, path_prefix);
}

void Reader::expect_object(const Json& j, const std::string& path) const {
  if (!j.is_object()) {
    fail(Errc::kSchema, std::string("expected an object, got ") + j.type_name(), path);
  }
}

const Json* Reader::find(const Json& obj, std::string_view key) const {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json& Reader::require(const Json& obj, std::string_view key, const std::string& path) const {
  const Json* v = find(obj, key);
  if (v == nullptr) {
    fail(Errc::kSchema, "missing required field '" + std::string(key) + "'", child(path, key));
  }
  return *v;
}

const Json& Reader::array(const Json& j, const std::string& path) const {
  if (!j.is_array())
    fail(Errc::kSchema, std::string("expected an array, got ") + j.type_name(), path);
  return j;
}

const Json& Reader::object(const Json& j, const std::string& path) const {
  expect_object(j, path);
  return j;
}

std::string Reader::string(const Json& j, const std::string& path) const {
  if (!j.is_string())
    fail(Errc::kSchema, std::string("expected a string, got ") + j.type_name(), path);
  return j.get_ref<const std::string&>();
}

std::string Reader::nonempty_string(const Json& j, const std::string& path) const {
  std::string s = string(j, path);
  if (s.empty()) fail(Errc::kSchema, "expected a non-empty string", path);
  return s;
}

bool Reader::boolean(const Json& j, const std::string& path) const {
  if (!j.is_boolean())
    fail(Errc::kSchema, std::string("expected a boolean, got ") + j.type_name(), path);
  return j.get<bool>();
}

double Reader::number(const Json& j, const std::string& path) const {
  if (!j.is_number())
    fail(Errc::kSchema, std::string("expected a number, got ") + j.type_name(), path);
  const double v = j.get<double>();
  // The parser rejects overflowing literals; this guards values built in code.
  if (!std::isfinite(v)) fail(Errc::kSchema, "expected a finite number", path);
  return v;
}

bool as_int64(const Json& j, std::int64_t& out) noexcept {
  // get_ptr, unlike get, throws nothing: a pointer to the value where it
  // has that type, else null.
  if (const auto* u = j.get_ptr<const Json::number_unsigned_t*>()) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(*u);
    return true;
  }
  if (const auto* i = j.get_ptr<const Json::number_integer_t*>()) {
    out = *i;
    return true;
  }
  if (const auto* f = j.get_ptr<const Json::number_float_t*>()) {
    const double d = *f;
    if (!std::isfinite(d) || std::trunc(d) != d || std::fabs(d) > kExactIntLimit) return false;
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

std::int64_t Reader::integer(const Json& j, const std::string& path) const {
  std::int64_t v = 0;
  if (as_int64(j, v)) return v;
  if (!j.is_number())
    fail(Errc::kSchema, std::string("expected an integer, got ") + j.type_name(), path);
  if (j.is_number_float() && std::trunc(j.get<double>()) != j.get<double>()) {
    fail(Errc::kSchema, "expected an integer, got " + j.dump(), path);
  }
  fail(Errc::kSchema,
       "integer out of range (int64; integers written with a fraction or exponent: up to 2^53)",
       path);
}

std::int64_t Reader::positive_integer(const Json& j, const std::string& path) const {
  const std::int64_t v = integer(j, path);
  if (v <= 0) fail(Errc::kSchema, "expected a positive integer, got " + std::to_string(v), path);
  return v;
}

std::vector<std::int64_t> Reader::positive_integers(const Json& j, const std::string& path) const {
  if (!j.is_array()) {
    fail(Errc::kSchema, std::string("expected an array of integers, got ") + j.type_name(), path);
  }
  std::vector<std::int64_t> v;
  v.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) v.push_back(positive_integer(j[i], child(path, i)));
  return v;
}

std::vector<std::string> Reader::strings(const Json& j, const std::string& path) const {
  if (!j.is_array()) {
    fail(Errc::kSchema, std::string("expected an array of strings, got ") + j.type_name(), path);
  }
  std::vector<std::string> v;
  v.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) v.push_back(string(j[i], child(path, i)));
  return v;
}

void Reader::check_format(const Json& root, std::string_view format, std::int64_t newest) const {
  if (!root.is_object()) {
    fail(Errc::kSchema,
         std::string("expected a JSON object at the top level, got ") + root.type_name(), "");
  }
  const Json* f = find(root, "format");
  if (f == nullptr)
    fail(Errc::kSchema, "missing field 'format' (\"" + std::string(format) + "\")", "/format");
  if (!f->is_string() || f->get_ref<const std::string&>() != format) {
    fail(Errc::kSchema,
         "expected format \"" + std::string(format) + "\", got " +
             f->dump(-1, ' ', false, Json::error_handler_t::replace),
         "/format");
  }
  const Json* v = find(root, "version");
  const std::string known =
      newest == 1 ? std::string("version 1") : "versions 1 to " + std::to_string(newest);
  if (v == nullptr) fail(Errc::kSchema, "missing field 'version' (" + known + ")", "/version");
  std::int64_t version = 0;
  if (!as_int64(*v, version) || version < 1 || version > newest) {
    fail(Errc::kSchema,
         "unsupported version " + v->dump(-1, ' ', false, Json::error_handler_t::replace) +
             " (this reader knows " + known + ")",
         "/version");
  }
}

ir::Strategy read_strategy(const Reader& r, const Json& j, const std::string& path) {
  if (!j.is_array()) {
    r.fail(Errc::kSchema,
           std::string("expected an array of arrays of positive integers, got ") + j.type_name(),
           path);
  }
  ir::Strategy s;
  s.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) s.push_back(r.positive_integers(j[i], child(path, i)));
  return s;
}

ir::Recompute read_recompute(const Reader& r, const Json& j, const std::string& path) {
  const std::string s = r.string(j, path);
  const auto rc = plan::parse_recompute(s);
  if (!rc)
    r.fail(Errc::kSchema, "unknown recompute '" + s + "' (expected none, selective or full)", path);
  return *rc;
}

int read_zero_stage(const Reader& r, const Json& j, const std::string& path) {
  const std::int64_t z = r.integer(j, path);
  if (z < 0 || z > plan::kMaxZeroStage)
    r.fail(Errc::kSchema, "ZeRO stage must be 0, 1, 2 or 3, got " + std::to_string(z), path);
  return static_cast<int>(z);
}

ir::TrainingPins read_training_pins(const Reader& r, const Json& j, const std::string& path) {
  r.expect_object(j, path);
  ir::TrainingPins t;
  for (const auto& [key, value] : j.items()) {
    const std::string at = child(path, key);
    if (key == "recompute") {
      t.recompute = read_recompute(r, value, at);
    } else if (key == "zero_stage") {
      t.zero_stage = read_zero_stage(r, value, at);
    } else if (key == "microbatches") {
      t.microbatches = r.positive_integer(value, at);
    } else {
      r.fail(Errc::kSchema,
             "unknown training setting '" + key + "' (known: recompute, zero_stage, microbatches)",
             at);
    }
  }
  return t;
}

namespace {

// An optimizer preset name (cost_params.hpp, Optimizer).
Optimizer read_optimizer(const Reader& r, const Json& j, const std::string& path) {
  const std::string s = r.string(j, path);
  static constexpr std::pair<const char*, Optimizer> kNames[] = {
      {"auto", Optimizer::Auto},
      {"mixed-adam", Optimizer::MixedAdam},
      {"adam-f32", Optimizer::AdamF32},
      {"sgd", Optimizer::Sgd},
      {"sgd-momentum", Optimizer::SgdMomentum}};
  for (const auto& [name, o] : kNames)
    if (s == name) return o;
  r.fail(Errc::kSchema,
         "unknown optimizer '" + s + "' (known: auto, mixed-adam, adam-f32, sgd, sgd-momentum)",
         path);
}

}  // namespace

void read_cost_params(const Reader& r, const Json& j, const std::string& path, CostParams& out) {
  r.expect_object(j, path);
  CostParams p = out;
  for (const auto& [key, value] : j.items()) {
    const std::string at = child(path, key);
    if (key == "count_latency") {
      p.count_latency = r.boolean(value, at);
      continue;
    }
    if (key == "bucket_gradients") {
      p.bucket_gradients = r.boolean(value, at);
      continue;
    }
    if (key == "tf32") {
      p.tf32 = r.boolean(value, at);
      continue;
    }
    if (key == "overlap") {
      p.overlap = r.boolean(value, at);
      continue;
    }
    if (key == "optimizer") {
      p.optimizer = read_optimizer(r, value, at);
      continue;
    }
    double* field = nullptr;
    if (key == "backward_flops_factor") {
      field = &p.backward_flops_factor;
    } else if (key == "compute_efficiency") {
      field = &p.compute_efficiency;
    } else if (key == "gradient_bytes_factor") {
      field = &p.gradient_bytes_factor;
      p.optimizer = Optimizer::Factors;
    } else if (key == "optimizer_bytes_factor") {
      field = &p.optimizer_bytes_factor;
      p.optimizer = Optimizer::Factors;
    } else if (key == "memory_budget_bytes") {
      field = &p.memory_budget_bytes;
    } else {
      r.fail(Errc::kSchema,
             "unknown cost coefficient '" + key +
                 "' (known: backward_flops_factor, compute_efficiency, gradient_bytes_factor, "
                 "optimizer_bytes_factor, optimizer, count_latency, bucket_gradients, overlap, "
                 "tf32, memory_budget_bytes)",
             at);
    }
    const double v = r.number(value, at);
    if (v < 0) r.fail(Errc::kSchema, "must not be negative", at);
    if (key == "compute_efficiency" && !(v > 0 && v <= 1)) {
      r.fail(Errc::kSchema, "must be in (0, 1]", at);
    }
    *field = v;
  }
  out = p;
}

OrderedJson number_json(double v) {
  if (std::isfinite(v) && std::trunc(v) == v && std::fabs(v) <= kExactIntLimit) {
    return OrderedJson(static_cast<std::int64_t>(v));
  }
  return OrderedJson(v);
}

TextSink::TextSink(const std::string& path) : path_(path) {
  if (path == "-") {
    // Whatever std::cout holds goes first; then stdio writes the blocks.
    std::cout.flush();
    file_ = stdout;
    return;
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    throw Error(Errc::kIo, std::string("cannot open for writing: ") + std::strerror(errno), {},
                path);
  }
}

TextSink::~TextSink() {
  // Only reached without close() when writing failed on the way.
  if (file_ != nullptr && file_ != stdout) std::fclose(file_);
}

void TextSink::flush() {
  const bool written = std::fwrite(buf_.data(), 1, buf_.size(), file_) == buf_.size();
  buf_.clear();
  if (written) return;
  const int err = errno;
  if (file_ == stdout) throw Error(Errc::kIo, "cannot write to standard output");
  throw Error(Errc::kIo, std::string("cannot write: ") + std::strerror(err), {}, path_);
}

void TextSink::close() {
  if (file_ == nullptr) return;
  flush();
  std::FILE* f = std::exchange(file_, nullptr);
  if (f == stdout) {
    if (std::fflush(stdout) != 0) throw Error(Errc::kIo, "cannot write to standard output");
    return;
  }
  if (std::fclose(f) != 0) {
    throw Error(Errc::kIo, std::string("cannot write: ") + std::strerror(errno), {}, path_);
  }
}

void append_string(std::string& out, std::string_view s) {
  // Names are nearly always printable ASCII, which JSON quotes as is;
  // anything else (escapes, UTF-8 to check or replace) goes through nlohmann.
  const bool plain = std::all_of(
      s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; });
  if (!plain) {
    out += json_quote(s);
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_number(std::string& out, double v) {
  if (std::isfinite(v) && std::trunc(v) == v && std::fabs(v) <= kExactIntLimit) {
    append_int(out, static_cast<std::int64_t>(v));
  } else if (!std::isfinite(v)) {
    out += "null";  // what nlohmann prints for NaN and infinities
  } else {
    // nlohmann's own shortest round-trip printing, so that the bytes match dump().
    char buf[64];
    const char* end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, static_cast<std::size_t>(end - buf));
  }
}

void append_int_array(std::string& out, const std::vector<std::int64_t>& v, bool spaced) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += comma(spaced);
    append_int(out, v[i]);
  }
  out += ']';
}

void append_json(std::string& out, const OrderedJson& value, bool spaced) {
  if (spaced) {
    dump_compact(value, out);
  } else {
    out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

LayoutWriter::LayoutWriter(int indent) : indent_(indent), sink_(own_) { sink_.buffer() += '{'; }

LayoutWriter::LayoutWriter(int indent, TextSink& sink) : indent_(indent), sink_(sink) {
  sink_.buffer() += '{';
}

void LayoutWriter::key(std::string_view k) {
  std::string& out = sink_.buffer();
  if (!first_field_) out += ',';
  first_field_ = false;
  if (indent_ >= 0) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent_), ' ');
    out += json_quote(k);
    out += ": ";
  } else {
    out += json_quote(k);
    out += ':';
  }
}

void LayoutWriter::field(std::string_view k, const OrderedJson& value) {
  key(k);
  std::string& out = sink_.buffer();
  if (indent_ >= 0) {
    dump_expanded(value, indent_, 1, 2, out);
  } else {
    out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  sink_.maybe_flush();
}

void LayoutWriter::object_field(std::string_view k, const OrderedJson& head,
                                std::string_view tail_key,
                                const std::function<void(std::string&, bool)>* tail) {
  if (tail == nullptr || !head.is_object()) {
    field(k, head);
    return;
  }
  key(k);
  std::string& out = sink_.buffer();
  const bool spaced = indent_ >= 0;
  // As dump_expanded at depth 1 (members one per line, each value compact)
  // or, unindented, as dump(-1).
  const std::string pad = spaced ? std::string(static_cast<std::size_t>(indent_) * 2, ' ') : "";
  const std::string_view sep = spaced ? ",\n" : ",";
  out += spaced ? "{\n" : "{";
  for (const auto& [name, value] : head.items()) {
    out += pad;
    out += json_quote(name);
    out += colon(spaced);
    append_json(out, value, spaced);
    out += sep;
  }
  out += pad;
  out += json_quote(tail_key);
  out += colon(spaced);
  (*tail)(out, spaced);
  if (spaced) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent_), ' ');
  }
  out += '}';
  sink_.maybe_flush();
}

void LayoutWriter::begin_array(std::string_view k) {
  key(k);
  sink_.buffer() += '[';
  first_element_ = true;
}

void LayoutWriter::start_element() {
  std::string& out = sink_.buffer();
  if (!first_element_) out += ',';
  first_element_ = false;
  if (indent_ >= 0) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent_) * 2, ' ');
  }
}

void LayoutWriter::element(const OrderedJson& value) {
  start_element();
  append_json(sink_.buffer(), value, indent_ >= 0);
  sink_.maybe_flush();
}

void LayoutWriter::end_array() {
  std::string& out = sink_.buffer();
  if (indent_ >= 0 && !first_element_) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent_), ' ');
  }
  out += ']';
}

std::string LayoutWriter::finish() {
  std::string& out = sink_.buffer();
  if (indent_ >= 0) {
    out += first_field_ ? "}\n" : "\n}\n";
  } else {
    out += '}';
    // Files end with a newline, as write_text_file ends them.
    if (&sink_ != &own_) out += '\n';
  }
  if (&sink_ != &own_) {
    sink_.close();
    return {};
  }
  return own_.take();
}

}  // namespace recsearch::io::detail
