// SPDX-License-Identifier: Apache-2.0
// ONNX import fidelity on the patterns torch.onnx.export writes, built here
// as small ModelProtos: weights fed through Identity copies and Cast /
// Reshape views, batch-norm statistics fed through copies, shape folding
// as deep as the model (no round cap) including expand(n, -1, -1) and
// F.pad's pad table, the mappings of Pad / Expand / Resize, empty
// optional inputs, a weight's Transpose as MatMul's transpose_b, and
// Dropout / Slice nodes that compute nothing. Every imported graph must pass what `validate`
// checks: it round-trips through the graph JSON reader.
#include <doctest/doctest.h>

#include <cctype>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>  // builds the models

#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"

using namespace recsearch;

namespace {

using TP = onnx::TensorProto;

// A model under construction (default domain, one opset).
struct ModelBuilder {
  onnx::ModelProto m;
  explicit ModelBuilder(int opset) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("built");
  }
  onnx::GraphProto& g() { return *m.mutable_graph(); }

  static void set_type(onnx::ValueInfoProto* v, std::int32_t elem,
                       const std::vector<std::string>& dims) {
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* s = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = s->add_dim();
      if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) != 0)) {
        dim->set_dim_value(std::stoll(d));
      } else {
        dim->set_dim_param(d);
      }
    }
  }
  void input(const std::string& name, const std::vector<std::string>& dims,
             std::int32_t elem = TP::FLOAT) {
    auto* v = g().add_input();
    v->set_name(name);
    set_type(v, elem, dims);
  }
  void output(const std::string& name) { g().add_output()->set_name(name); }
  // A float weight (no payload: only its shape matters).
  void weight(const std::string& name, const std::vector<std::int64_t>& dims) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    for (const auto d : dims) t->add_dims(d);
  }
  void ints(const std::string& name, const std::vector<std::int64_t>& v,
            std::vector<std::int64_t> dims = {}) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(TP::INT64);
    if (dims.empty()) dims = {static_cast<std::int64_t>(v.size())};
    for (const auto d : dims) t->add_dims(d);
    for (const auto x : v) t->add_int64_data(x);
  }
  onnx::NodeProto& node(const std::string& type, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name = {}) {
    auto* n = g().add_node();
    n->set_op_type(type);
    n->set_name(name.empty() ? out.at(0) : name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return *n;
  }
  static void attr_i(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name,
                        const std::vector<std::int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (const auto x : v) a->add_ints(x);
  }
  static void attr_s(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }

  io::OnnxImport import(const io::OnnxImportOptions& o = {}) const {
    return io::parse_onnx(m.SerializeAsString(), "built", o);
  }
};

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
std::size_t count_kind(const ir::Graph& g, ir::TensorKind k) {
  std::size_t n = 0;
  for (const auto& t : g.tensors()) n += t.kind == k ? 1 : 0;
  return n;
}
// What `recsearch validate` checks: the written graph reads back.
void check_validates(const ir::Graph& g) {
  const std::string json = io::graph_to_json(g);
  CHECK_NOTHROW((void)io::parse_graph(json, "imported"));
}

}  // namespace

TEST_CASE("onnx fidelity: an Identity of a weight is a parameter of its own, not an operator") {
  // torch.onnx.export's deduplication: layer 1's weight holds layer 0's
  // values and is fed through Identity.
  ModelBuilder b(13);
  b.input("x", {"4", "8"});
  b.weight("layers.0.w", {8, 8});
  b.node("Identity", {"layers.0.w"}, {"layers.1.w"});
  b.node("MatMul", {"x", "layers.0.w"}, {"h"});
  b.node("MatMul", {"h", "layers.1.w"}, {"y"});
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(g.num_operators() == 2);
  CHECK(r.weight_view_nodes == 1);
  CHECK(tensor(g, "layers.1.w").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "layers.1.w").shape == ir::Shape{8, 8});
  CHECK(count_kind(g, ir::TensorKind::Parameter) == 2);
  check_validates(g);
}

TEST_CASE("onnx fidelity: a Cast / Reshape view of a weight read once is that weight") {
  ModelBuilder b(13);
  b.input("x", {"2", "3", "4"});
  b.weight("pos", {12});
  b.ints("shape", {1, 3, 4});
  b.node("Cast", {"pos"}, {"pos_f"});
  ModelBuilder::attr_i(*b.g().mutable_node(0), "to", TP::FLOAT);
  b.node("Reshape", {"pos_f", "shape"}, {"pos_3d"});
  b.node("Add", {"x", "pos_3d"}, {"y"});
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(g.num_operators() == 1);
  CHECK(r.weight_view_nodes == 2);
  CHECK(tensor(g, "pos").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "pos").shape == ir::Shape{1, 3, 4});  // seen with the view's shape
  CHECK_FALSE(g.find_tensor("pos_3d").has_value());
  CHECK(count_kind(g, ir::TensorKind::Parameter) == 1);
  check_validates(g);
}

TEST_CASE("onnx fidelity: batch-norm statistics are constants however they are fed") {
  // Zero running means share one initializer with a zero bias; unit
  // variances share one with a unit scale.
  ModelBuilder b(13);
  b.input("x", {"2", "4", "3", "3"});
  b.weight("zeros", {4});
  b.weight("ones", {4});
  b.node("Identity", {"zeros"}, {"bn.running_mean"});
  b.node("Identity", {"ones"}, {"bn.running_var"});
  b.node("BatchNormalization", {"x", "ones", "zeros", "bn.running_mean", "bn.running_var"}, {"y"},
         "bn");
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(g.num_operators() == 1);
  CHECK(tensor(g, "ones").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "zeros").kind == ir::TensorKind::Parameter);
  CHECK(tensor(g, "bn.running_mean").kind == ir::TensorKind::Constant);
  CHECK(tensor(g, "bn.running_var").kind == ir::TensorKind::Constant);
  check_validates(g);
}

TEST_CASE("onnx fidelity: shape folding has no depth limit") {
  // 64 layers, each reshaping by a target computed from the previous
  // layer's shape with a Div, which ONNX's own data propagation does not
  // evaluate: the importer must fold every layer (a cap of 16 rounds
  // stopped at layer 16).
  constexpr int kLayers = 64;
  ModelBuilder b(13);
  b.input("x", {"batch", "6"});
  b.ints("idx0", {0}, {1});
  b.ints("tail", {6});
  b.ints("one", {1}, {1});
  std::string cur = "x";
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "l" + std::to_string(l) + "/";
    b.node("Shape", {cur}, {p + "shape"});
    b.node("Gather", {p + "shape", "idx0"}, {p + "n"});
    b.node("Div", {p + "n", "one"}, {p + "n1"});
    b.node("Concat", {p + "n1", "tail"}, {p + "target"});
    ModelBuilder::attr_i(*b.g().mutable_node(b.g().node_size() - 1), "axis", 0);
    b.node("Relu", {cur}, {p + "act"});
    b.node("Reshape", {p + "act", p + "target"}, {p + "out"});
    cur = p + "out";
  }
  b.output(cur);
  io::OnnxImportOptions o;
  o.dims["batch"] = 3;
  const io::OnnxImport r = b.import(o);
  CHECK(r.graph.num_operators() == 2 * kLayers);
  CHECK(tensor(r.graph, cur).shape == ir::Shape{3, 6});
  check_validates(r.graph);
}

TEST_CASE("onnx fidelity: expand(n, -1, -1) folds and Expand is a broadcast einsum") {
  // What torch exports for class_token.expand(x.shape[0], -1, -1).
  ModelBuilder b(13);
  b.input("x", {"batch", "5", "8"});
  b.weight("class_token", {1, 1, 8});
  b.ints("idx0", {0}, {1});
  b.ints("m1", {-1, -1});
  b.ints("shape3", {3});
  b.ints("neg1", {-1}, {});
  b.node("Shape", {"x"}, {"xs"});
  b.node("Gather", {"xs", "idx0"}, {"n"});
  b.node("Concat", {"n", "m1"}, {"req"});
  ModelBuilder::attr_i(*b.g().mutable_node(b.g().node_size() - 1), "axis", 0);
  b.node("Reshape", {"req", "shape3"}, {"req1"});
  b.node("ConstantOfShape", {"shape3"}, {"ones"});
  {
    auto* a = b.g().mutable_node(b.g().node_size() - 1)->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(TP::INT64);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_int64_data(1);
  }
  b.node("Mul", {"ones", "neg1"}, {"negs"});
  b.node("Equal", {"req1", "negs"}, {"is_neg"});
  b.node("Where", {"is_neg", "ones", "req1"}, {"target"});
  b.node("Expand", {"class_token", "target"}, {"cls"});
  b.node("Concat", {"cls", "x"}, {"y"});
  ModelBuilder::attr_i(*b.g().mutable_node(b.g().node_size() - 1), "axis", 1);
  b.output("y");
  io::OnnxImportOptions o;
  o.dims["batch"] = 4;
  const io::OnnxImport r = b.import(o);
  const ir::Graph& g = r.graph;
  CHECK(r.warnings.empty());
  CHECK(tensor(g, "cls").shape == ir::Shape{4, 1, 8});
  CHECK(tensor(g, "y").shape == ir::Shape{4, 6, 8});
  const ir::Operator& e = op(g, "cls");
  CHECK(e.type == "Expand");
  CHECK(e.attrs.get_string("einsum", "") == "...,...->...");
  REQUIRE(e.inputs.size() == 2);
  CHECK(g.tensor(e.inputs[1]).shape == ir::Shape{4, 1, 1});
  CHECK(g.tensor(e.inputs[1]).kind == ir::TensorKind::Constant);
  check_validates(g);
}

TEST_CASE("onnx fidelity: F.pad's pad table folds; Pad maps to Identity or a 1x1 AvgPool") {
  // F.pad(x, (1, 2, 0, 3)) at opset 13: pairs per dim from the last, turned
  // into ONNX order with a reversed Slice and a Transpose.
  ModelBuilder b(13);
  b.input("x", {"2", "3", "4", "5"});
  b.ints("pairs", {1, 2, 0, 3});
  b.ints("zeros", {0, 0, 0, 0});
  b.ints("k2", {-1, 2});
  b.ints("s_start", {-1});
  b.ints("s_end", {-9223372036854775807LL});
  b.ints("s_axes", {0});
  b.ints("s_step", {-1});
  b.ints("flat", {-1});
  b.node("Concat", {"pairs", "zeros"}, {"p8"});
  ModelBuilder::attr_i(*b.g().mutable_node(b.g().node_size() - 1), "axis", 0);
  b.node("Reshape", {"p8", "k2"}, {"table"});
  b.node("Slice", {"table", "s_start", "s_end", "s_axes", "s_step"}, {"rev"});
  b.node("Transpose", {"rev"}, {"revt"});
  ModelBuilder::attr_ints(*b.g().mutable_node(b.g().node_size() - 1), "perm", {1, 0});
  b.node("Reshape", {"revt", "flat"}, {"pads"});
  b.node("Pad", {"x", "pads"}, {"padded"});
  ModelBuilder::attr_s(*b.g().mutable_node(b.g().node_size() - 1), "mode", "constant");
  b.ints("nopads", {0, 0, 0, 0, 0, 0, 0, 0});
  b.node("Pad", {"padded", "nopads"}, {"y"});
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(r.warnings.empty());
  // ONNX order: begins of dims 0..3, then ends: H gets 0 + 3, W gets 1 + 2.
  CHECK(tensor(g, "padded").shape == ir::Shape{2, 3, 7, 8});
  const ir::Operator& p = op(g, "padded");
  CHECK(p.kind == ir::OpKind::AvgPool);
  CHECK(p.attrs.get_ints("pads") == std::vector<std::int64_t>{0, 1, 3, 2});
  CHECK(op(g, "y").kind == ir::OpKind::Identity);
  check_validates(g);
}

TEST_CASE("onnx fidelity: Resize with an empty roi drops it and upsamples as an einsum") {
  ModelBuilder b(13);
  b.input("x", {"1", "4", "5", "6"});
  {
    auto* t = b.g().add_initializer();  // roi: an empty tensor of shape [0]
    t->set_name("roi");
    t->set_data_type(TP::FLOAT);
    t->add_dims(0);
    auto* s = b.g().add_initializer();
    s->set_name("scales");
    s->set_data_type(TP::FLOAT);
    s->add_dims(4);
    for (const float f : {1.0F, 1.0F, 2.0F, 3.0F}) s->add_float_data(f);
  }
  b.node("Resize", {"x", "roi", "scales"}, {"y"});
  ModelBuilder::attr_s(*b.g().mutable_node(0), "mode", "nearest");
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(r.warnings.empty());
  CHECK_FALSE(g.find_tensor("roi").has_value());
  CHECK(tensor(g, "y").shape == ir::Shape{1, 4, 10, 18});
  CHECK(op(g, "y").attrs.get_string("einsum", "") == "nchw,ij->nchiwj");
  CHECK(tensor(g, "y/blocks").shape == ir::Shape{1, 4, 5, 2, 6, 3});
  for (const auto& t : g.tensors()) {
    for (const auto d : t.shape) CHECK_MESSAGE(d > 0, t.name);
  }
  check_validates(g);
}

TEST_CASE("onnx fidelity: an unmapped pattern names the reason; folding says where it gave up") {
  ModelBuilder b(13);
  b.input("x", {"2", "3", "4", "5"});
  b.ints("pads", {1, 0, 0, 0, 0, 0, 0, 0});
  b.node("Pad", {"x", "pads"}, {"y"});
  b.output("y");
  const io::OnnxImport r = b.import();
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].find("pads on dims other than the two spatial dims") != std::string::npos);

  // NonZero's output length depends on the data: nothing downstream has a shape.
  ModelBuilder c(13);
  c.input("x", {"4"});
  c.node("NonZero", {"x"}, {"nz"});
  c.node("Relu", {"nz"}, {"y"}, "relu");
  c.output("y");
  try {
    (void)c.import();
    FAIL("import did not fail");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kShape);
    CHECK_MESSAGE(std::string(e.what()).find("shape folding gave up") != std::string::npos,
                  e.what());
  }
}

TEST_CASE("onnx fidelity: a large mask built from shapes and constants is a constant") {
  // Swin's shifted-window mask: zeros from ConstantOfShape, then ScatterND
  // with constant indices and updates; 1600 values, more than a shape.
  ModelBuilder b(13);
  b.input("x", {"1", "40", "40", "1"});
  b.ints("mask_shape", {1, 40, 40, 1});
  b.ints("indices", {0, 0, 0, 0}, {1, 4});
  {
    // The exporter writes the updates as a Constant node (an initializer
    // of float type would be a parameter).
    auto* a = b.node("Constant", {}, {"updates"}).add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(TP::FLOAT);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_float_data(1.0F);
  }
  b.node("ConstantOfShape", {"mask_shape"}, {"zeros"});
  b.node("ScatterND", {"zeros", "indices", "updates"}, {"mask"});
  b.node("Add", {"x", "mask"}, {"y"});
  b.output("y");
  const io::OnnxImport r = b.import();
  const ir::Graph& g = r.graph;
  CHECK(r.warnings.empty());
  CHECK(g.num_operators() == 1);
  CHECK(tensor(g, "mask").kind == ir::TensorKind::Constant);
  check_validates(g);
}

TEST_CASE("onnx fidelity: a weight read through its own Transpose is MatMul's transpose_b") {
  // torch.onnx.export without constant folding writes F.linear on a 3-D
  // input as Transpose(weight) -> MatMul.
  ModelBuilder b(13);
  b.input("x", {"2", "3", "8"});
  b.weight("fc.weight", {16, 8});
  b.node("Transpose", {"fc.weight"}, {"wt"});
  ModelBuilder::attr_ints(*b.g().mutable_node(0), "perm", {1, 0});
  b.node("MatMul", {"x", "wt"}, {"y"});
  b.output("y");
  const ir::Graph g = b.import().graph;
  CHECK(g.num_operators() == 1);
  const ir::Operator& mm = op(g, "y");
  CHECK(mm.kind == ir::OpKind::MatMul);
  CHECK(mm.attrs.get_bool("transpose_b", false));
  CHECK(g.tensor(mm.inputs[1]).kind == ir::TensorKind::Parameter);
  CHECK(g.tensor(mm.inputs[1]).shape == ir::Shape{16, 8});
  CHECK(g.tensor(mm.outputs[0]).shape == ir::Shape{2, 3, 16});
  check_validates(g);

  // The weight read elsewhere too: the Transpose stays an operator.
  ModelBuilder s(13);
  s.input("x", {"2", "3", "8"});
  s.input("z", {"2", "3", "16"});
  s.weight("fc.weight", {16, 8});
  s.node("Transpose", {"fc.weight"}, {"wt"});
  s.node("MatMul", {"x", "wt"}, {"y"});
  s.node("MatMul", {"z", "fc.weight"}, {"y2"});
  s.output("y");
  s.output("y2");
  const ir::Graph gs = s.import().graph;
  CHECK(gs.num_operators() == 3);
  CHECK_FALSE(op(gs, "y").attrs.get_bool("transpose_b", false));
  check_validates(gs);
}

TEST_CASE("onnx fidelity: a Dropout of ratio 0 and a Slice that keeps everything are no-ops") {
  const auto model = [](float ratio, std::int64_t end) {
    ModelBuilder b(13);
    b.input("x", {"4", "6"});
    auto* r = b.g().add_initializer();
    r->set_name("ratio");
    r->set_data_type(TP::FLOAT);
    r->add_float_data(ratio);
    b.ints("starts", {0});
    b.ints("ends", {end});
    b.ints("axes", {1});
    b.node("Relu", {"x"}, {"h"});
    b.node("Dropout", {"h", "ratio"}, {"d"});
    b.node("Slice", {"d", "starts", "ends", "axes"}, {"s"});
    b.node("Relu", {"s"}, {"y"});
    b.output("y");
    return b.import().graph;
  };
  const ir::Graph none = model(0.0F, 6);
  CHECK(none.num_operators() == 2);
  CHECK_FALSE(none.find_operator("d").has_value());
  CHECK_FALSE(none.find_operator("s").has_value());
  CHECK(none.tensor(op(none, "y").inputs[0]).name == "h");
  check_validates(none);

  // A real dropout and a trimming slice stay.
  const ir::Graph both = model(0.1F, 4);
  CHECK(both.num_operators() == 4);
  CHECK(op(both, "d").kind == ir::OpKind::Dropout);
  CHECK(op(both, "s").kind == ir::OpKind::Slice);
  CHECK(both.tensor(op(both, "y").inputs[0]).shape == ir::Shape{4, 4});
  check_validates(both);
}
