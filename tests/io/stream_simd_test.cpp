// SPDX-License-Identifier: Apache-2.0
// The fast streaming reader (io/stream_simd.cpp) against the nlohmann one it
// stands in for: on the files it accepts, the handler sees the same calls
// with the same values; on anything it does not read exactly alike it
// gives up, and plans read through it are the plans read without it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/search/search.hpp"
#include "support/sample_graphs.hpp"
#include "support/stream_recorder.hpp"

namespace {

using namespace recsearch;
using io::detail::Json;
using io::detail::StreamHandler;

using Recorder = testing::StreamRecorder;

// The fast reader accepts `text` and its calls are the streaming reader's.
void check_same(const std::string& text) {
  CAPTURE(text.substr(0, 200));
  Recorder fast;
  Json head;
  REQUIRE(io::detail::stream_object_fast(text, 0, fast, head));
  Recorder slow;
  const Json slow_head = io::detail::stream_object(text, "t.json", slow);
  CHECK(fast.log == slow.log);
  CHECK(head.dump() == slow_head.dump());
  // The same with the string's own room past its end.
  std::string padded = text;
  padded.reserve(text.size() + io::detail::simd_padding());
  Recorder again;
  Json head2;
  REQUIRE(io::detail::stream_object_fast(padded, padded.capacity() + 1, again, head2));
  CHECK(again.log == slow.log);
}

bool fast_accepts(const std::string& text) {
  Recorder r;
  Json head;
  return io::detail::stream_object_fast(text, 0, r, head);
}

}  // namespace

TEST_CASE("the fast reader hands over what the streaming reader does") {
  check_same(R"({"format": "recsearch.plan", "version": 2, "operators": [
      {"name": "a", "cuts": {"c0": "i", "c1": null}, "strategy": [[2, 1], [1, 4]]},
      {"name": "bé", "list": [], "object": {}, "t": true, "f": false, "n": null}],
    "redistributions": [{"bytes": 1.5e3, "x": [[[1]]]}],
    "tensors": [], "numbers": [0, 1, -3, 1.5, -2.25e-3, 1E3, 18446744073709551615,
                               -9223372036854775808],
    "nested": {"a": {"b": [1, {"c": "d"}]}}, "text": "café 中"})");
  check_same(R"({"operators": {"not": "an array"}, "tensors": 3})");
  check_same("{}");
  check_same(" {\"a\": 1} \n");
}

TEST_CASE("the fast reader gives up on what it does not read exactly alike") {
  // Each is either an error of the streaming reader (which reports it) or
  // a value nlohmann builds in its own way.
  for (const std::string text : {
           R"({"a": "\u0078"})",                    // an escape in a string
           R"({"\u0061": 1})",                      // an escape in a key
           R"({"operators": [{"k\n": 1}]})",        // an escaped key in a record
           R"({"a": -0})",                          // minus zero
           R"({"a": 1e999})",                       // a float out of range
           R"({"a": 99999999999999999999})",        // an integer out of range
           R"({"a": -99999999999999999999})",       //
           R"({"operators": [{"x": 1, "x": 2}]})",  // a key twice in a record
           R"({"a": 1, "a": 2})",                   // a top-level key twice
           R"({"a": 1} x)",                         // text after the object
           R"({"a": [1, )",                         // truncated
           R"([1, 2])",                             // not an object
           "{\"a\": \"tab\there\"}",                // a control character
           R"({"a": [1,, 2]})",                     // malformed
           R"({"redistributions": [1,, 2]})",       // malformed where skipped
           R"({"a": tru})",                         //
           // A missing separator, where simdjson ends an iteration quietly.
           R"({"a": [1 2]})",                    //
           R"({"a": 1 "b": 2})",                 //
           R"({"a": {"x": 1 "y": 2}, "b": 3})",  //
           R"({"operators": [{"name": "x"} {"name": "y"}]})",
           R"({"format": ["strategy": [[1, 4]]}]})",  // found by fuzz_plan
           // A mantissa of more than 19 digits (simdjson 3.0 misread this
           // one, found by fuzz_plan, as 6.1e-115).
           R"({"redistributions": [{"bytes": 0.666666666633333333333333333333333333333333333}]})",
           R"({"a": 0.666666666633333333333333333333333333333333333})",
       }) {
    CAPTURE(text);
    CHECK_FALSE(fast_accepts(text));
  }
  // Nesting as deep as the streaming reader refuses, and a little less.
  std::string deep = "{\"a\": ";
  for (int i = 0; i < io::detail::kMaxDepth; ++i) deep += "[";
  for (int i = 0; i < io::detail::kMaxDepth; ++i) deep += "]";
  CHECK_FALSE(fast_accepts(deep + "}"));
}

TEST_CASE("the handler's own errors pass through the fast reader") {
  Recorder r;
  Json head;
  CHECK_THROWS_AS(
      (void)io::detail::stream_object_fast(R"({"operators": [1, "throw"]})", 0, r, head),
      std::runtime_error);
}

TEST_CASE("sample graphs: plans read the same through the fast reader and without it") {
  const Cluster cluster = Cluster::mesh({2, 4});
  testing::for_each_sample_graph([&](const std::string& file, const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces) {
    CAPTURE(file);
    search::SearchOptions opts;
    opts.mode = Mode::Infer;
    search::SearchResult r;
    try {
      r = search::run(g, spaces, cluster, opts);
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
      return;  // a big model on 8 devices
    }
    for (const io::PlanDetail detail : {io::PlanDetail::Full, io::PlanDetail::Summary}) {
      const std::string text = io::plan_to_json(g, spaces, cluster, r.plan, r.eval, 2, detail);
      // The handler's view first, then the plan.
      check_same(text);
      const plan::Plan viewed =
          io::parse_plan(std::string_view(text), "p.json", g, spaces, cluster.cuts());
      const plan::Plan padded = io::parse_plan(text, "p.json", g, spaces, cluster.cuts());
      CHECK(viewed.cuts == r.plan.cuts);
      CHECK(padded.cuts == r.plan.cuts);
      CHECK(padded.training == viewed.training);
    }
  });
}
