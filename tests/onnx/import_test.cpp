// SPDX-License-Identifier: Apache-2.0
// ONNX import: the models tools/onnx/make_test_models.py writes (several
// opsets; expected shapes worked out by hand from the layer sizes), broken
// and corrupt models (errors must name the node or the file), and every
// PyTorch-exported model that Debian's libonnx-testdata ships, whose
// reference outputs (test_data_set_0/output_*.pb, computed by PyTorch) give
// the output shapes independently of ONNX's shape inference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <onnx/onnx_pb.h>  // TensorProto / ModelProto: reads the reference outputs

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/search/search.hpp"

namespace fs = std::filesystem;
using namespace recsearch;

namespace {

std::string models_dir() {
  const char* d = std::getenv("RECSEARCH_ONNX_MODELS");
  return d ? d : "tests/onnx/models";
}
std::string model(const std::string& name) { return models_dir() + "/" + name + ".onnx"; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const ir::Tensor& tensor(const ir::Graph& g, const std::string& name) {
  const auto id = g.find_tensor(name);
  REQUIRE_MESSAGE(id.has_value(), "no tensor " << name);
  return g.tensor(*id);
}
const ir::Operator& op(const ir::Graph& g, const std::string& name) {
  const auto id = g.find_operator(name);
  REQUIRE_MESSAGE(id.has_value(), "no operator " << name);
  return g.op(*id);
}
std::vector<std::string> names_of(const ir::Graph& g, const std::vector<ir::TensorId>& ids) {
  std::vector<std::string> out;
  for (const auto t : ids) out.push_back(g.tensor(t).name);
  return out;
}

Error import_error(const std::string& path, const io::OnnxImportOptions& o = {}) {
  try {
    (void)io::read_onnx_file(path, o);
  } catch (const Error& e) {
    return e;
  }
  FAIL("import of " << path << " did not fail");
  return Error(Errc::kInternal, "unreachable");
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("onnx: available in this build") { CHECK(io::onnx_import_available()); }

TEST_CASE(
    "onnx: MLP (opset 13): Gemm split into MatMul + Add, symbolic batch bound, external weight") {
  io::OnnxImportOptions o;
  o.dims["N"] = 32;
  const io::OnnxImport r = io::read_onnx_file(model("mlp_opset13"), o);
  const ir::Graph& g = r.graph;
  CHECK(r.opset == 13);
  CHECK(r.warnings.empty());
  CHECK(g.name() == "mlp");
  CHECK(g.num_operators() == 6);  // 2 x (MatMul + Add), ReLU, Softmax
  CHECK(tensor(g, "x").shape == ir::Shape{32, 256});
  CHECK(tensor(g, "x").kind == ir::TensorKind::Input);
  CHECK(tensor(g, "w1").shape == ir::Shape{256, 128});
  CHECK(tensor(g, "w1").kind == ir::TensorKind::Parameter);
  // w2's values live in a file that does not exist: only its shape is needed.
  CHECK(tensor(g, "w2").shape == ir::Shape{10, 128});
  CHECK(tensor(g, "w2").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "h1").shape == ir::Shape{32, 128});
  CHECK(tensor(g, "h2/matmul").shape == ir::Shape{32, 10});
  CHECK(tensor(g, "y").shape == ir::Shape{32, 10});
  const ir::Operator& fc2 = op(g, "fc2");
  CHECK(fc2.kind == ir::OpKind::MatMul);
  CHECK(fc2.attrs.get_bool("transpose_b", false));
  CHECK_FALSE(fc2.attrs.get_bool("transpose_a", true));
  const ir::Operator& bias = op(g, "fc2/bias");
  CHECK(bias.kind == ir::OpKind::Add);
  CHECK(names_of(g, bias.inputs) == std::vector<std::string>{"h2/matmul", "b2"});
  CHECK(op(g, "relu1").kind == ir::OpKind::ReLU);
  CHECK(op(g, "softmax").kind == ir::OpKind::Softmax);
  CHECK(op(g, "softmax").attrs.get_int("axis", 0) == -1);
  // w1's 256 x 128 floats were skipped, not read; b1 and b2 are small enough
  // to keep; w2 has no payload in the file at all.
  CHECK(r.skipped_weight_bytes == 256 * 128 * 4);
  // Same graph from bytes.
  const io::OnnxImport again = io::parse_onnx(slurp(model("mlp_opset13")), "mlp", o);
  CHECK(io::graph_to_json(again.graph) == io::graph_to_json(g));
}

TEST_CASE("onnx: an unbound symbolic dim names the input, the dim and the fix") {
  const Error e = import_error(model("mlp_opset13"));
  CHECK(e.code() == Errc::kShape);
  CHECK(e.file() == model("mlp_opset13"));
  CHECK(e.json_path() == "/graph/input/0/type/tensor_type/shape/dim/0");
  CHECK(contains(e.detail(), "'x'"));
  CHECK(contains(e.detail(), "'N'"));
  CHECK(contains(e.detail(), "--dim N="));
}

TEST_CASE(
    "onnx: transformer block (opset 17): attention as MatMul/Softmax, reshapes from constants") {
  const io::OnnxImport r = io::read_onnx_file(model("transformer_block_opset17"));
  const ir::Graph& g = r.graph;
  CHECK(r.opset == 17);
  CHECK(r.warnings.empty());
  CHECK(g.num_operators() == 24);
  // batch 2, seq 16, hidden 64, 4 heads of 16.
  CHECK(tensor(g, "q1").shape == ir::Shape{2, 16, 4, 16});
  CHECK(tensor(g, "q").shape == ir::Shape{2, 4, 16, 16});
  CHECK(tensor(g, "kt").shape == ir::Shape{2, 4, 16, 16});
  CHECK(tensor(g, "scores").shape == ir::Shape{2, 4, 16, 16});
  CHECK(tensor(g, "ctx").shape == ir::Shape{2, 16, 64});
  CHECK(tensor(g, "up").shape == ir::Shape{2, 16, 256});
  CHECK(tensor(g, "y").shape == ir::Shape{2, 16, 64});
  CHECK(tensor(g, "heads_shape").kind == ir::TensorKind::Constant);
  CHECK(tensor(g, "heads_shape").dtype == ir::DType::I64);
  CHECK(op(g, "ln1").kind == ir::OpKind::LayerNorm);
  CHECK(op(g, "k_t").attrs.get_ints("perm") == std::vector<std::int64_t>{0, 2, 3, 1});
  CHECK(op(g, "qk").kind == ir::OpKind::MatMul);
  CHECK(op(g, "q_split").kind == ir::OpKind::Reshape);
  // Parameters: 4 projections 64x64, FFN 64x256 + 256 + 256x64, 2 LayerNorms of 2x64, the scale.
  double params = 0;
  for (const auto& t : g.tensors()) {
    if (t.kind == ir::TensorKind::Parameter) params += ir::num_elements(t.shape);
  }
  CHECK(params == 4 * 64 * 64 + 64 * 256 + 256 + 256 * 64 + 4 * 64 + 1);
  // The graph is searchable and the plan valid.
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = Cluster::mesh({2, 4});
  const search::SearchResult res = search::run(g, spaces, c, {});
  CHECK(res.eval.summary.step_time_s > 0);
}

TEST_CASE("onnx: convnet (opset 11): auto_pad, groups, batch-norm statistics, pooling strides") {
  const io::OnnxImport r = io::read_onnx_file(model("convnet_opset11"));
  const ir::Graph& g = r.graph;
  CHECK(r.warnings.empty());
  CHECK(g.num_operators() == 11);  // 10 nodes, the Gemm with bias as two
  const ir::Operator& c2 = op(g, "conv2_grouped");
  CHECK(c2.kind == ir::OpKind::Conv2D);
  CHECK(c2.attrs.get_int("group", 1) == 4);
  // SAME_UPPER, 3x3, stride 1: one row and column on each side.
  CHECK(c2.attrs.get_ints("pads") == std::vector<std::int64_t>{1, 1, 1, 1});
  CHECK(tensor(g, "c1").shape == ir::Shape{8, 16, 32, 32});
  CHECK(tensor(g, "p1").shape == ir::Shape{8, 16, 16, 16});
  CHECK(tensor(g, "c2").shape == ir::Shape{8, 32, 16, 16});
  CHECK(tensor(g, "p2").shape == ir::Shape{8, 32, 8, 8});  // (16 + 2 - 3) / 2 + 1
  CHECK(tensor(g, "g").shape == ir::Shape{8, 32, 1, 1});
  CHECK(tensor(g, "f").shape == ir::Shape{8, 32});
  CHECK(tensor(g, "logits").shape == ir::Shape{8, 10});
  CHECK(op(g, "bn1").kind == ir::OpKind::BatchNorm);
  CHECK(tensor(g, "bn1_s").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "bn1_m").kind == ir::TensorKind::Constant);
  CHECK(tensor(g, "bn1_v").kind == ir::TensorKind::Constant);
  CHECK(op(g, "pool1").kind == ir::OpKind::MaxPool);
  CHECK(op(g, "pool2").kind == ir::OpKind::AvgPool);
  CHECK(op(g, "gap").kind == ir::OpKind::GlobalAvgPool);
  CHECK(op(g, "flatten").kind == ir::OpKind::Flatten);
}

TEST_CASE("onnx: shape computations fold, axes given as inputs, unsupported nodes warned") {
  io::OnnxImportOptions o;
  o.dims = {{"batch", 4}, {"seq", 12}};
  const io::OnnxImport r = io::read_onnx_file(model("shapes_opset13"), o);
  const ir::Graph& g = r.graph;
  CHECK(r.folded_nodes == 4);  // Shape, Gather, Unsqueeze, Concat
  CHECK_FALSE(g.find_operator("shape").has_value());
  CHECK(tensor(g, "flat_shape").kind == ir::TensorKind::Constant);
  CHECK(tensor(g, "flat").shape == ir::Shape{4, 12 * 32});
  CHECK(tensor(g, "emb").shape == ir::Shape{4, 12, 32});
  CHECK(op(g, "embed").kind == ir::OpKind::Gather);
  CHECK(tensor(g, "tokens").dtype == ir::DType::I64);
  CHECK(op(g, "split").attrs.get_ints("split") == std::vector<std::int64_t>{16, 16});
  CHECK(tensor(g, "sliced").shape == ir::Shape{4, 12, 8});
  CHECK(op(g, "unsqueeze").attrs.get_ints("axes") == std::vector<std::int64_t>{0});
  CHECK(op(g, "reduce_seq").attrs.get_ints("axes") == std::vector<std::int64_t>{1});
  CHECK(tensor(g, "summed").shape == ir::Shape{4, 8});
  CHECK(tensor(g, "summed16").dtype == ir::DType::F16);
  CHECK(op(g, "to_half").attrs.get_string("to", "") == "f16");
  // Erf has no kind, but is elementwise: an einsum lets the search cut it.
  CHECK(op(g, "erf").kind == ir::OpKind::Custom);
  CHECK(op(g, "erf").attrs.get_string("einsum", "") == "...->...");
  REQUIRE(r.warnings.size() == 2);
  CHECK(contains(r.warnings[0], "'topk' (TopK)"));
  CHECK(contains(r.warnings[0], "/graph/node/15"));
  CHECK(contains(r.warnings[1], "'conv1d' (Conv)"));
  CHECK(tensor(g, "conv1d_out").shape == ir::Shape{4, 6, 98});
  const auto spaces = algebra::build_op_spaces(g);
  CHECK(spaces[*g.find_operator("topk")].opaque);
  CHECK_FALSE(spaces[*g.find_operator("erf")].opaque);
}

TEST_CASE("onnx: opset 9 semantics: flattening Softmax is not the single-axis kind") {
  const io::OnnxImport r = io::read_onnx_file(model("legacy_opset9"));
  const ir::Graph& g = r.graph;
  CHECK(r.opset == 9);
  REQUIRE(r.warnings.size() == 1);
  CHECK(contains(r.warnings[0], "softmax_flat"));
  CHECK(op(g, "softmax_flat").type == "onnx.Softmax");
  CHECK(op(g, "softmax_flat").kind == ir::OpKind::Custom);
  CHECK(op(g, "squeeze").attrs.get_ints("axes") == std::vector<std::int64_t>{0});
  CHECK(op(g, "mean").kind == ir::OpKind::ReduceMean);
  CHECK(tensor(g, "z").shape == ir::Shape{4, 6, 1});
}

TEST_CASE("onnx: broken models name the node and the problem") {
  SUBCASE("channels contradict") {
    const Error e = import_error(model("bad_conv"));
    CHECK(e.code() == Errc::kShape);
    CHECK(e.json_path() == "/graph/node/1");
    CHECK(contains(e.detail(), "'conv_bad' (Conv)"));
    CHECK(contains(e.detail(), "channels"));
    CHECK(exit_code(e.code()) == 1);
  }
  SUBCASE("dangling input") {
    const Error e = import_error(model("dangling_input"));
    CHECK(e.code() == Errc::kUnknownName);
    CHECK(e.json_path() == "/graph/node/0");
    CHECK(contains(e.detail(), "'add_ghost' (Add)"));
    CHECK(contains(e.detail(), "'ghost'"));
  }
}

TEST_CASE("onnx: corrupt bytes are a parse error naming the source, never a crash") {
  const std::string good = slurp(model("transformer_block_opset17"));
  REQUIRE(good.size() > 1000);
  for (const std::size_t cut :
       {std::size_t{1}, std::size_t{7}, std::size_t{100}, good.size() / 2, good.size() - 1}) {
    CAPTURE(cut);
    try {
      (void)io::parse_onnx(std::string_view(good).substr(0, cut), "cut.onnx");
      FAIL("a truncated model imported");
    } catch (const Error& e) {
      CHECK(exit_code(e.code()) == 1);
      CHECK(e.file() == "cut.onnx");
    }
  }
  // Flipped bytes: whatever they decode to, the result is an Error or a graph.
  std::string bad = good;
  for (std::size_t i = 13; i < bad.size(); i += 97) {
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    try {
      (void)io::parse_onnx(bad, "flipped.onnx");
    } catch (const Error& e) {
      CHECK(exit_code(e.code()) == 1);
    }
  }
  try {
    (void)io::parse_onnx("this is a text file, not a model\n", "text.onnx");
    FAIL("text imported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kParse);
    CHECK(contains(e.what(), "text.onnx"));
  }
  try {
    (void)io::parse_onnx("", "empty.onnx");
    FAIL("empty imported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kParse);
    CHECK(contains(e.detail(), "no graph"));
  }
  const Error missing = import_error(models_dir() + "/no_such_model.onnx");
  CHECK(missing.code() == Errc::kIo);
}

namespace {

std::vector<std::int64_t> reference_dims(const fs::path& pb) {
  onnx::TensorProto t;
  std::ifstream in(pb, std::ios::binary);
  REQUIRE_MESSAGE(t.ParseFromIstream(&in), "cannot read " << pb);
  return {t.dims().begin(), t.dims().end()};
}

}  // namespace

TEST_CASE(
    "onnx: every PyTorch-exported model of Debian's libonnx-testdata imports with the right output "
    "shapes") {
  const char* env = std::getenv("ONNX_TESTDATA");
  const fs::path root = env ? env : "/usr/share/libonnx-testdata/data";
  REQUIRE_MESSAGE(fs::is_directory(root / "pytorch-converted"),
                  root << " is missing: install libonnx-testdata (tools/install-deps.sh)");
  std::vector<fs::path> dirs;
  for (const char* sub : {"pytorch-converted", "pytorch-operator"}) {
    for (const auto& e : fs::directory_iterator(root / sub)) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  CHECK(dirs.size() >= 100);
  std::size_t outputs_checked = 0, replicated = 0;
  for (const fs::path& d : dirs) {
    CAPTURE(d);
    const fs::path m = d / "model.onnx";
    io::OnnxImport r;
    try {
      r = io::read_onnx_file(m.string());
    } catch (const Error& e) {
      FAIL_CHECK(e.what());
      continue;
    }
    replicated += r.warnings.size();
    onnx::ModelProto proto;
    {
      std::ifstream in(m, std::ios::binary);
      REQUIRE(proto.ParseFromIstream(&in));
    }
    for (int j = 0; j < proto.graph().output_size(); ++j) {
      const fs::path ref = d / "test_data_set_0" / ("output_" + std::to_string(j) + ".pb");
      if (!fs::exists(ref)) continue;
      const auto id = r.graph.find_tensor(proto.graph().output(j).name());
      REQUIRE(id.has_value());
      CHECK(r.graph.tensor(*id).shape == reference_dims(ref));
      ++outputs_checked;
    }
    // Searchable on 4 devices.
    const auto spaces = algebra::build_op_spaces(r.graph);
    const search::SearchResult res = search::run(r.graph, spaces, Cluster::flat(4), {});
    CHECK(std::isfinite(res.eval.summary.step_time_s));
  }
  MESSAGE(dirs.size() << " models, " << outputs_checked << " outputs checked, " << replicated
                      << " nodes imported as replicated");
  CHECK(outputs_checked >= dirs.size());
}

// ---- models built here, with the generated protobuf classes -------------

namespace {

onnx::ValueInfoProto value(const std::string& name, const std::vector<std::int64_t>& dims) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* tt = v.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (const auto d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return v;
}

onnx::TensorProto ints_tensor(const std::string& name, const std::vector<std::int64_t>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<std::int64_t>(v.size()));
  for (const auto x : v) t.add_int64_data(x);
  return t;
}

onnx::TensorProto float_tensor(const std::string& name, const std::vector<std::int64_t>& dims) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  std::int64_t n = 1;
  for (const auto d : dims) {
    t.add_dims(d);
    n *= d;
  }
  t.set_raw_data(std::string(static_cast<std::size_t>(n) * 4, '\0'));
  return t;
}

onnx::NodeProto node(const std::string& type, const std::string& name, std::vector<std::string> ins,
                     std::vector<std::string> outs) {
  onnx::NodeProto n;
  n.set_op_type(type);
  n.set_name(name);
  for (auto& i : ins) n.add_input(i);
  for (auto& o : outs) n.add_output(o);
  return n;
}

void int_attr(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void ints_attr(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (const auto x : v) a->add_ints(x);
}

std::string serialize(onnx::GraphProto g, int opset) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  *m.mutable_graph() = std::move(g);
  return m.SerializeAsString();
}

// x [4, 1, 6, 5] -> Squeeze(1) -> ReduceSum(axis 2, keep) -> Unsqueeze(0) ->
// Split(axis 1: 2 + 4) -> the first part. Axes are attributes before opset
// 13 and constant inputs from 13 on; the imported graphs must agree.
std::string axes_model(int opset) {
  const bool as_inputs = opset >= 13;
  onnx::GraphProto g;
  g.set_name("axes");
  *g.add_input() = value("x", {4, 1, 6, 5});
  *g.add_output() = value("y", {1, 4, 2, 1});
  auto sq = node("Squeeze", "squeeze", {"x"}, {"s"});
  auto rs = node("ReduceSum", "reduce", {"s"}, {"r"});
  auto un = node("Unsqueeze", "unsqueeze", {"r"}, {"u"});
  auto sp = node("Split", "split", {"u"}, {"y", "rest"});
  int_attr(sp, "axis", 2);
  if (as_inputs) {
    sq.add_input("one");
    rs.add_input("two");
    un.add_input("zero");
    sp.add_input("sizes");
    *g.add_initializer() = ints_tensor("one", {1});
    *g.add_initializer() = ints_tensor("two", {2});
    *g.add_initializer() = ints_tensor("zero", {0});
    *g.add_initializer() = ints_tensor("sizes", {2, 4});
  } else {
    ints_attr(sq, "axes", {1});
    ints_attr(rs, "axes", {2});
    ints_attr(un, "axes", {0});
    ints_attr(sp, "split", {2, 4});
  }
  for (auto* n : {&sq, &rs, &un, &sp}) *g.add_node() = *n;
  return serialize(std::move(g), opset);
}

}  // namespace

TEST_CASE("onnx: axes as attributes (opset 11) and as inputs (opset 13) import alike") {
  // ReduceSum takes its axes as an input from opset 13 on.
  const io::OnnxImport a = io::parse_onnx(axes_model(11), "axes11");
  const io::OnnxImport b = io::parse_onnx(axes_model(13), "axes13");
  for (const io::OnnxImport* r : {&a, &b}) {
    const ir::Graph& g = r->graph;
    CHECK(tensor(g, "s").shape == ir::Shape{4, 6, 5});
    CHECK(tensor(g, "r").shape == ir::Shape{4, 6, 1});
    CHECK(tensor(g, "u").shape == ir::Shape{1, 4, 6, 1});
    CHECK(tensor(g, "y").shape == ir::Shape{1, 4, 2, 1});
    CHECK(tensor(g, "rest").shape == ir::Shape{1, 4, 4, 1});
    CHECK(op(g, "squeeze").attrs.get_ints("axes") == std::vector<std::int64_t>{1});
    CHECK(op(g, "reduce").attrs.get_ints("axes") == std::vector<std::int64_t>{2});
    CHECK(op(g, "unsqueeze").attrs.get_ints("axes") == std::vector<std::int64_t>{0});
    CHECK(op(g, "split").attrs.get_ints("split") == std::vector<std::int64_t>{2, 4});
  }
  CHECK(a.graph.num_operators() == b.graph.num_operators());
}

TEST_CASE("onnx: random Gemm/MatMul chains (seeded): every shape as the layer widths say") {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::uint32_t state = seed * 2654435761u;
    const auto next = [&](std::uint32_t mod) {
      state = state * 1664525u + 1013904223u;
      return (state >> 8) % mod;
    };
    const int opset = std::vector<int>{9, 11, 13, 17}[next(4)];
    const std::int64_t batch = 1 + next(16);
    std::vector<std::int64_t> widths{1 + next(64)};
    const std::size_t layers = 1 + next(5);
    for (std::size_t l = 0; l < layers; ++l) widths.push_back(1 + next(64));
    onnx::GraphProto g;
    g.set_name("chain");
    *g.add_input() = value("h0", {batch, widths[0]});
    std::vector<bool> trans(layers), bias(layers), gemm(layers);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::string in = "h" + std::to_string(l), out = "h" + std::to_string(l + 1);
      const std::string w = "w" + std::to_string(l);
      gemm[l] = next(2) == 0;
      trans[l] = gemm[l] && next(2) == 0;
      bias[l] = gemm[l] && next(2) == 0;
      std::vector<std::string> ins{in, w};
      if (bias[l]) {
        ins.push_back("b" + std::to_string(l));
        *g.add_initializer() = float_tensor(ins.back(), {widths[l + 1]});
      }
      auto n = node(gemm[l] ? "Gemm" : "MatMul", "layer" + std::to_string(l), ins, {out});
      if (trans[l]) int_attr(n, "transB", 1);
      *g.add_node() = n;
      *g.add_initializer() =
          float_tensor(w, trans[l] ? std::vector<std::int64_t>{widths[l + 1], widths[l]}
                                   : std::vector<std::int64_t>{widths[l], widths[l + 1]});
    }
    *g.add_output() = value("h" + std::to_string(layers), {batch, widths[layers]});
    const io::OnnxImport r = io::parse_onnx(serialize(std::move(g), opset), "chain");
    std::size_t expected_ops = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      CHECK(tensor(r.graph, "h" + std::to_string(l + 1)).shape == ir::Shape{batch, widths[l + 1]});
      const ir::Operator& o = op(r.graph, "layer" + std::to_string(l));
      CHECK(o.kind == ir::OpKind::MatMul);
      CHECK(o.attrs.get_bool("transpose_b", false) == trans[l]);
      CHECK(tensor(r.graph, "w" + std::to_string(l)).kind == ir::TensorKind::Parameter);
      expected_ops += bias[l] ? 2 : 1;
    }
    CHECK(r.graph.num_operators() == expected_ops);
    // Weight payloads over 4 KiB were skipped, the small ones kept.
    std::size_t big = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t bytes = static_cast<std::size_t>(widths[l] * widths[l + 1]) * 4;
      if (bytes > 4096) big += bytes;
      const std::size_t bbytes = static_cast<std::size_t>(widths[l + 1]) * 4;
      if (bias[l] && bbytes > 4096) big += bbytes;
    }
    CHECK(r.skipped_weight_bytes == big);
  }
}
