// SPDX-License-Identifier: Apache-2.0
// A handler of the streaming JSON readers (io/json_util.hpp) that asks for
// what the plan reader asks for (operators and tensors streamed,
// redistributions skipped, the rest collected) and writes down every call,
// so that two readers can be compared call by call.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.hpp"

namespace recsearch::testing {

class StreamRecorder final : public io::detail::StreamHandler {
 public:
  Mode mode(const std::string& key) override {
    log.push_back("mode " + key);
    if (key == "operators" || key == "tensors") return Mode::kStream;
    if (key == "redistributions") return Mode::kSkip;
    return Mode::kCollect;
  }
  // A record that is the string "throw" throws, as a handler's own error.
  void record(const std::string& key, std::size_t index, io::detail::Json&& value) override {
    if (value.is_string() && value.get_ref<const std::string&>() == "throw")
      throw std::runtime_error("the handler's own error");
    log.push_back("record " + key + " " + std::to_string(index) + " " + value.dump());
  }
  void field_done(const std::string& key, const io::detail::Json& head) override {
    log.push_back("done " + key + " " + head.dump());
  }

  std::vector<std::string> log;
};

}  // namespace recsearch::testing
