// SPDX-License-Identifier: Apache-2.0
// Tests of the graph file reader and writer: what a valid file becomes, that
// writing and reading back is the identity, and that every malformed input
// (wrong types, bad names, truncation, corruption) is a recsearch::Error
// naming the file and the exact JSON path, never a crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <variant>

#include <unistd.h>

#include "io/graph_read.hpp"
#include "io/json_util.hpp"
#include "recsearch/io/json_io.hpp"
#include "support/errors.hpp"
#include "support/sample_graphs.hpp"

namespace {

using namespace recsearch;
using recsearch::testing::expect_error;

const std::string kFile = "tiny.json";

// Every feature of the format once, no trailing whitespace (so that every
// proper prefix is invalid JSON).
const std::string kTiny = R"({"format": "recsearch.graph", "version": 1, "name": "tiny",
 "description": "ignored", "training": {"zero_stage": 2, "microbatches": 4}, "tensors": [
  {"name": "x", "shape": [4, 8]},
  {"name": "w", "shape": [8, 16], "dtype": "bf16", "kind": "parameter"},
  {"name": "c", "shape": [16], "dtype": "i32", "kind": "constant"},
  {"name": "s", "shape": [], "dtype": "bool", "kind": "input"},
  {"name": "h", "shape": [4, 16], "dtype": "f32", "comment": "ignored"},
  {"name": "y", "shape": [4, 16]}
 ],
 "operators": [
  {"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"],
   "attrs": {"transpose_b": false, "alpha": 1.5, "one": 1.0, "n": -3, "axes": [0, 1],
             "scales": [1, 0.5], "names": ["a", "b"], "mode": "fast", "empty": []},
   "strategy": [[2, 1], [1, 4]]},
  {"name": "act", "type": "MyOp", "inputs": ["h", "c", "s"], "outputs": ["y"], "allowed": ["d0"],
   "einsum": "ij,j,->ij", "recompute": "full"}
 ]})";

// A graph file around the given tensors and operators arrays.
std::string graph_text(const std::string& tensors, const std::string& operators,
                       const std::string& extra = {}) {
  return R"({"format": "recsearch.graph", "version": 1, "name": "g", "tensors": )" + tensors +
         R"(, "operators": )" + operators + extra + "}";
}

const std::string kXW =
    R"([{"name": "x", "shape": [4, 8]}, {"name": "w", "shape": [8, 16], "kind": "parameter"},
        {"name": "h", "shape": [4, 16]}])";

std::string one_op(const std::string& fields) {
  return R"([{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"])" + fields +
         "}]";
}

void check_same_graph(const ir::Graph& a, const ir::Graph& b) {
  CHECK(a.name() == b.name());
  REQUIRE(a.num_tensors() == b.num_tensors());
  REQUIRE(a.num_operators() == b.num_operators());
  for (ir::TensorId t = 0; t < a.num_tensors(); ++t) {
    CHECK(a.tensor(t).name == b.tensor(t).name);
    CHECK(a.tensor(t).shape == b.tensor(t).shape);
    CHECK(a.tensor(t).dtype == b.tensor(t).dtype);
    CHECK(a.tensor(t).kind == b.tensor(t).kind);
    CHECK(a.tensor(t).producer == b.tensor(t).producer);
  }
  for (ir::OpId o = 0; o < a.num_operators(); ++o) {
    const ir::Operator& x = a.op(o);
    const ir::Operator& y = b.op(o);
    CHECK(x.name == y.name);
    CHECK(x.type == y.type);
    CHECK(x.kind == y.kind);
    CHECK(x.inputs == y.inputs);
    CHECK(x.outputs == y.outputs);
    CHECK(x.attrs.items() == y.attrs.items());
    CHECK(x.strategy == y.strategy);
    CHECK(x.allowed == y.allowed);
    CHECK(x.recompute == y.recompute);
  }
  CHECK(a.training_pins() == b.training_pins());
}

}  // namespace

TEST_CASE("a valid graph file becomes a finalized graph") {
  const ir::Graph g = io::parse_graph(kTiny, kFile);
  CHECK(g.finalized());
  CHECK(g.name() == "tiny");
  REQUIRE(g.num_tensors() == 6);
  REQUIRE(g.num_operators() == 2);

  const auto& x = g.tensor(*g.find_tensor("x"));
  CHECK(x.shape == ir::Shape{4, 8});
  CHECK(x.dtype == ir::DType::F32);  // default
  CHECK(x.kind == ir::TensorKind::Input);
  const auto& w = g.tensor(*g.find_tensor("w"));
  CHECK(w.dtype == ir::DType::BF16);
  CHECK(w.kind == ir::TensorKind::Parameter);
  const auto& c = g.tensor(*g.find_tensor("c"));
  CHECK(c.dtype == ir::DType::I32);
  CHECK(c.kind == ir::TensorKind::Constant);
  const auto& s = g.tensor(*g.find_tensor("s"));
  CHECK(s.shape.empty());
  CHECK(s.dtype == ir::DType::Bool);
  const auto& h = g.tensor(*g.find_tensor("h"));
  CHECK(h.kind == ir::TensorKind::Activation);
  CHECK(h.producer == *g.find_operator("mm"));

  const ir::Operator& mm = g.op(*g.find_operator("mm"));
  CHECK(mm.type == "MatMul");
  CHECK(mm.kind == ir::OpKind::MatMul);
  CHECK(mm.inputs == std::vector<ir::TensorId>{*g.find_tensor("x"), *g.find_tensor("w")});
  REQUIRE(mm.strategy.has_value());
  CHECK(*mm.strategy == ir::Strategy{{2, 1}, {1, 4}});
  CHECK_FALSE(mm.allowed.has_value());

  const ir::Attrs& a = mm.attrs;
  REQUIRE(a.find("transpose_b") != nullptr);
  CHECK(std::get<bool>(*a.find("transpose_b")) == false);
  CHECK(std::get<double>(*a.find("alpha")) == 1.5);
  CHECK(std::get<double>(*a.find("one")) == 1.0);  // written as a float, stays a float
  CHECK(std::get<std::int64_t>(*a.find("n")) == -3);
  CHECK(std::get<std::vector<std::int64_t>>(*a.find("axes")) == std::vector<std::int64_t>{0, 1});
  CHECK(std::get<std::vector<double>>(*a.find("scales")) == std::vector<double>{1.0, 0.5});
  CHECK(std::get<std::vector<std::string>>(*a.find("names")) == std::vector<std::string>{"a", "b"});
  CHECK(std::get<std::string>(*a.find("mode")) == "fast");
  CHECK(std::get<std::vector<std::int64_t>>(*a.find("empty")).empty());

  const ir::Operator& act = g.op(*g.find_operator("act"));
  CHECK(act.kind == ir::OpKind::Custom);
  REQUIRE(act.allowed.has_value());
  CHECK(*act.allowed == std::vector<std::string>{"d0"});
  // Operator-level "einsum" is the attribute.
  CHECK(act.attrs.get_string("einsum", "") == "ij,j,->ij");
  // Training pins: the operator's recomputation and the graph's settings.
  CHECK(act.recompute == ir::Recompute::Full);
  CHECK_FALSE(mm.recompute.has_value());
  CHECK(g.training_pins() == ir::TrainingPins{std::nullopt, 2, 4});
}

TEST_CASE("graph_to_json round-trips") {
  const ir::Graph g = io::parse_graph(kTiny, kFile);
  for (const int indent : {-1, 0, 1, 4}) {
    CAPTURE(indent);
    const std::string text = io::graph_to_json(g, indent);
    const ir::Graph back = io::parse_graph(text, "back.json");
    check_same_graph(g, back);
    // Deterministic: writing again gives the same bytes.
    CHECK(io::graph_to_json(back, indent) == text);
  }
  // Indented output keeps one record per line.
  const std::string text = io::graph_to_json(g);
  CHECK(text.find(
            "\n  {\"name\": \"x\", \"shape\": [4, 8], \"dtype\": \"f32\", \"kind\": \"input\"}") !=
        std::string::npos);
}

TEST_CASE("graph_to_json round-trips a graph built in code, including awkward names") {
  ir::Graph g("built");
  const auto x = g.add_tensor("in/put~0 \"q\"", {2, 3}, ir::DType::F16);
  const auto y = g.add_tensor("ü→y", {2, 3}, ir::DType::F16);
  ir::Operator op;
  op.name = "op with spaces";
  op.type = "Cast";
  op.inputs = {x};
  op.outputs = {y};
  op.attrs.set("to", std::string("f16"));
  op.attrs.set("big", std::int64_t{9007199254740993});  // not a double
  op.attrs.set("tiny", 1e-300);
  op.attrs.set("floats", std::vector<double>{0.1, 2.0});
  g.add_operator(std::move(op));
  g.finalize();
  check_same_graph(g, io::parse_graph(io::graph_to_json(g), "built.json"));
}

TEST_CASE("sample graphs in data/graphs round-trip") {
  const char* dir = std::getenv("RECSEARCH_DATA");
  if (dir == nullptr) return;
  for (const std::string& file : testing::sample_graph_files(dir)) {
    CAPTURE(file);
    const ir::Graph g = io::read_graph_file(file);
    check_same_graph(g, io::parse_graph(io::graph_to_json(g), "back.json"));
  }
}

TEST_CASE("fields may come in any order") {
  const ir::Graph want = io::parse_graph(kTiny, kFile);
  const std::string tensors = R"([{"name": "x", "shape": [4, 8]},
    {"name": "w", "shape": [8, 16], "dtype": "bf16", "kind": "parameter"},
    {"name": "c", "shape": [16], "dtype": "i32", "kind": "constant"},
    {"name": "s", "shape": [], "dtype": "bool", "kind": "input"},
    {"name": "h", "shape": [4, 16], "dtype": "f32"}, {"name": "y", "shape": [4, 16]}])";
  const std::string ops =
      R"([{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"],
     "attrs": {"transpose_b": false, "alpha": 1.5, "one": 1.0, "n": -3, "axes": [0, 1],
               "scales": [1, 0.5], "names": ["a", "b"], "mode": "fast", "empty": []},
     "strategy": [[2, 1], [1, 4]]},
    {"name": "act", "type": "MyOp", "inputs": ["h", "c", "s"], "outputs": ["y"], "allowed": ["d0"],
     "recompute": "full", "einsum": "ij,j,->ij"}])";
  // Operators first, format last: everything waits until it can be read.
  check_same_graph(want, io::parse_graph(R"({"name": "tiny", "operators": )" + ops +
                                             R"(, "tensors": )" + tensors +
                                             R"(, "version": 1, "format": "recsearch.graph",
                                             "training": {"microbatches": 4, "zero_stage": 2}})",
                                         kFile));
  // Tensors before the format, operators after.
  check_same_graph(want,
                   io::parse_graph(R"({"tensors": )" + tensors + R"(, "version": 1, "name": "tiny",
      "training": {"zero_stage": 2, "microbatches": 4}, "format": "recsearch.graph", "operators": )" +
                                       ops + "}",
                                   kFile));
  // A wrong format is reported before any record is looked at.
  expect_error(
      [&] {
        (void)io::parse_graph(R"({"format": "recsearch.plan", "version": 1, "tensors": [7]})",
                              kFile);
      },
      Errc::kSchema, "/format", kFile);
  expect_error(
      [&] {
        (void)io::parse_graph(
            R"({"tensors": [7], "operators": [], "format": "recsearch.plan", "version": 1})",
            kFile);
      },
      Errc::kSchema, "/format", kFile);
  // A streamed array given twice.
  expect_error([&] { (void)io::parse_graph(graph_text(kXW, "[]", R"(, "tensors": [])"), kFile); },
               Errc::kDuplicate, "/tensors", kFile);
  expect_error([&] { (void)io::parse_graph(graph_text(kXW, "[]", R"(, "tensors": {})"), kFile); },
               Errc::kSchema, "/tensors", kFile);
}

TEST_CASE("a top-level cost object is read into CostParams") {
  const std::string text = graph_text(
      kXW, one_op(""),
      R"(, "cost": {"compute_efficiency": 0.25, "count_latency": false, "memory_budget_bytes": 1e9})");
  CostParams p;
  (void)io::parse_graph(text, kFile, &p);
  CHECK(p.compute_efficiency == 0.25);
  CHECK(p.count_latency == false);
  CHECK(p.memory_budget_bytes == 1e9);
  CHECK(p.backward_flops_factor == 2.0);  // untouched
  // Without a CostParams the object is still checked.
  expect_error([] { (void)io::parse_graph(graph_text(kXW, one_op(""), R"(, "cost": 5)"), kFile); },
               Errc::kSchema, "/cost", kFile);
  expect_error(
      [&] {
        (void)io::parse_graph(
            graph_text(kXW, one_op(""), R"(, "cost": {"compute_efficency": 0.5})"), kFile, &p);
      },
      Errc::kSchema, "/cost/compute_efficency", kFile);
}

TEST_CASE("graph errors name the file and the exact JSON path") {
  struct Case {
    std::string name;
    std::string text;
    Errc code;
    std::string path;
  };
  const std::string ok_ops = one_op("");
  const std::vector<Case> cases = {
      {"top level not an object", "[]", Errc::kSchema, ""},
      {"format missing", R"({"version": 1, "tensors": [], "operators": []})", Errc::kSchema,
       "/format"},
      {"format wrong",
       R"({"format": "recsearch.plan", "version": 1, "tensors": [], "operators": []})",
       Errc::kSchema, "/format"},
      {"version missing", R"({"format": "recsearch.graph", "tensors": [], "operators": []})",
       Errc::kSchema, "/version"},
      {"version 2",
       R"({"format": "recsearch.graph", "version": 2, "tensors": [], "operators": []})",
       Errc::kSchema, "/version"},
      {"version string",
       R"({"format": "recsearch.graph", "version": "1", "tensors": [], "operators": []})",
       Errc::kSchema, "/version"},
      {"name not a string",
       R"({"format": "recsearch.graph", "version": 1, "name": 3, "tensors": [], "operators": []})",
       Errc::kSchema, "/name"},
      {"tensors missing", R"({"format": "recsearch.graph", "version": 1, "operators": []})",
       Errc::kSchema, "/tensors"},
      {"operators missing", R"({"format": "recsearch.graph", "version": 1, "tensors": []})",
       Errc::kSchema, "/operators"},
      {"tensors not an array", graph_text("{}", "[]"), Errc::kSchema, "/tensors"},
      {"operators not an array", graph_text("[]", "null"), Errc::kSchema, "/operators"},
      {"tensor not an object", graph_text("[3]", "[]"), Errc::kSchema, "/tensors/0"},
      {"tensor name missing", graph_text(R"([{"shape": [1]}])", "[]"), Errc::kSchema,
       "/tensors/0/name"},
      {"tensor name empty", graph_text(R"([{"name": "", "shape": [1]}])", "[]"), Errc::kSchema,
       "/tensors/0/name"},
      {"tensor name a number", graph_text(R"([{"name": 7, "shape": [1]}])", "[]"), Errc::kSchema,
       "/tensors/0/name"},
      {"shape missing", graph_text(R"([{"name": "x"}])", "[]"), Errc::kSchema, "/tensors/0/shape"},
      {"shape a string", graph_text(R"([{"name": "x", "shape": "4x8"}])", "[]"), Errc::kSchema,
       "/tensors/0/shape"},
      {"zero dim", graph_text(R"([{"name": "x", "shape": [4, 0]}])", "[]"), Errc::kShape,
       "/tensors/0/shape/1"},
      {"negative dim", graph_text(R"([{"name": "x", "shape": [-4]}])", "[]"), Errc::kShape,
       "/tensors/0/shape/0"},
      {"fractional dim", graph_text(R"([{"name": "x", "shape": [4, 2.5]}])", "[]"), Errc::kSchema,
       "/tensors/0/shape/1"},
      {"dim a string", graph_text(R"([{"name": "x", "shape": ["4"]}])", "[]"), Errc::kSchema,
       "/tensors/0/shape/0"},
      {"dim above int64", graph_text(R"([{"name": "x", "shape": [9223372036854775808]}])", "[]"),
       Errc::kSchema, "/tensors/0/shape/0"},
      {"dim far above int64", graph_text(R"([{"name": "x", "shape": [1e30]}])", "[]"),
       Errc::kSchema, "/tensors/0/shape/0"},
      {"element count overflow",
       graph_text(R"([{"name": "x", "shape": [4294967296, 4294967296]}])", "[]"), Errc::kShape,
       "/tensors/0/shape"},
      {"unknown dtype", graph_text(R"([{"name": "x", "shape": [1], "dtype": "f128"}])", "[]"),
       Errc::kSchema, "/tensors/0/dtype"},
      {"dtype not a string", graph_text(R"([{"name": "x", "shape": [1], "dtype": 32}])", "[]"),
       Errc::kSchema, "/tensors/0/dtype"},
      {"unknown kind", graph_text(R"([{"name": "x", "shape": [1], "kind": "weight"}])", "[]"),
       Errc::kSchema, "/tensors/0/kind"},
      {"duplicate tensor",
       graph_text(R"([{"name": "x", "shape": [1]}, {"name": "x", "shape": [2]}])", "[]"),
       Errc::kDuplicate, "/tensors/1/name"},
      {"operator not an object", graph_text(kXW, "[[]]"), Errc::kSchema, "/operators/0"},
      {"operator name missing",
       graph_text(kXW, R"([{"type": "MatMul", "inputs": [], "outputs": []}])"), Errc::kSchema,
       "/operators/0/name"},
      {"operator type missing", graph_text(kXW, R"([{"name": "mm", "inputs": [], "outputs": []}])"),
       Errc::kSchema, "/operators/0/type"},
      {"operator type empty",
       graph_text(kXW, R"([{"name": "mm", "type": "", "inputs": [], "outputs": []}])"),
       Errc::kSchema, "/operators/0/type"},
      {"inputs missing", graph_text(kXW, R"([{"name": "mm", "type": "MatMul", "outputs": []}])"),
       Errc::kSchema, "/operators/0/inputs"},
      {"inputs not an array",
       graph_text(kXW, R"([{"name": "mm", "type": "MatMul", "inputs": "x", "outputs": []}])"),
       Errc::kSchema, "/operators/0/inputs"},
      {"input not a string",
       graph_text(kXW, R"([{"name": "mm", "type": "MatMul", "inputs": ["x", 1], "outputs": []}])"),
       Errc::kSchema, "/operators/0/inputs/1"},
      {"unknown input",
       graph_text(kXW,
                  R"([{"name": "mm", "type": "MatMul", "inputs": ["x", "w9"], "outputs": ["h"]}])"),
       Errc::kUnknownName, "/operators/0/inputs/1"},
      {"unknown output",
       graph_text(
           kXW,
           R"([{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h", "z"]}])"),
       Errc::kUnknownName, "/operators/0/outputs/1"},
      {"duplicate operator",
       graph_text(
           R"([{"name": "x", "shape": [1]}, {"name": "a", "shape": [1]}, {"name": "b", "shape": [1]}])",
           R"([{"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["a"]},
                      {"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["b"]}])"),
       Errc::kDuplicate, "/operators/1/name"},
      {"tensor produced twice",
       graph_text(R"([{"name": "x", "shape": [1]}, {"name": "a", "shape": [1]}])",
                  R"([{"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["a"]},
                      {"name": "s", "type": "ReLU", "inputs": ["x"], "outputs": ["a"]}])"),
       Errc::kDuplicate, "/operators/1/outputs/0"},
      {"output listed twice",
       graph_text(R"([{"name": "x", "shape": [1]}, {"name": "a", "shape": [1]}])",
                  R"([{"name": "r", "type": "Split", "inputs": ["x"], "outputs": ["a", "a"]}])"),
       Errc::kDuplicate, "/operators/0/outputs/1"},
      {"parameter produced",
       graph_text(
           R"([{"name": "x", "shape": [1]}, {"name": "p", "shape": [1], "kind": "parameter"}])",
           R"([{"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["p"]}])"),
       Errc::kSchema, "/operators/0/outputs/0"},
      {"constant produced",
       graph_text(
           R"([{"name": "x", "shape": [1]}, {"name": "c", "shape": [1], "kind": "constant"}])",
           R"([{"name": "r", "type": "ReLU", "inputs": ["x"], "outputs": ["c"]}])"),
       Errc::kSchema, "/operators/0/outputs/0"},
      {"attrs not an object", graph_text(kXW, one_op(R"(, "attrs": [1])")), Errc::kSchema,
       "/operators/0/attrs"},
      {"nested attr object", graph_text(kXW, one_op(R"(, "attrs": {"a": 1, "nested": {"b": 1}})")),
       Errc::kSchema, "/operators/0/attrs/nested"},
      {"attr key escaped in the path", graph_text(kXW, one_op(R"(, "attrs": {"a/b~c": {}})")),
       Errc::kSchema, "/operators/0/attrs/a~1b~0c"},
      {"null attr", graph_text(kXW, one_op(R"(, "attrs": {"x": null})")), Errc::kSchema,
       "/operators/0/attrs/x"},
      {"mixed list attr", graph_text(kXW, one_op(R"(, "attrs": {"x": [1, "a"]})")), Errc::kSchema,
       "/operators/0/attrs/x"},
      {"nested list attr", graph_text(kXW, one_op(R"(, "attrs": {"x": [1, [2]]})")), Errc::kSchema,
       "/operators/0/attrs/x/1"},
      {"bool in a list attr", graph_text(kXW, one_op(R"(, "attrs": {"x": [true]})")), Errc::kSchema,
       "/operators/0/attrs/x/0"},
      {"attr above int64", graph_text(kXW, one_op(R"(, "attrs": {"x": 18446744073709551615})")),
       Errc::kSchema, "/operators/0/attrs/x"},
      {"list attr above int64",
       graph_text(kXW, one_op(R"(, "attrs": {"x": [1, 9223372036854775808]})")), Errc::kSchema,
       "/operators/0/attrs/x/1"},
      {"einsum not a string", graph_text(kXW, one_op(R"(, "einsum": 3)")), Errc::kSchema,
       "/operators/0/einsum"},
      {"einsum contradicts attrs",
       graph_text(kXW, one_op(R"(, "einsum": "ik,kj->ij", "attrs": {"einsum": "ik,kj->ji"})")),
       Errc::kSchema, "/operators/0/einsum"},
      {"strategy not an array", graph_text(kXW, one_op(R"(, "strategy": 2)")), Errc::kSchema,
       "/operators/0/strategy"},
      {"strategy row not an array", graph_text(kXW, one_op(R"(, "strategy": [2, 1])")),
       Errc::kSchema, "/operators/0/strategy/0"},
      {"strategy zero", graph_text(kXW, one_op(R"(, "strategy": [[2, 1], [1, 0]])")), Errc::kSchema,
       "/operators/0/strategy/1/1"},
      {"strategy fraction", graph_text(kXW, one_op(R"(, "strategy": [[1.5, 1], [1, 1]])")),
       Errc::kSchema, "/operators/0/strategy/0/0"},
      {"allowed not an array", graph_text(kXW, one_op(R"(, "allowed": "i")")), Errc::kSchema,
       "/operators/0/allowed"},
      {"allowed element not a string", graph_text(kXW, one_op(R"(, "allowed": ["i", 1])")),
       Errc::kSchema, "/operators/0/allowed/1"},
      {"recompute not a string", graph_text(kXW, one_op(R"(, "recompute": 1)")), Errc::kSchema,
       "/operators/0/recompute"},
      {"recompute unknown", graph_text(kXW, one_op(R"(, "recompute": "most")")), Errc::kSchema,
       "/operators/0/recompute"},
      {"training not an object", graph_text(kXW, one_op(""), R"(, "training": "full")"),
       Errc::kSchema, "/training"},
      {"training recompute unknown",
       graph_text(kXW, one_op(""), R"(, "training": {"recompute": "half"})"), Errc::kSchema,
       "/training/recompute"},
      {"training ZeRO stage 4", graph_text(kXW, one_op(""), R"(, "training": {"zero_stage": 4})"),
       Errc::kSchema, "/training/zero_stage"},
      {"training microbatches zero",
       graph_text(kXW, one_op(""), R"(, "training": {"microbatches": 0})"), Errc::kSchema,
       "/training/microbatches"},
      {"training unknown setting", graph_text(kXW, one_op(""), R"(, "training": {"zero": 1})"),
       Errc::kSchema, "/training/zero"},
      {"cost not an object", graph_text(kXW, one_op(""), R"(, "cost": [])"), Errc::kSchema,
       "/cost"},
      {"cost count_latency not a bool",
       graph_text(kXW, one_op(""), R"(, "cost": {"count_latency": 1})"), Errc::kSchema,
       "/cost/count_latency"},
      {"cost efficiency zero",
       graph_text(kXW, one_op(""), R"(, "cost": {"compute_efficiency": 0})"), Errc::kSchema,
       "/cost/compute_efficiency"},
      {"cost efficiency above one",
       graph_text(kXW, one_op(""), R"(, "cost": {"compute_efficiency": 1.5})"), Errc::kSchema,
       "/cost/compute_efficiency"},
      {"cost negative", graph_text(kXW, one_op(""), R"(, "cost": {"backward_flops_factor": -1})"),
       Errc::kSchema, "/cost/backward_flops_factor"},
      {"cost number a string",
       graph_text(kXW, one_op(""), R"(, "cost": {"gradient_bytes_factor": "1"})"), Errc::kSchema,
       "/cost/gradient_bytes_factor"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CostParams p;
    expect_error([&] { (void)io::parse_graph(c.text, kFile, &p); }, c.code, c.path, kFile);
  }
}

TEST_CASE("error details say what was expected") {
  CHECK(
      expect_error(
          [] { (void)io::parse_graph(graph_text(R"([{"name": "x", "shape": 3}])", "[]"), kFile); },
          Errc::kSchema, "/tensors/0/shape", kFile)
          .find("expected an array of integers") != std::string::npos);
  CHECK(expect_error(
            [] {
              (void)io::parse_graph(graph_text(R"([{"name": "x", "shape": [0]}])", "[]"), kFile);
            },
            Errc::kShape, "/tensors/0/shape/0", kFile)
            .find("dimension must be positive") != std::string::npos);
  CHECK(expect_error(
            [] {
              (void)io::parse_graph(
                  graph_text(kXW, one_op("").replace(one_op("").find("\"w\""), 3, "\"w9\"")),
                  kFile);
            },
            Errc::kUnknownName, "/operators/0/inputs/1", kFile)
            .find("'w9'") != std::string::npos);
}

TEST_CASE("a cycle is an error of the file") {
  const std::string text =
      graph_text(R"([{"name": "a", "shape": [1]}, {"name": "b", "shape": [1]}])",
                 R"([{"name": "f", "type": "ReLU", "inputs": ["a"], "outputs": ["b"]},
          {"name": "g", "type": "ReLU", "inputs": ["b"], "outputs": ["a"]}])");
  try {
    (void)io::parse_graph(text, kFile);
    FAIL("a cycle was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kCycle);
    CHECK(e.file() == kFile);
    CHECK(e.json_path().rfind("/operators/", 0) == 0);
  }
}

TEST_CASE("malformed JSON is kParse with a byte offset") {
  const std::string detail = expect_error(
      [] { (void)io::parse_graph(R"({"format": "recsearch.graph", "version": 1,, })", kFile); },
      Errc::kParse, "", kFile);
  CHECK(detail.find("byte 43") != std::string::npos);  // 0-based: the second comma
  expect_error([] { (void)io::parse_graph("", kFile); }, Errc::kParse, "", kFile);
  expect_error([] { (void)io::parse_graph("{} trailing", kFile); }, Errc::kParse, "", kFile);
  expect_error(
      [] {
        (void)io::parse_graph(graph_text(R"([{"name": "x", "shape": [1e999]}])", "[]"), kFile);
      },
      Errc::kParse, "", kFile);
  expect_error(
      [] { (void)io::parse_graph(graph_text(R"([{"name": "\xff", "shape": [1]}])", "[]"), kFile); },
      Errc::kParse, "", kFile);
  // Deep nesting is refused before it can exhaust the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error([&] { (void)io::parse_graph(deep, kFile); }, Errc::kParse, "", kFile);
  const std::string deep_attr = graph_text(
      kXW, one_op(R"(, "attrs": {"x": )" + std::string(300, '[') + std::string(300, ']') + "}"));
  expect_error([&] { (void)io::parse_graph(deep_attr, kFile); }, Errc::kParse, "", kFile);
  // Brackets inside strings do not count as nesting.
  const std::string brackets =
      graph_text(R"([{"name": ")" + std::string(1000, '[') + R"(\"", "shape": [1]}])", "[]");
  CHECK(io::parse_graph(brackets, kFile).num_tensors() == 1);
}

TEST_CASE("every truncation of a valid file is an Error, never a crash") {
  for (std::size_t n = 0; n < kTiny.size(); ++n) {
    CAPTURE(n);
    try {
      (void)io::parse_graph(std::string_view(kTiny).substr(0, n), kFile);
      FAIL("a truncated file was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::kParse);
      CHECK(e.file() == kFile);
    }
  }
  CHECK(io::parse_graph(kTiny, kFile).num_operators() == 2);
}

TEST_CASE("every single-byte corruption either parses or is an Error") {
  const char replacements[] = {'"', '}', ']', '{', '[', ',', ':', '0', '-', 'x', '\\', '\0', ' '};
  for (std::size_t i = 0; i < kTiny.size(); ++i) {
    for (const char r : replacements) {
      std::string text = kTiny;
      text[i] = r;
      try {
        (void)io::parse_graph(text, kFile);
      } catch (const Error& e) {
        CHECK(e.file() == kFile);
      }
    }
  }
  // Random splices of valid pieces: structurally valid JSON, semantically anything.
  std::mt19937 rng(12345);
  for (int round = 0; round < 2000; ++round) {
    std::string text = kTiny;
    const std::size_t a = rng() % text.size();
    const std::size_t b = rng() % text.size();
    const std::size_t len = rng() % 16;
    text.insert(a, kTiny.substr(b, len));
    try {
      (void)io::parse_graph(text, kFile);
    } catch (const Error& e) {
      CHECK(e.file() == kFile);
    }
  }
}

TEST_CASE("read_text_file and read_graph_file") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("recsearch_io_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "g.json").string();
  {
    std::ofstream f(path);
    f << kTiny;
  }
  CHECK(io::read_text_file(path) == kTiny);
  CHECK(io::read_graph_file(path).name() == "tiny");

  const std::string missing = (dir / "missing.json").string();
  CHECK(expect_error([&] { (void)io::read_text_file(missing); }, Errc::kIo, "", missing)
            .find("cannot open: No such file or directory") != std::string::npos);
  expect_error([&] { (void)io::read_graph_file(missing); }, Errc::kIo, "", missing);
  // A directory opens but cannot be read.
  expect_error([&] { (void)io::read_text_file(dir.string()); }, Errc::kIo, "", dir.string());

  // Errors of a file read from disk name that file.
  const std::string bad = (dir / "bad.json").string();
  {
    std::ofstream f(bad);
    f << graph_text(R"([{"name": "x", "shape": [0]}])", "[]");
  }
  expect_error([&] { (void)io::read_graph_file(bad); }, Errc::kShape, "/tensors/0/shape/0", bad);
  std::filesystem::remove_all(dir);
}

TEST_CASE("unknown keys are warnings with their path and a suggestion; strict makes them errors") {
  const std::string text = graph_text(
      R"([{"name": "x", "shape": [4, 8], "dytpe": "f16"}, {"name": "w", "shape": [8, 16], "kind": "parameter"},
          {"name": "h", "shape": [4, 16]}, {"name": "y", "shape": [4, 16]}])",
      R"([{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"], "attr": {"transpose_b": false}},
          {"name": "r", "type": "ReLU", "inputs": ["h"], "outputs": ["y"], "attr": {}, "strategey": [[2, 1]]}])",
      R"(, "zzz_notes": [1, {"a": null}])");
  std::vector<std::string> warnings;
  io::GraphReadOptions options;
  options.warnings = &warnings;
  const ir::Graph g = io::parse_graph(text, kFile, nullptr, options);
  CHECK(g.num_operators() == 2);
  REQUIRE(warnings.size() == 4);
  const auto has = [&](const std::string& needle) {
    for (const std::string& w : warnings) {
      if (w.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  CHECK(has(
      R"(unknown key "attr" in an operator ignored, at /operators/0/attr and 1 more (did you mean "attrs"?))"));
  CHECK(has(
      R"(unknown key "strategey" in an operator ignored, at /operators/1/strategey (did you mean "strategy"?))"));
  CHECK(has(
      R"(unknown key "dytpe" in a tensor ignored, at /tensors/0/dytpe (did you mean "dtype"?))"));
  CHECK(has(R"(unknown key "zzz_notes" in the graph ignored, at /zzz_notes)"));
  CHECK(!has("zzz_notes\" in the graph ignored, at /zzz_notes (did you mean"));

  // The same warnings when the file is read by the streaming parser (here:
  // "tensors" before "format", a layout the fast parser leaves to it).
  const std::string tensors_etc = text.substr(text.find(R"("tensors": )"));
  const std::string head = R"("format": "recsearch.graph", "version": 1, "name": "g")";
  const std::string late_head =
      "{" + tensors_etc.substr(0, tensors_etc.size() - 1) + ", " + head + "}";
  std::vector<std::string> warnings2;
  options.warnings = &warnings2;
  const ir::Graph g2 = io::parse_graph(late_head, kFile, nullptr, options);
  check_same_graph(g, g2);
  CHECK(warnings2 == warnings);

  // Strict: the first unknown key met is the error.
  io::GraphReadOptions strict;
  strict.strict = true;
  CHECK(expect_error([&] { (void)io::parse_graph(text, kFile, nullptr, strict); }, Errc::kSchema,
                     "/tensors/0/dytpe", kFile)
            .find(R"(did you mean "dtype")") != std::string::npos);
  // (Here the records wait for "format", so the top-level key comes first.)
  CHECK(expect_error([&] { (void)io::parse_graph(late_head, kFile, nullptr, strict); },
                     Errc::kSchema, "/zzz_notes", kFile)
            .find("unknown key") != std::string::npos);
}

TEST_CASE("the fast reader and the streaming reader build the same graph") {
  // kTiny read as it is (fast), and with changes that only the streaming
  // reader handles: an escaped name, fields out of order. A duplicate key,
  // which the fast reader also leaves to it, is an error there.
  const ir::Graph fast = io::parse_graph(kTiny, kFile);
  std::string escaped = kTiny;
  escaped.replace(escaped.find(R"("name": "x")"), 11, R"("name": "\u0078")");
  escaped.replace(escaped.find(R"(["x", "w"])"), 10, R"(["\u0078", "w"])");
  check_same_graph(fast, io::parse_graph(escaped, kFile));
  std::string dup = kTiny;
  dup.replace(dup.find(R"({"name": "y", "shape": [4, 16]})"), 31,
              R"({"name": "y", "shape": [9], "shape": [4, 16]})");
  CHECK(expect_error([&] { (void)io::parse_graph(dup, kFile); }, Errc::kDuplicate, "/tensors/5",
                     kFile)
            .find("key 'shape' is given twice") != std::string::npos);
  CHECK(io::graph_to_json(io::parse_graph(escaped, kFile)) == io::graph_to_json(fast));
  // Numbers as nlohmann types them: 1.0 stays a double, -3 an integer.
  const ir::Operator& mm = fast.op(0);
  CHECK(std::holds_alternative<double>(*mm.attrs.find("one")));
  CHECK(std::get<std::int64_t>(*mm.attrs.find("n")) == -3);
  CHECK(std::get<std::vector<double>>(*mm.attrs.find("scales")) == std::vector<double>{1, 0.5});
  // A file and its text read alike.
  const auto dir =
      std::filesystem::temp_directory_path() / ("recsearch_io_fast_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "g.json").string();
  {
    std::ofstream f(path);
    f << kTiny;
  }
  check_same_graph(fast, io::read_graph_file(path));
  std::filesystem::remove_all(dir);
}

namespace {

// Both parsers on one text: whenever the fast one accepts it, the streaming
// one (which decides every error) must accept it too and build the same
// graph with the same warnings and cost settings.
// Returns whether the fast one accepted it.
bool check_parsers_agree(const std::string& text) {
  std::string padded;
  padded.reserve(text.size() + io::detail::simd_padding());
  padded.assign(text);
  ir::Graph fast;
  io::detail::UnknownKeys fast_keys(false, kFile);
  CostParams fast_cost;
  if (!io::detail::read_graph_fast(padded, padded.capacity(), kFile, fast, &fast_cost, fast_keys))
    return false;
  io::detail::UnknownKeys keys(false, kFile);
  CostParams cost;
  ir::Graph slow;
  try {
    slow = io::detail::parse_graph_streaming(text, kFile, &cost, keys);
  } catch (const Error& e) {
    const std::string why = std::string(e.what()) + "\n" + text;
    FAIL("the fast reader accepts what the streaming reader rejects: " << why);
    return true;
  }
  CHECK(io::graph_to_json(fast) == io::graph_to_json(slow));
  CHECK(fast_keys.warnings() == keys.warnings());
  CHECK(fast_cost.compute_efficiency == cost.compute_efficiency);
  CHECK(fast_cost.memory_budget_bytes == cost.memory_budget_bytes);
  return true;
}

}  // namespace

TEST_CASE("the fast reader never accepts what the streaming reader rejects") {
  // The sample graphs and the graph fuzz corpus (RECSEARCH_DATA is data/).
  std::vector<std::string> texts = {kTiny};
  const char* data = std::getenv("RECSEARCH_DATA");
  REQUIRE(data != nullptr);
  const std::filesystem::path root(data);
  for (const char* f : {"graphs/ffn.json", "graphs/gpt2_block.json", "graphs/resnet50.json"})
    texts.push_back(io::read_text_file((root / f).string()));
  for (const auto& e : std::filesystem::directory_iterator(root / ".." / "tests/fuzz/corpus/graph"))
    texts.push_back(io::read_text_file(e.path().string()));
  // The valid files in their usual layout are the fast reader's own.
  for (std::size_t i = 0; i < 4; ++i) CHECK(check_parsers_agree(texts[i]));
  // A separator missing, where simdjson ends an iteration quietly: the
  // streaming reader's (a parse error).
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{R"(", "shape")", R"(" "shape")"},
        {"],\n \"operators\"", "]\n \"operators\""}}) {
    std::string text = kTiny;
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    CHECK_FALSE(check_parsers_agree(text));
  }
  // A key given twice in a value the streaming reader builds (the cost
  // and training objects, an unknown key's object inside a record), where
  // reading the value's text with nlohmann keeps the last (fuzz_graph:
  // "gradient_bytes_factor" twice in "cost"): the streaming reader's (kDuplicate).
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{R"("zero_stage": 2,)",
                                            R"("zero_stage": 2, "zero_stage": 1,)"},
        {R"("comment": "ignored")", R"("comment": {"a": 1, "a": 2})"},
        {R"("description": "ignored",)",
         R"("description": "ignored", "cost": {"overlap": true, "overlap": false},)"}}) {
    std::string text = kTiny;
    REQUIRE(text.find(from) != std::string::npos);
    text.replace(text.find(from), from.size(), to);
    CHECK_FALSE(check_parsers_agree(text));
    io::detail::UnknownKeys keys(false, kFile);
    CostParams cost;
    CHECK_THROWS_AS((void)io::detail::parse_graph_streaming(text, kFile, &cost, keys), Error);
  }
  // The same past the keys compared in a list (simd::DistinctKeys): 40
  // distinct keys are read fast; the first one again at the end is not.
  {
    std::string many = "{";
    for (int i = 0; i < 40; ++i)
      many += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
    const std::string distinct = many + "\"last\": 0}";
    const std::string repeated = many + "\"k0\": 0}";
    for (const std::string* value : {&distinct, &repeated}) {
      std::string text = kTiny;
      const std::string from = R"("comment": "ignored")";
      text.replace(text.find(from), from.size(), "\"comment\": " + *value);
      CHECK(check_parsers_agree(text) == (value == &distinct));
    }
  }
  for (std::size_t i = 4; i < texts.size(); ++i) (void)check_parsers_agree(texts[i]);
  // Mutations of the small file: every byte replaced, and random splices.
  const char replacements[] = {'"',  '}', ']', '{', '[',  ',', ':', '0', '-',    'x',   '\\',
                               '\0', ' ', '.', 'e', '\t', '1', 'n', 't', '\x7f', '\xc3'};
  for (std::size_t i = 0; i < kTiny.size(); ++i) {
    for (const char r : replacements) {
      std::string text = kTiny;
      text[i] = r;
      (void)check_parsers_agree(text);
    }
  }
  std::mt19937 rng(2026);
  for (int round = 0; round < 5000; ++round) {
    std::string text = kTiny;
    const std::size_t a = rng() % text.size();
    const std::size_t b = rng() % text.size();
    text.insert(a, kTiny.substr(b, rng() % 24));
    (void)check_parsers_agree(text);
  }
}

TEST_CASE("the fast reader resolves tensor names in any order") {
  // The fast reader guesses a reference (the tensor after the last first
  // use, a 4096-entry table of recent names) before the graph's index: here
  // 10,000 tensors, more than that table holds, with shared prefixes, are
  // referenced out of their declaration order, again and again.
  constexpr int kTensors = 10000;
  std::mt19937 rng(16);
  std::vector<int> order(kTensors);
  for (int i = 0; i < kTensors; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::string text = R"({"format": "recsearch.graph", "version": 1, "name": "order", "tensors": [)";
  for (int i = 0; i < kTensors; ++i) {
    if (i > 0) text += ",\n";
    text += R"({"name": "layer.)" + std::to_string(i) + R"(.t", "shape": [4, 8]})";
  }
  text += R"(], "operators": [)";
  // Operator k writes tensor order[k] and reads three tensors written
  // earlier (or graph inputs: the first 100 of the shuffled order).
  for (int k = 100; k < kTensors; ++k) {
    if (k > 100) text += ",\n";
    const auto name = [&](int j) {
      return "\"layer." + std::to_string(order[static_cast<std::size_t>(j)]) + ".t\"";
    };
    text += R"({"name": "op)" + std::to_string(k) + R"(", "type": "Add", "inputs": [)" +
            name(static_cast<int>(rng() % static_cast<unsigned>(k))) + ", " + name(k - 1) + ", " +
            name(static_cast<int>(rng() % 100)) + R"(], "outputs": [)" + name(k) + "]}";
  }
  text += "]}";
  CHECK(check_parsers_agree(text));
  const ir::Graph g = io::parse_graph(text, kFile);
  REQUIRE(g.num_operators() == kTensors - 100);
  for (ir::OpId o = 0; o < g.num_operators(); o += 97) {
    const std::string out = "layer." + std::to_string(order[o + 100]) + ".t";
    CHECK(g.tensor(g.op(o).outputs.at(0)).name == out);
    CHECK(g.tensor(g.op(o).inputs.at(1)).name == (o == 0
                                                      ? "layer." + std::to_string(order[99]) + ".t"
                                                      : g.tensor(g.op(o - 1).outputs.at(0)).name));
  }
}

TEST_CASE("a graph file read from a mapping reads past its end only into zeros") {
  // read_graph_file maps a regular file and puts simdjson's padding on the
  // pages after it: a file that ends exactly on a page boundary (no spare
  // bytes on its last page) reads as its text does.
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::string text = kTiny;
  const std::size_t size = (text.size() / page + 1) * page;
  text.insert(text.size() - 1, size - text.size(), ' ');  // spaces before the last '}'
  REQUIRE(text.size() % page == 0);
  const auto dir =
      std::filesystem::temp_directory_path() / ("recsearch_io_map_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "g.json").string();
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  check_same_graph(io::parse_graph(kTiny, kFile), io::read_graph_file(path));
  // An empty file and a directory fail as before (they are read, not mapped).
  { std::ofstream f(dir / "empty.json"); }
  CHECK_THROWS_AS((void)io::read_graph_file((dir / "empty.json").string()), Error);
  CHECK_THROWS_AS((void)io::read_graph_file(dir.string()), Error);
  std::filesystem::remove_all(dir);
}
