// SPDX-License-Identifier: Apache-2.0
// stream_object_fast (json_util.hpp): stream_object's records and fields
// read with simdjson On-Demand instead of nlohmann's lexer, which took most
// of the time of reading a plan of 10^6 operators. The handler gets the
// same nlohmann values in the same order; only the text is read faster.
//
// Like the fast graph reader it gives up (returns false) on anything it
// does not read exactly as the streaming reader would, and the caller reads
// the text again with stream_object, which reports what is wrong with it.
#include <simdjson.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "io/json_util.hpp"
#include "io/simd_util.hpp"

namespace recsearch::io::detail {

namespace {

namespace od = simdjson::ondemand;
using simd::get;
using simd::GiveUp;

// One top-level field, handled as stream_object handles it.
void field(od::field& f, StreamHandler& handler, Json& head, std::vector<std::string>& seen) {
  std::string key(simd::key_of(f));
  // A key given twice: stream_object refuses a streamed one and keeps the
  // last collected one; either way it is its call.
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw GiveUp{};
  seen.push_back(key);
  od::value v = f.value();
  const StreamHandler::Mode mode = handler.mode(key);
  if (mode == StreamHandler::Mode::kStream && get(v.type()) == od::json_type::array) {
    std::size_t i = 0;
    for (auto element : get(v.get_array()))
      handler.record(key, i++, simd::to_json(get(element), 2));
  } else if (mode == StreamHandler::Mode::kSkip) {
    simd::validate(v, 2);
  } else {
    head[key] = simd::to_json(v, 2);
  }
  handler.field_done(key, head);
}

bool read(std::string_view text, std::size_t capacity, StreamHandler& handler, Json& head) {
  od::parser parser;
  od::document doc =
      get(parser.iterate(simdjson::padded_string_view(text.data(), text.size(), capacity)));
  std::vector<std::string> seen;
  for (auto member : get(doc.get_object())) {
    od::field f = get(std::move(member));
    field(f, handler, head, seen);
    simd::next_field_follows(doc);
    if (handler.done(head)) return true;
  }
  // Nothing may follow the object ("{} trailing" is not JSON).
  const char* rest = nullptr;
  if (doc.current_location().get(rest) != simdjson::OUT_OF_BOUNDS) throw GiveUp{};
  return true;
}

}  // namespace

std::size_t simd_padding() noexcept { return simdjson::SIMDJSON_PADDING; }

bool stream_object_fast(std::string_view text, std::size_t capacity, StreamHandler& handler,
                        Json& head) {
  // A truncated file is the streaming reader's at once (it fails at the
  // end in constant memory).
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{' || last == first || text[last] != '}')
    return false;
  head = Json::object();
  try {
    if (capacity >= text.size() + simdjson::SIMDJSON_PADDING)
      return read(text, capacity, handler, head);
    const simdjson::padded_string copy(text.data(), text.size());
    return read(copy, copy.size() + simdjson::SIMDJSON_PADDING, handler, head);
  } catch (const GiveUp&) {
    return false;
  }
}

}  // namespace recsearch::io::detail
