// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the plan reader against a fixed graph (plan_graph.json, a
// mix of kinds: convolution, pooling, reshape, contraction, norms, cast,
// cross-entropy, transpose, reduction) on 12 devices (cuts 2, 2, 3). Any
// bytes read as a plan either give a plan that passes check_plan, evaluates
// to finite figures and round-trips through plan_to_json, or a well-formed
// recsearch::Error (fuzz_common.hpp). The plan's own mesh and cluster are
// read as eval reads them, each under the same property. And the fast
// simdjson reader of plan files either gives up or hands its handler what
// the streaming nlohmann reader does, never accepting what that rejects.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "io/json_util.hpp"
#include "recsearch/recsearch.hpp"
#include "support/stream_recorder.hpp"

#ifndef FUZZ_PLAN_GRAPH
#error "FUZZ_PLAN_GRAPH: path of the graph the plans are read against"
#endif

namespace {

using namespace recsearch;

struct Fixture {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
  Cluster cluster = Cluster::flat(12);
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x{io::read_graph_file(FUZZ_PLAN_GRAPH), {}};
    x.spaces = algebra::build_op_spaces(x.graph);
    return x;
  }();
  return f;
}

using Recorder = testing::StreamRecorder;

// The two texts around their first difference.
std::string difference(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const std::size_t from = i < 80 ? 0 : i - 80;
  return "..." + a.substr(from, 160) + " against ..." + b.substr(from, 160);
}

void check_fast_reader(std::string_view text) {
  Recorder fast;
  io::detail::Json head;
  if (!io::detail::stream_object_fast(text, 0, fast, head)) return;
  Recorder slow;
  io::detail::Json slow_head;
  try {
    slow_head = io::detail::stream_object(text, fuzz::kSource, slow);
  } catch (const Error& e) {
    fuzz::die(std::string("the fast reader accepts what the streaming reader refuses: ") +
              e.what());
  }
  if (head.dump() != slow_head.dump())
    fuzz::die("the fast and the streaming reader collect different heads: " +
              difference(head.dump(), slow_head.dump()));
  for (std::size_t i = 0; i < std::max(fast.log.size(), slow.log.size()); ++i) {
    const std::string a = i < fast.log.size() ? fast.log[i] : "(nothing)";
    const std::string b = i < slow.log.size() ? slow.log[i] : "(nothing)";
    if (a != b) {
      fuzz::die("the fast and the streaming reader hand over different values, call " +
                std::to_string(i) + ": " + difference(a, b));
    }
  }
}

void check_finite(const plan::Summary& s) {
  for (const double v : {s.step_time_s, s.compute_s, s.communication_s, s.memory_per_device_bytes})
    if (!std::isfinite(v) || v < 0) fuzz::die("evaluation gave a negative or non-finite figure");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Fixture& f = fixture();
  const std::string_view text = fuzz::as_text(data, size);
  check_fast_reader(text);
  fuzz::guard(fuzz::kSource, false, [&] { (void)io::plan_mesh_sizes(text, fuzz::kSource); });
  fuzz::guard(fuzz::kSource, false, [&] { (void)io::plan_cluster(text, fuzz::kSource); });
  fuzz::guard(fuzz::kSource, false, [&] {
    const plan::Plan p = io::parse_plan(text, fuzz::kSource, f.graph, f.spaces, f.cluster.cuts());
    fuzz::attributed(fuzz::kSource, [&] {
      plan::check_plan(f.graph, f.spaces, p);
      return 0;
    });
    const plan::Evaluation ev = plan::evaluate(f.graph, f.spaces, f.cluster, p, CostParams{});
    check_finite(ev.summary);

    const std::string written = io::plan_to_json(f.graph, f.spaces, f.cluster, p, ev);
    try {
      const plan::Plan again =
          io::parse_plan(written, "roundtrip.json", f.graph, f.spaces, f.cluster.cuts());
      const plan::Evaluation ev2 =
          plan::evaluate(f.graph, f.spaces, f.cluster, again, CostParams{});
      if (io::plan_to_json(f.graph, f.spaces, f.cluster, again, ev2) != written)
        fuzz::die("plan_to_json does not round-trip");
    } catch (const Error& e) {
      fuzz::die(std::string("the reader rejects what the writer wrote: ") + e.what());
    }
  });
  return 0;
}
