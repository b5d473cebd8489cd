// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the C API's JSON entry points. The input is a graph file,
// optionally followed by a line "%%" and a plan file, optionally followed by
// another "%%" line and a cluster file. It goes through rs_graph_from_json,
// rs_cluster_from_json, rs_evaluate (on that cluster, else the plan's own)
// and, for small graphs, rs_search on 6 devices; every result is written
// back with rs_result_plan_json and rs_result_plan_table. Property: every
// call returns RS_OK or a bad-input / no-fit (or documented usage) status
// whose rs_last_error() names the error id -- never RS_INTERNAL or
// RS_RUNTIME, never a crash or a leak.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "recsearch/recsearch.h"

namespace {

constexpr std::string_view kSeparator = "\n%%\n";

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "fuzz property violated: %s\n", why.c_str());
  std::fflush(stderr);
  std::abort();
}

// Aborts unless st is success or a well-reported input error.
// RS_USAGE is allowed where the call documents it for its input (rs_evaluate
// without a cluster, of a plan that names none).
bool ok(rs_status st, const char* call, bool usage_ok = false) {
  if (st == RS_OK) return true;
  const std::string msg = rs_last_error();
  if (st != RS_BAD_INPUT && st != RS_NO_FIT && !(usage_ok && st == RS_USAGE))
    die(std::string(call) + " returned " + std::to_string(st) + ": " + msg);
  const int code = rs_last_error_code();
  if (code / 100 != static_cast<int>(st))
    die(std::string(call) + ": status and error id disagree: " + msg);
  if (msg.find("[E" + std::to_string(code) + "]") == std::string::npos)
    die(std::string(call) + ": message without its id: " + msg);
  return false;
}

void write_back(const rs_result* r) {
  char* text = nullptr;
  std::size_t len = 0;
  if (ok(rs_result_plan_json(r, &text, &len), "rs_result_plan_json")) rs_free(text);
  text = nullptr;
  if (ok(rs_result_plan_table(r, &text, &len), "rs_result_plan_table")) rs_free(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  std::size_t n = 0;
  while (n < 2) {
    const std::size_t sep = rest.find(kSeparator);
    if (sep == std::string_view::npos) break;
    parts[n++] = rest.substr(0, sep);
    rest.remove_prefix(sep + kSeparator.size());
  }
  parts[n++] = rest;

  rs_graph* g = nullptr;
  if (!ok(rs_graph_from_json(parts[0].data(), parts[0].size(), "graph.json", &g),
          "rs_graph_from_json")) {
    return 0;
  }
  char* text = nullptr;
  std::size_t len = 0;
  if (ok(rs_graph_to_json(g, &text, &len), "rs_graph_to_json")) rs_free(text);

  rs_cluster* c = nullptr;
  if (n == 3)
    (void)ok(rs_cluster_from_json(parts[2].data(), parts[2].size(), "cluster.json", &c),
             "rs_cluster_from_json");
  if (n >= 2) {
    rs_result* r = nullptr;
    if (ok(rs_evaluate(g, c, parts[1].data(), parts[1].size(), nullptr, &r), "rs_evaluate",
           c == nullptr))
      write_back(r);
    rs_result_free(r);
  }
  std::size_t ops = 0;
  if (ok(rs_graph_num_operators(g, &ops), "rs_graph_num_operators") && ops <= 64) {
    rs_cluster* six = nullptr;
    if (!ok(rs_cluster_create_flat(6, &six), "rs_cluster_create_flat")) die("6 devices refused");
    rs_result* r = nullptr;
    if (ok(rs_search(g, six, nullptr, &r), "rs_search")) write_back(r);
    rs_result_free(r);
    rs_cluster_free(six);
  }
  rs_cluster_free(c);
  rs_graph_free(g);
  return 0;
}
