// SPDX-License-Identifier: Apache-2.0
// Helpers of the fast simdjson readers (graph_simd.cpp, stream_simd.cpp):
// values read straight from the file's text, and GiveUp, thrown the moment
// a file holds anything the fast reader does not handle exactly as the
// streaming nlohmann reader would (which then reads the file and reports
// whatever is wrong with it).
#pragma once

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "io/json_util.hpp"

namespace recsearch::io::detail::simd {

namespace od = simdjson::ondemand;

// Thrown inside this file only: the streaming reader takes over.
struct GiveUp {};

// By value: a result of a value or an iterator is a few words, copied as
// cheaply as moved.
template <class T>
inline T get(simdjson::simdjson_result<T> r) {
  T v{};
  if (std::move(r).get(v) != simdjson::SUCCESS) throw GiveUp{};
  return v;
}

// A string value, as a view into the file's text (which outlives the
// parser's buffer). It is not unescaped (get_string would copy every string
// of the file into the parser's string buffer, a third of the file's size in
// fresh pages): without a backslash the first quote after the opening one
// closes it, and the object or array around it skips the value and checks
// the separator that follows, as it does for any value left unread. The
// document's UTF-8 was validated as a whole when it was indexed. Strings
// with escapes (where nlohmann and simdjson may treat lone surrogates
// differently) or control characters (which simdjson does not reject) are
// the streaming reader's.
inline std::string_view text(od::value v) {
  const std::string_view raw = v.raw_json_token();
  if (raw.empty() || raw.front() != '"') throw GiveUp{};
  for (std::size_t i = 1; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == '"') {
      // Consumed (without a copy), so that the iterator stands on what
      // follows it, as after any other value (next_field_follows).
      (void)get(v.get_raw_json_string());
      return raw.substr(1, i - 1);
    }
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20) throw GiveUp{};
  }
  throw GiveUp{};
}

// After a top-level field's value, read whole: the iterator must stand on
// the ',' or '}' that follows it. simdjson ends an array's or object's
// iteration quietly where a separator is missing ({"a": [1 2]}, {"a": 1
// "b": 2}) and jumps to the end of the document, so this also catches
// every such error inside the value.
inline void next_field_follows(od::document& doc) {
  const char* at = nullptr;
  if (doc.current_location().get(at) != simdjson::SUCCESS || (*at != ',' && *at != '}'))
    throw GiveUp{};
}

// An object key as written; keys with escapes are the streaming reader's.
inline std::string_view key_of(od::field& f) {
  const char* k = f.key().raw();
  // The key's closing quote, found by walking to it (not std::strchr: under
  // ASan's strict_string_checks every strchr measures the whole rest of the
  // document first, which makes reading a big file quadratic).
  const char* end = k;
  while (*end != '"' && *end != '\0') ++end;
  if (*end != '"') throw GiveUp{};
  const std::string_view key(k, static_cast<std::size_t>(end - k));
  if (key.find('\\') != std::string_view::npos) throw GiveUp{};
  return key;
}

inline bool is_float_token(std::string_view raw) {
  return raw.find_first_of(".eE") != std::string_view::npos;
}

// An integer written as one ("1", "-3"; not "1.0", "1e3" or "-0").
inline std::int64_t integer(od::value v) {
  const std::string_view raw = v.raw_json_token();
  if (is_float_token(raw) || raw.substr(0, 2) == "-0") throw GiveUp{};
  return get(v.get_int64());
}

// A number written as a float ("1.5", "1e3"), as strtod reads it. simdjson
// 3.0 misreads some mantissas of more than 19 digits (one of 135 digits,
// 0.666..., came back as 6.1e-115), so those are the streaming reader's;
// so is anything not finite.
inline double real(od::value v) {
  const std::string_view raw = v.raw_json_token();
  int digits = 0;
  for (const char c : raw) {
    if (c == 'e' || c == 'E') break;
    if (c >= '0' && c <= '9' && (digits > 0 || c != '0')) ++digits;
  }
  if (digits > 19) throw GiveUp{};
  const double d = get(v.get_double());
  if (!std::isfinite(d)) throw GiveUp{};
  return d;
}

inline std::int64_t positive(od::value v) {
  const std::int64_t n = integer(v);
  if (n <= 0) throw GiveUp{};
  return n;
}

// The keys of one object seen so far: whether each new one is new. A few
// are compared in a list; past kListed they go to a hash set, since a
// plan's skipped objects can hold a key per parameter (zero_axes of the
// 10^6-operator GPT: 512,004), where comparing each with all before it
// took minutes.
class DistinctKeys {
 public:
  // False when `key` was added before.
  bool add(std::string_view key) {
    if (set_.empty()) {
      if (std::find(list_.begin(), list_.end(), key) != list_.end()) return false;
      list_.push_back(key);
      if (list_.size() > kListed) set_.insert(list_.begin(), list_.end());
      return true;
    }
    return set_.insert(key).second;
  }

 private:
  static constexpr std::size_t kListed = 16;
  std::vector<std::string_view> list_;
  std::unordered_set<std::string_view> set_;
};

// Walks a value the graph does not use, so that it is validated as the
// streaming reader validates it (that one parses everything). A key given
// twice in one object gives up: the streaming reader refuses it where it
// builds the value (inside a record), and is the one to say.
inline void validate(od::value v, int depth) {
  if (depth > kMaxDepth) throw GiveUp{};
  switch (get(v.type())) {
    case od::json_type::object: {
      DistinctKeys keys;
      for (auto field : get(v.get_object())) {
        od::field f = get(std::move(field));
        if (!keys.add(key_of(f))) throw GiveUp{};
        validate(f.value(), depth + 1);
      }
      return;
    }
    case od::json_type::array:
      for (auto element : get(v.get_array())) validate(get(element), depth + 1);
      return;
    case od::json_type::number: (void)real(v); return;
    case od::json_type::string: (void)text(v); return;
    case od::json_type::boolean: (void)get(v.get_bool()); return;
    case od::json_type::null:
      if (!get(v.is_null())) throw GiveUp{};
      return;
  }
  throw GiveUp{};
}

// A number as nlohmann types it: a float when written with '.', 'e' or 'E',
// else unsigned when not negative, else signed. "-0" and numbers out of
// range (which nlohmann turns into floats or errors) are left to it.
inline Json number_json(od::value v) {
  const std::string_view raw = v.raw_json_token();
  if (is_float_token(raw)) return Json(real(v));
  if (!raw.empty() && raw.front() == '-') return Json(integer(v));
  return Json(get(v.get_uint64()));
}

// The value as nlohmann's parser builds it; `depth` counts the containers
// around it, the root object included. A key given twice in one object
// gives up: the streaming reader refuses it in every value it builds.
inline Json to_json(od::value v, int depth) {
  // The streaming reader refuses nesting deeper than kMaxDepth; stop short.
  if (depth >= kMaxDepth - 1) throw GiveUp{};
  switch (get(v.type())) {
    case od::json_type::object: {
      Json j(Json::value_t::object);
      auto& members = j.get_ref<Json::object_t&>();
      for (auto field : get(v.get_object())) {
        od::field f = get(std::move(field));
        std::string key(key_of(f));
        if (!members.emplace(std::move(key), to_json(f.value(), depth + 1)).second) throw GiveUp{};
      }
      return j;
    }
    case od::json_type::array: {
      Json j(Json::value_t::array);
      for (auto element : get(v.get_array())) j.push_back(to_json(get(element), depth + 1));
      return j;
    }
    case od::json_type::number: return number_json(v);
    case od::json_type::string: return Json(std::string(text(v)));
    case od::json_type::boolean: return Json(get(v.get_bool()));
    case od::json_type::null:
      if (!get(v.is_null())) throw GiveUp{};
      return Json(nullptr);
  }
  throw GiveUp{};
}

}  // namespace recsearch::io::detail::simd
