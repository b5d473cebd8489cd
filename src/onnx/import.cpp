// SPDX-License-Identifier: Apache-2.0
// ONNX model -> recsearch graph (include/recsearch/io/onnx.hpp).
//
// Steps: read the model without its weights (model_reader.hpp); bind the
// symbolic dimensions of the graph inputs; run ONNX's shape inference with
// data propagation; in one pass over the nodes, evaluate those that only
// compute small integer tensors (shape_eval.hpp) into Constant nodes and
// give every other node its shapes from its own inference function; fold
// the nodes that consume nothing but constants; turn Identity copies and
// Cast/Reshape views of weights into tensors (no operator); fuse what the
// exporter spells out that torch runs as one kernel (erf GELU) and drop
// multiplications by a constant 1; map every
// other node to a recsearch operator kind; and check the result with the
// dimension algebra, so that an import that succeeds always gives a graph
// the search accepts. Errors name the node (its name, ONNX type and index
// in graph.node).
#include "recsearch/io/onnx.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl.h>       // FileInputStream over a descriptor
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>  // ArrayInputStream
#include <onnx/defs/schema.h>                               // OpSchemaRegistry
#include <onnx/shape_inference/implementation.h>            // onnx::shape_inference::InferShapes

#include "io/suggest.hpp"
#include "onnx/model_reader.hpp"
#include "onnx/shape_eval.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"

namespace recsearch::io {
namespace {

using onnx_import::count_of;
using onnx_import::eval_int_node;
using onnx_import::int_values;
using onnx_import::IntTensor;
using onnx_import::ModelSkeleton;

// Folded shape computations produce at most this many elements; a larger
// all-constant result (a weight transformed at run time) stays an operator.
constexpr std::int64_t kFoldMaxElements = 1024;

std::string node_label(const onnx::NodeProto& n, int index) {
  std::string s = "node ";
  s += n.name().empty() ? "#" + std::to_string(index) : "'" + n.name() + "'";
  s += " (" + n.op_type() + ")";
  return s;
}

std::string node_path(int index) { return "/graph/node/" + std::to_string(index); }

std::optional<ir::DType> dtype_of(std::int32_t elem) {
  using TP = onnx::TensorProto;
  switch (elem) {
    case TP::FLOAT: return ir::DType::F32;
    case TP::DOUBLE: return ir::DType::F64;
    case TP::FLOAT16: return ir::DType::F16;
    case TP::BFLOAT16: return ir::DType::BF16;
    case TP::INT64:
    case TP::UINT64: return ir::DType::I64;
    case TP::INT32:
    case TP::UINT32: return ir::DType::I32;
    case TP::INT16:
    case TP::UINT16: return ir::DType::I16;
    case TP::INT8: return ir::DType::I8;
    case TP::UINT8: return ir::DType::U8;
    case TP::BOOL: return ir::DType::Bool;
    default: return std::nullopt;
  }
}

bool is_float_type(std::int32_t elem) {
  using TP = onnx::TensorProto;
  return elem == TP::FLOAT || elem == TP::DOUBLE || elem == TP::FLOAT16 || elem == TP::BFLOAT16;
}

// Integer values of a tensor whose payload was kept; nullopt otherwise.
std::optional<double> float_value(const onnx::TensorProto& t) {
  using TP = onnx::TensorProto;
  if (t.data_type() == TP::FLOAT) {
    if (t.float_data_size() == 1) return t.float_data(0);
    if (t.raw_data().size() == 4) {
      float f = 0;
      std::memcpy(&f, t.raw_data().data(), 4);
      return f;
    }
  } else if (t.data_type() == TP::DOUBLE) {
    if (t.double_data_size() == 1) return t.double_data(0);
    if (t.raw_data().size() == 8) {
      double f = 0;
      std::memcpy(&f, t.raw_data().data(), 8);
      return f;
    }
  }
  return std::nullopt;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

// What the importer knows about one ONNX value.
struct ValueInfo {
  std::int32_t elem = 0;
  std::optional<ir::Shape> shape;  // all dims known
};

class Importer {
 public:
  Importer(ModelSkeleton skeleton, std::string source, const OnnxImportOptions& opts)
      : model_(std::move(skeleton.model)), source_(std::move(source)), opts_(opts) {}

  OnnxImport run() {
    read_opset();
    bind_dims();
    infer_shapes();
    fold_shapes();
    collect_values();
    mark_static();
    mark_weight_views();
    mark_fusions();
    map_nodes();
    finish();
    return std::move(result_);
  }

 private:
  [[noreturn]] void fail_node(int index, Errc code, const std::string& what) const {
    throw Error(code, node_label(graph().node(index), index) + ": " + what, node_path(index),
                source_);
  }
  const onnx::GraphProto& graph() const { return model_.graph(); }

  void read_opset() {
    for (const auto& o : model_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") result_.opset = o.version();
    }
    if (result_.opset == 0) {
      throw Error(Errc::kSchema, "the model imports no version of the default ONNX operator set",
                  "/opset_import", source_);
    }
  }

  struct UnboundDim {
    std::string input;
    int position;
    std::string param;  // empty: the dim is unknown, not symbolic
    std::string path;
  };

  // "graph input dims without a value: 'x' dim 0 ('batch'), 'x' dim 1
  // ('seq'), 'mask' dim 0 ('batch'); bind them with --dim batch=N --dim seq=N".
  // A dim named N gets --dim N=<size>: "--dim N=N" reads as a puzzle.
  // A --dim that bound nothing next to an unbound dim of a near name is a
  // typo ("--dim bacth=8"): said after the list.
  static std::string unbound_message(const std::vector<UnboundDim>& unbound,
                                     const std::vector<std::string>& unused) {
    std::string list;
    std::vector<std::string> params;
    bool unknown = false;
    for (const UnboundDim& u : unbound) {
      list += (list.empty() ? "'" : ", '") + u.input + "' dim " + std::to_string(u.position) +
              (u.param.empty() ? " (unknown)" : " ('" + u.param + "')");
      unknown = unknown || u.param.empty();
      if (!u.param.empty() && std::find(params.begin(), params.end(), u.param) == params.end())
        params.push_back(u.param);
    }
    std::string msg = std::string(unbound.size() == 1 ? "graph input dim" : "graph input dims") +
                      " without a value: " + list;
    if (!params.empty()) {
      msg += params.size() == 1 ? "; bind it with" : "; bind them with";
      for (const std::string& p : params) msg += " --dim " + p + (p == "N" ? "=<size>" : "=N");
    }
    if (unknown) msg += "; an unknown dim has no name to bind: give it a size in the model";
    for (const std::string& name : unused) {
      if (auto near = io::detail::closest(name, params))
        msg += "; --dim " + name + " names no dim of the model: did you mean `" + *near + "`?";
    }
    return msg;
  }

  // Graph inputs with symbolic or unknown dims get the values of opts.dims;
  // every other place that names the same dim_param is bound too. Every
  // input dim left without a value is listed in one error, so that a model
  // with several symbolic dims needs one run, not one per dim, to learn them.
  void bind_dims() {
    auto* g = model_.mutable_graph();
    std::unordered_set<std::string> inits;
    for (const auto& t : g->initializer()) inits.insert(t.name());
    std::vector<UnboundDim> unbound;
    std::set<std::string, std::less<>> used;
    const auto bind = [&](onnx::ValueInfoProto& v, bool required, const std::string& path) {
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) {
        if (required)
          throw Error(
              Errc::kShape,
              "graph input '" + v.name() + "' " +
                  (v.type().has_tensor_type()
                       ? "has no shape; recsearch needs one"
                       : "is not a tensor (sequence, map and optional values are not modelled)"),
              path, source_);
        return;
      }
      auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
      for (int d = 0; d < shape->dim_size(); ++d) {
        auto* dim = shape->mutable_dim(d);
        if (dim->has_dim_value()) continue;
        if (dim->has_dim_param()) {
          const auto it = opts_.dims.find(dim->dim_param());
          if (it != opts_.dims.end()) {
            dim->set_dim_value(it->second);
            used.insert(it->first);
            continue;
          }
        }
        if (!required) continue;
        unbound.push_back({v.name(), d, dim->has_dim_param() ? dim->dim_param() : std::string(),
                           path + "/type/tensor_type/shape/dim/" + std::to_string(d)});
      }
    };
    for (int i = 0; i < g->input_size(); ++i) {
      auto& v = *g->mutable_input(i);
      bind(v, inits.count(v.name()) == 0, "/graph/input/" + std::to_string(i));
    }
    if (!unbound.empty()) {
      std::vector<std::string> unused;
      for (const auto& [name, value] : opts_.dims)
        if (!used.count(name)) unused.push_back(name);
      throw Error(Errc::kShape, unbound_message(unbound, unused), unbound[0].path, source_);
    }
    for (int i = 0; i < g->output_size(); ++i) bind(*g->mutable_output(i), false, {});
    for (int i = 0; i < g->value_info_size(); ++i) bind(*g->mutable_value_info(i), false, {});
  }

  void infer_shapes() {
    const ::onnx::ShapeInferenceOptions lenient(/*check_type=*/false, /*error_mode=*/0,
                                                /*data_prop=*/true);
    try {
      ::onnx::shape_inference::InferShapes(model_, ::onnx::OpSchemaRegistry::Instance(), lenient);
    } catch (const std::exception& e) {
      // Contradictions between the model's own value_info and the inferred
      // shapes land here even in lenient mode.
      throw Error(Errc::kShape, std::string("shape inference failed: ") + e.what(), "/graph",
                  source_);
    }
  }

  // ---- shape folding -------------------------------------------------------
  //
  // One pass over the nodes in graph order (ONNX keeps nodes topologically
  // sorted): a node that computes a small integer tensor from known values is
  // evaluated and becomes a Constant node; any other node gets its output
  // types from its own ONNX inference function, which sees every constant
  // folded before it. Each node is visited once, so the depth of a model
  // costs nothing (a fixed number of whole-model rounds stopped deep
  // dynamic-batch transformers half way).

  // What the pass knows so far: value types (ONNX's inference context reads
  // them through pointers, which an unordered_map keeps stable), and the
  // integer tensors known before the model runs.
  struct FoldState {
    std::unordered_map<std::string, onnx::TypeProto> types;
    std::unordered_map<std::string, onnx::TypeProto*> type_ptrs;
    std::unordered_map<std::string, const onnx::TensorProto*> data;
    std::unordered_map<std::string, IntTensor> known;
  };

  // The dims of a type when all are known.
  static std::optional<ir::Shape> full_shape(const onnx::TypeProto& t) {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return std::nullopt;
    ir::Shape s;
    for (const auto& d : t.tensor_type().shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
      s.push_back(d.dim_value());
    }
    return s;
  }
  static int known_dims(const onnx::TypeProto& t) {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return -1;
    int k = 0;
    for (const auto& d : t.tensor_type().shape().dim()) k += d.has_dim_value() ? 1 : 0;
    return k;
  }

  // Keeps the more complete of what is known and t.
  static void note_type(FoldState& st, const std::string& name, const onnx::TypeProto& t) {
    if (name.empty() || !t.has_tensor_type()) return;
    const auto it = st.types.find(name);
    if (it != st.types.end()) {
      const onnx::TypeProto& old = it->second;
      const bool more = !full_shape(old) && known_dims(t) > known_dims(old);
      if (!more && (old.tensor_type().elem_type() != 0 || t.tensor_type().elem_type() == 0)) return;
      if (!more) {
        it->second.mutable_tensor_type()->set_elem_type(t.tensor_type().elem_type());
        return;
      }
    }
    onnx::TypeProto& slot = st.types[name];
    const std::int32_t elem = slot.tensor_type().elem_type();
    slot = t;
    if (slot.tensor_type().elem_type() == 0) slot.mutable_tensor_type()->set_elem_type(elem);
    st.type_ptrs[name] = &slot;
  }

  static onnx::TypeProto type_of_tensor(const onnx::TensorProto& t) {
    onnx::TypeProto ty;
    auto* tt = ty.mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();
    for (const auto d : t.dims()) shape->add_dim()->set_dim_value(d);
    return ty;
  }

  // A constant tensor value of the model: its type, and its integers.
  static void note_tensor(FoldState& st, const std::string& name, const onnx::TensorProto& t) {
    note_type(st, name, type_of_tensor(t));
    if (const auto v = int_values(t)) {
      st.known[name] = {ir::Shape(t.dims().begin(), t.dims().end()), *v, t.data_type()};
      st.data[name] = &t;
    }
  }

  FoldState fold_start() const {
    FoldState st;
    const auto& g = graph();
    for (const auto& v : g.input()) note_type(st, v.name(), v.type());
    for (const auto& v : g.value_info()) note_type(st, v.name(), v.type());
    for (const auto& v : g.output()) note_type(st, v.name(), v.type());
    for (const auto& t : g.initializer()) note_tensor(st, t.name(), t);
    return st;
  }

  // Turns node n into a Constant node holding r.
  static void make_constant(onnx::NodeProto& n, const IntTensor& r) {
    const std::string out = n.output(0);
    const std::string name = n.name();
    n.Clear();
    n.set_op_type("Constant");
    n.set_name(name);
    n.add_output(out);
    auto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = onnx_import::to_tensor_proto(r);
  }

  // The value of node n when it only computes a small integer tensor from
  // known values (Shape and Size need only their input's shape).
  static std::optional<IntTensor> evaluate_node(const onnx::NodeProto& n, const FoldState& st) {
    if (n.output_size() != 1 || n.output(0).empty()) return std::nullopt;
    std::vector<IntTensor> in;
    std::vector<std::optional<ir::Shape>> in_shapes;
    bool ok = true;
    for (const auto& name : n.input()) {
      if (name.empty()) continue;
      const auto s = st.types.find(name);
      in_shapes.push_back(s != st.types.end() ? full_shape(s->second) : std::nullopt);
      const auto k = st.known.find(name);
      if (k == st.known.end()) {
        ok = false;
      } else {
        in.push_back(k->second);
      }
    }
    const bool shape_op = n.op_type() == "Shape" || n.op_type() == "Size";
    if (!ok && !shape_op) return std::nullopt;
    auto r = eval_int_node(n, in, in_shapes);
    if (!r || count_of(r->dims) != static_cast<std::int64_t>(r->data.size()) ||
        static_cast<std::int64_t>(r->data.size()) > kFoldMaxElements)
      return std::nullopt;
    return r;
  }

  // Runs node i's ONNX inference function on what is known so far. Where
  // its inputs are all known but an output stays open, the reason is kept
  // for the error that names the node (folding gave up there).
  void infer_node(int i, onnx::NodeProto& n, FoldState& st) {
    bool inputs_known = true, inputs_typed = true;
    for (const auto& in : n.input()) {
      if (in.empty()) continue;
      const auto it = st.types.find(in);
      inputs_typed = inputs_typed && it != st.types.end();
      inputs_known = inputs_known && it != st.types.end() && full_shape(it->second);
    }
    const auto give_up = [&](const std::string& why) {
      if (inputs_known) gave_up_.emplace(i, why);
    };
    const std::string domain = n.domain() == "ai.onnx" ? std::string() : n.domain();
    const auto* schema =
        ::onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(result_.opset), domain);
    if (!schema || !schema->has_type_and_shape_inference_function())
      return give_up("ONNX has no shape inference for " + n.op_type() + " at opset " +
                     std::to_string(result_.opset));
    if (!inputs_typed) return;
    try {
      ::onnx::shape_inference::InferenceContextImpl ctx(n, st.type_ptrs, st.data, {}, nullptr,
                                                        nullptr);
      schema->GetTypeAndShapeInferenceFunction()(ctx);
      for (int j = 0; j < n.output_size(); ++j) {
        note_type(st, n.output(j), *ctx.getOutputType(static_cast<std::size_t>(j)));
      }
    } catch (const std::exception& e) {
      return give_up(std::string("ONNX shape inference failed: ") + e.what());
    }
    if (n.output_size() > 0 && !n.output(0).empty()) {
      const auto it = st.types.find(n.output(0));
      if (it == st.types.end() || !full_shape(it->second))
        give_up("its output shape depends on values only known when the model runs");
    }
  }

  // Writes what the pass learnt back into the model (value_info and the
  // graph outputs), where collect_values reads it.
  void fold_write_back(const FoldState& st) {
    auto* g = model_.mutable_graph();
    std::unordered_set<std::string> io;
    for (const auto& v : g->input()) io.insert(v.name());
    for (auto& v : *g->mutable_output()) {
      io.insert(v.name());
      if (const auto it = st.types.find(v.name()); it != st.types.end() && full_shape(it->second))
        *v.mutable_type() = it->second;
    }
    g->clear_value_info();
    for (const auto& n : g->node()) {
      for (const auto& o : n.output()) {
        const auto it = st.types.find(o);
        if (o.empty() || io.count(o) || it == st.types.end()) continue;
        auto* v = g->add_value_info();
        v->set_name(o);
        *v->mutable_type() = it->second;
      }
    }
  }

  void fold_shapes() {
    FoldState st = fold_start();
    auto* g = model_.mutable_graph();
    for (int i = 0; i < g->node_size(); ++i) {
      onnx::NodeProto& n = *g->mutable_node(i);
      if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
      if (n.op_type() == "Constant") {
        if (const auto* a = find_attr(n, "value"); a && a->has_t() && n.output_size() == 1)
          note_tensor(st, n.output(0), a->t());
        continue;
      }
      if (const auto r = evaluate_node(n, st)) {
        make_constant(n, *r);
        note_tensor(st, n.output(0), find_attr(n, "value")->t());
        continue;
      }
      infer_node(i, n, st);
    }
    fold_write_back(st);
  }

  // Where shape folding gave up: at node `at` itself, or first upstream.
  std::string folding_note(int at) const {
    if (const auto it = gave_up_.find(at); it != gave_up_.end())
      return "; shape folding gave up at this node: " + it->second;
    if (gave_up_.empty()) return {};
    int first = std::numeric_limits<int>::max();
    for (const auto& [i, why] : gave_up_) first = std::min(first, i);
    return "; shape folding gave up first at " + node_label(graph().node(first), first) + " (" +
           node_path(first) + "): " + gave_up_.at(first);
  }

  // The message strict shape inference gives for a model, if any.
  std::string strict_inference_message() const {
    onnx::ModelProto copy = model_;
    try {
      ::onnx::shape_inference::InferShapes(copy, ::onnx::OpSchemaRegistry::Instance(),
                                           ::onnx::ShapeInferenceOptions(false, 1, true));
    } catch (const std::exception& e) {
      return e.what();
    }
    return {};
  }

  void add_value(const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type()) return;
    const auto& tt = v.type().tensor_type();
    ValueInfo info;
    info.elem = tt.elem_type();
    if (tt.has_shape()) {
      ir::Shape s;
      bool known = true;
      for (const auto& d : tt.shape().dim()) {
        if (!d.has_dim_value() || d.dim_value() < 0) {
          known = false;
          break;
        }
        s.push_back(d.dim_value());
      }
      if (known) info.shape = std::move(s);
    }
    auto& slot = values_[v.name()];
    if (!slot.shape || slot.elem == 0) slot = info;
  }

  void collect_values() {
    const auto& g = graph();
    for (int i = 0; i < g.initializer_size(); ++i) {
      const auto& t = g.initializer(i);
      ValueInfo info;
      info.elem = t.data_type();
      info.shape = ir::Shape(t.dims().begin(), t.dims().end());
      values_[t.name()] = info;
      initializers_[t.name()] = &t;
    }
    for (const auto& v : g.input()) add_value(v);
    for (const auto& v : g.output()) add_value(v);
    for (const auto& v : g.value_info()) add_value(v);
    for (const auto& v : g.input()) {
      if (!initializers_.count(v.name())) graph_inputs_.push_back(v.name());
    }
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      for (const auto& o : n.output()) {
        if (!o.empty()) producer_[o] = i;
      }
      for (const auto& in : n.input()) {
        if (!in.empty()) ++uses_[in];
      }
      if (n.op_type() == "Constant" && n.output_size() == 1) {
        if (const auto* a = find_attr(n, "value"); a && a->has_t())
          constants_[n.output(0)] = &a->t();
      }
    }
    for (const auto& o : g.output()) ++uses_[o.name()];
  }

  std::optional<std::vector<std::int64_t>> known_ints(const std::string& name) const {
    if (const auto it = initializers_.find(name); it != initializers_.end())
      return int_values(*it->second);
    if (const auto it = constants_.find(name); it != constants_.end())
      return int_values(*it->second);
    return std::nullopt;
  }
  std::optional<double> known_float(const std::string& name) const {
    if (const auto it = initializers_.find(name); it != initializers_.end())
      return float_value(*it->second);
    if (const auto it = constants_.find(name); it != constants_.end())
      return float_value(*it->second);
    return std::nullopt;
  }

  bool small_known(const std::string& name) const {
    const auto it = values_.find(name);
    if (it == values_.end() || !it->second.shape) return false;
    const auto n = ir::checked_num_elements(*it->second.shape);
    return n && *n <= kFoldMaxElements;
  }

  // Whether node n (of the default domain) is known before the model runs,
  // given the static values so far (see mark_static).
  bool foldable(const onnx::NodeProto& n) const {
    const std::string& op = n.op_type();
    if (op == "Constant" || op == "Shape" || op == "Size") return true;
    if (n.input_size() == 0 || op == "RandomNormalLike" || op == "RandomUniformLike" ||
        op == "Multinomial" || op == "Bernoulli") {
      return false;
    }
    for (const auto& in : n.input()) {
      if (!in.empty() && !static_.count(in)) return false;
    }
    if (op == "ConstantOfShape") return true;
    // A large result is folded too when it is built from shapes and small
    // constants only (Swin's shifted-window masks: ConstantOfShape, then
    // ScatterND); a weight held in a Constant node and transformed at run
    // time stays an operator.
    const bool from_weight = std::any_of(n.input().begin(), n.input().end(),
                                         [&](const std::string& in) { return held_weight(in); });
    if (!from_weight) return true;
    for (const auto& o : n.output()) {
      if (!o.empty() && !small_known(o)) return false;
    }
    return true;
  }

  // A float tensor larger than a folded shape computation, held in a
  // Constant node: a weight.
  bool held_weight(const std::string& name) const {
    const auto it = constants_.find(name);
    if (it == constants_.end() || !is_float_type(it->second->data_type())) return false;
    std::int64_t n = 1;
    for (const auto d : it->second->dims()) n *= d;
    return n > kFoldMaxElements;
  }

  // Static values: known before the model runs. Integer initializers,
  // Constant outputs, Shape/Size of anything (shapes are known), and the
  // results of nodes whose inputs are all static (small ones only where a
  // weight held in a Constant node is among those inputs).
  void mark_static() {
    const auto& g = graph();
    for (const auto& [name, t] : initializers_) {
      if (!is_float_type(t->data_type())) static_.insert(name);
    }
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
      if (!foldable(n)) continue;
      folded_.insert(i);
      for (const auto& o : n.output()) {
        if (!o.empty()) static_.insert(o);
      }
    }
  }

  // ---- weights seen through Identity, Cast and Reshape -------------------
  //
  // torch.onnx.export stores equal initializers once and feeds every other
  // parameter holding the same values through an Identity node (zero biases,
  // unit norm scales, every layer of a cloned nn.TransformerEncoder). Such
  // an Identity's output is a parameter of its own, not an activation: the
  // model has one more weight there, and no operator. A Cast or Reshape
  // chain over a weight that nothing else reads is that same weight, seen
  // with the chain's shape. Both are nodes that map to no operator.

  // The initializer or Constant a weight-like tensor holds the values of.
  std::optional<std::string> weight_root(const std::string& name) const {
    if (const auto it = copies_.find(name); it != copies_.end()) return it->second;
    if (const auto it = alias_.find(name); it != alias_.end()) return weight_root(it->second);
    if (initializers_.count(name) || constants_.count(name)) return name;
    return std::nullopt;
  }

  std::string resolve_alias(const std::string& name) const {
    const auto it = alias_.find(name);
    return it == alias_.end() ? name : resolve_alias(it->second);
  }

  bool is_graph_output(const std::string& name) const {
    for (const auto& o : graph().output()) {
      if (o.name() == name) return true;
    }
    return false;
  }

  // Records node i when it only copies or views a weight (see above).
  void mark_weight_view(int i, const onnx::NodeProto& n) {
    static const std::set<std::string, std::less<>> kViews = {"Cast", "Reshape", "Squeeze",
                                                              "Unsqueeze", "Flatten"};
    if (n.input_size() < 1 || n.output_size() != 1 || n.output(0).empty()) return;
    const std::string& in = n.input(0);
    const std::string& out = n.output(0);
    const auto root = weight_root(in);
    if (!root) return;
    if (n.op_type() == "Identity") {
      copies_[out] = *root;
      weight_views_.insert(i);
      return;
    }
    if (!kViews.count(n.op_type())) return;
    const auto v = values_.find(out);
    if (v == values_.end() || !v->second.shape || uses_[in] != 1 || is_graph_output(in)) return;
    const std::string target = resolve_alias(in);
    alias_[out] = target;
    view_shape_[target] = *v->second.shape;
    weight_views_.insert(i);
  }

  void mark_weight_views() {
    const auto& g = graph();
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      if (folded_.count(i) || (!n.domain().empty() && n.domain() != "ai.onnx")) continue;
      mark_weight_view(i, n);
    }
    // Running statistics of batch norm are not trained: constants, however
    // they are fed (directly, through a copy or through a view).
    for (const auto& n : g.node()) {
      if (n.op_type() != "BatchNormalization") continue;
      for (int j = 3; j < std::min(5, n.input_size()); ++j)
        stats_.insert(resolve_alias(n.input(j)));
    }
  }

  // ---- what the exporter spells out ---------------------------------------
  //
  // Opsets before 20 have no Gelu: torch.onnx.export writes F.gelu as
  // x * 0.5 * (1 + erf(x / sqrt 2)), five elementwise nodes where torch runs
  // one kernel; priced as written they read and write the activation five
  // times. The chain becomes one GeLU. torch's baddbmm (the attention's
  // masked scores) exports its alpha as a Mul by 1: an identity, dropped.

  // The one node reading `name`, if exactly one does.
  std::optional<int> sole_user(const std::string& name) const {
    const auto u = uses_.find(name);
    const auto it = users_.find(name);
    if (u == uses_.end() || u->second != 1 || it == users_.end() || it->second.size() != 1)
      return std::nullopt;
    return it->second.front();
  }

  // Node i's input other than `one` when i is `type` with two inputs, one
  // of them `one`.
  std::optional<std::string> other_input(int i, std::string_view type,
                                         const std::string& one) const {
    const auto& n = graph().node(i);
    if (n.op_type() != type || n.input_size() != 2 || n.output_size() != 1) return std::nullopt;
    if (n.input(0) == one) return n.input(1);
    if (n.input(1) == one) return n.input(0);
    return std::nullopt;
  }

  bool is_scalar(const std::string& name, double v) const {
    const auto f = known_float(name);
    return f && std::abs(*f - v) <= 1e-6 * std::max(1.0, std::abs(v));
  }

  // The erf GELU around Erf node e: Div(x, sqrt 2) -> Erf -> Add(1) ->
  // Mul(x, .) -> Mul(., 0.5), or with the 0.5 applied to x first. Records
  // the last node as a GeLU of x and the others as absorbed.
  void match_erf_gelu(int e) {
    const auto& g = graph();
    const auto& erf = g.node(e);
    if (erf.input_size() != 1 || erf.output_size() != 1) return;
    const auto p = producer_.find(erf.input(0));
    if (p == producer_.end()) return;
    const auto& div = g.node(p->second);
    if (div.op_type() != "Div" || div.input_size() != 2 ||
        !is_scalar(div.input(1), std::sqrt(2.0)) || !sole_user(div.output(0)))
      return;
    const std::string& x = div.input(0);
    const auto a = sole_user(erf.output(0));
    if (!a) return;
    const auto one = other_input(*a, "Add", erf.output(0));
    if (!one || !is_scalar(*one, 1.0)) return;
    const std::string& sum = g.node(*a).output(0);
    const auto m1 = sole_user(sum);
    if (!m1) return;
    const auto with = other_input(*m1, "Mul", sum);
    if (!with) return;
    std::vector<int> absorbed = {p->second, e, *a};
    int last = *m1;
    if (*with == x) {  // (x * (1 + erf)) * 0.5
      const std::string& prod = g.node(*m1).output(0);
      const auto m2 = sole_user(prod);
      if (!m2) return;
      const auto half = other_input(*m2, "Mul", prod);
      if (!half || !is_scalar(*half, 0.5)) return;
      absorbed.push_back(*m1);
      last = *m2;
    } else {  // (x * 0.5) * (1 + erf)
      const auto h = producer_.find(*with);
      if (h == producer_.end() || !sole_user(*with)) return;
      const auto half = other_input(h->second, "Mul", x);
      if (!half || !is_scalar(*half, 0.5)) return;
      absorbed.push_back(h->second);
    }
    for (const int i : absorbed) {
      if (folded_.count(i) || weight_views_.count(i)) return;
    }
    fused_.insert(absorbed.begin(), absorbed.end());
    gelu_[last] = x;
  }

  // Mul by a constant 1 (either side) or Div by one, where the result has
  // the other operand's shape: its output is that operand.
  void match_identity_scale(int i) {
    const auto& n = graph().node(i);
    if (n.input_size() != 2 || n.output_size() != 1 || is_graph_output(n.output(0))) return;
    std::string x;
    if (is_scalar(n.input(1), 1.0)) {
      x = n.input(0);
    } else if (n.op_type() == "Mul" && is_scalar(n.input(0), 1.0)) {
      x = n.input(1);
    } else {
      return;
    }
    const auto in = values_.find(x);
    const auto out = values_.find(n.output(0));
    if (in == values_.end() || out == values_.end() || !in->second.shape || !out->second.shape ||
        *in->second.shape != *out->second.shape || in->second.elem != out->second.elem ||
        weight_root(x) || static_.count(x))
      return;
    alias_[n.output(0)] = x;
    fused_.insert(i);
  }

  // torch.onnx.export without constant folding writes F.linear on a 3-D
  // input as Transpose(weight) -> MatMul: the transposed weight would be an
  // activation of its own (its gradient reduced apart from the parameters'),
  // where torch multiplies by the weight itself. A 2-D Transpose of a weight
  // that nothing else reads, feeding only input B of MatMuls, becomes their
  // transpose_b.
  void match_weight_transpose(int i) {
    const auto& n = graph().node(i);
    if (n.input_size() != 1 || n.output_size() != 1 || is_graph_output(n.output(0))) return;
    const std::string& w = n.input(0);
    const auto u = uses_.find(w);
    if (!weight_root(w) || static_.count(w) || u == uses_.end() || u->second != 1 ||
        rank_known(w) != 2)
      return;
    if (const auto* perm = find_attr(n, "perm");
        perm && !(perm->ints_size() == 2 && perm->ints(0) == 1 && perm->ints(1) == 0))
      return;
    const auto users = users_.find(n.output(0));
    if (users == users_.end() || users->second.empty()) return;
    for (const int j : users->second) {
      const auto& m = graph().node(j);
      if (m.op_type() != "MatMul" || m.input_size() != 2 || m.input(0) == n.output(0) ||
          folded_.count(j))
        return;
    }
    alias_[n.output(0)] = w;
    fused_.insert(i);
    for (const int j : users->second) transpose_b_.insert(j);
  }

  std::size_t rank_known(const std::string& name) const {
    const auto v = values_.find(name);
    return v == values_.end() || !v->second.shape ? 0 : v->second.shape->size();
  }

  // Nodes that compute nothing: a Dropout of ratio 0 whose mask nobody
  // reads (torch's F.dropout(x, p=0.0) returns x), and a Slice that keeps
  // every element in order (x[:, :H] at H, a view in torch). Their output is
  // their input, as for a Mul by 1.
  void match_no_op(int i) {
    const auto& n = graph().node(i);
    if (n.input_size() < 1 || n.output_size() < 1 || is_graph_output(n.output(0))) return;
    const std::string& x = n.input(0);
    if (n.op_type() == "Dropout") {
      std::optional<double> ratio;
      if (const auto* r = find_attr(n, "ratio"); r && r->type() == onnx::AttributeProto::FLOAT) {
        ratio = r->f();
      } else if (n.input_size() > 1 && !n.input(1).empty()) {
        ratio = known_float(n.input(1));
      }
      const bool mask_read = n.output_size() > 1 && !n.output(1).empty() &&
                             (users_.count(n.output(1)) || is_graph_output(n.output(1)));
      if (!ratio || *ratio > 0.0 || mask_read) return;
    } else {  // Slice
      const auto in = values_.find(x);
      const auto out = values_.find(n.output(0));
      if (in == values_.end() || out == values_.end() || !in->second.shape || !out->second.shape ||
          *in->second.shape != *out->second.shape)
        return;
      if (n.input_size() > 4 && !n.input(4).empty()) {
        const auto steps = known_ints(n.input(4));
        if (!steps || std::any_of(steps->begin(), steps->end(), [](auto s) { return s != 1; }))
          return;
      }
    }
    if (weight_root(x) || static_.count(x)) return;
    alias_[n.output(0)] = x;
    fused_.insert(i);
  }

  void mark_fusions() {
    const auto& g = graph();
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& in : g.node(i).input()) {
        if (!in.empty()) users_[in].push_back(i);
      }
    }
    auto mapped = [&](int i) {
      const auto& n = g.node(i);
      return !folded_.count(i) && !weight_views_.count(i) && !fused_.count(i) &&
             (n.domain().empty() || n.domain() == "ai.onnx");
    };
    for (int i = 0; i < g.node_size(); ++i) {
      if (mapped(i) && g.node(i).op_type() == "Erf") match_erf_gelu(i);
    }
    for (int i = 0; i < g.node_size(); ++i) {
      const std::string& op = g.node(i).op_type();
      if (mapped(i) && !gelu_.count(i) && (op == "Mul" || op == "Div")) match_identity_scale(i);
      if (mapped(i) && op == "Transpose") match_weight_transpose(i);
      if (mapped(i) && (op == "Dropout" || op == "Slice")) match_no_op(i);
    }
  }

  // ---- tensors of the recsearch graph -----------------------------------

  ir::TensorId tensor_for(const std::string& name, int node_index) {
    if (const auto it = alias_.find(name); it != alias_.end())
      return tensor_for(it->second, node_index);
    if (const auto it = tensors_.find(name); it != tensors_.end()) return it->second;
    const auto vit = values_.find(name);
    const bool produced = producer_.count(name) && !static_.count(name) && !copies_.count(name);
    if (vit == values_.end() || !vit->second.shape) {
      const auto p = producer_.find(name);
      const int at = p != producer_.end() ? p->second : node_index;
      std::string why = "no shape is known for tensor '" + name + "'";
      if (p != producer_.end() && vit == values_.end() && !produced) why += " (a folded constant)";
      const std::string strict = strict_inference_message();
      why += folding_note(at);
      if (!strict.empty()) why += "; ONNX shape inference says: " + strict;
      if (p == producer_.end() && !initializers_.count(name) &&
          std::find(graph_inputs_.begin(), graph_inputs_.end(), name) == graph_inputs_.end()) {
        fail_node(node_index, Errc::kUnknownName,
                  "input '" + name +
                      "' is neither a graph input, an initializer nor the output "
                      "of a node");
      }
      fail_node(at, Errc::kShape, why);
    }
    const auto dtype = dtype_of(vit->second.elem);
    if (!dtype) {
      fail_node(node_index, Errc::kSchema,
                "tensor '" + name + "' has element type " +
                    onnx::TensorProto::DataType_Name(
                        static_cast<onnx::TensorProto::DataType>(vit->second.elem)) +
                    ", which recsearch does not model");
    }
    ir::TensorKind kind = ir::TensorKind::Input;
    if (produced) {
      kind = ir::TensorKind::Activation;
    } else if (const auto c = copies_.find(name); c != copies_.end()) {
      const auto it = initializers_.find(c->second);
      kind =
          it != initializers_.end() && is_float_type(it->second->data_type()) && !stats_.count(name)
              ? ir::TensorKind::Parameter
              : ir::TensorKind::Constant;
    } else if (static_.count(name)) {
      kind = ir::TensorKind::Constant;
    } else if (const auto it = initializers_.find(name); it != initializers_.end()) {
      kind = is_float_type(it->second->data_type()) && !stats_.count(name)
                 ? ir::TensorKind::Parameter
                 : ir::TensorKind::Constant;
    }
    const auto view = view_shape_.find(name);
    const ir::Shape& shape = view != view_shape_.end() ? view->second : *vit->second.shape;
    const ir::TensorId id = g_.add_tensor(name, shape, *dtype, kind);
    tensors_.emplace(name, id);
    return id;
  }

  // By value: tensor_for may add a tensor to the graph, which moves every
  // tensor, so a reference from an earlier call would dangle (Conv's x
  // after looking up w).
  ir::Shape shape_of(const std::string& name, int node_index) {
    return g_.tensor(tensor_for(name, node_index)).shape;
  }

  std::string unique_op_name(const onnx::NodeProto& n, int index) {
    std::string base = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
    std::string name = base;
    for (int k = 1; op_names_.count(name); ++k) name = base + "_" + std::to_string(k);
    op_names_.insert(name);
    return name;
  }

  void add_op(int index, std::string name, std::string type, const std::vector<std::string>& ins,
              const std::vector<std::string>& outs, ir::Attrs attrs) {
    ir::Operator op;
    op.name = std::move(name);
    op.type = std::move(type);
    for (const auto& i : ins) op.inputs.push_back(tensor_for(i, index));
    for (const auto& o : outs) op.outputs.push_back(tensor_for(o, index));
    op.attrs = std::move(attrs);
    try {
      g_.add_operator(std::move(op));
    } catch (const Error& e) {
      fail_node(index, e.code(), e.detail());
    }
    op_node_.push_back(index);
  }

  // ---- node mapping ------------------------------------------------------

  static ir::Attrs copy_attrs(const onnx::NodeProto& n,
                              std::initializer_list<std::string_view> names) {
    ir::Attrs a;
    for (const auto& at : n.attribute()) {
      if (std::find(names.begin(), names.end(), at.name()) == names.end()) continue;
      switch (at.type()) {
        case onnx::AttributeProto::INT: a.set(at.name(), static_cast<std::int64_t>(at.i())); break;
        case onnx::AttributeProto::FLOAT: a.set(at.name(), static_cast<double>(at.f())); break;
        case onnx::AttributeProto::STRING: a.set(at.name(), at.s()); break;
        case onnx::AttributeProto::INTS:
          a.set(at.name(), std::vector<std::int64_t>(at.ints().begin(), at.ints().end()));
          break;
        default: break;
      }
    }
    return a;
  }

  static std::int64_t attr_i(const onnx::NodeProto& n, std::string_view name, std::int64_t def) {
    const auto* a = find_attr(n, name);
    return a && a->type() == onnx::AttributeProto::INT ? a->i() : def;
  }
  static std::string attr_s(const onnx::NodeProto& n, std::string_view name) {
    const auto* a = find_attr(n, name);
    return a && a->type() == onnx::AttributeProto::STRING ? a->s() : std::string();
  }

  // Explicit pads for auto_pad SAME_UPPER / SAME_LOWER / VALID on 2 spatial dims.
  std::optional<std::vector<std::int64_t>> auto_pads(const onnx::NodeProto& n, const ir::Shape& x,
                                                     const std::vector<std::int64_t>& kernel,
                                                     int index) {
    const std::string mode = attr_s(n, "auto_pad");
    if (mode.empty() || mode == "NOTSET") return std::nullopt;
    if (mode == "VALID") return std::vector<std::int64_t>{0, 0, 0, 0};
    if (mode != "SAME_UPPER" && mode != "SAME_LOWER")
      fail_node(index, Errc::kSchema, "unknown auto_pad '" + mode + "'");
    std::vector<std::int64_t> strides{1, 1}, dil{1, 1};
    if (const auto* a = find_attr(n, "strides"); a && a->ints_size() == 2)
      strides = {a->ints(0), a->ints(1)};
    if (const auto* a = find_attr(n, "dilations"); a && a->ints_size() == 2)
      dil = {a->ints(0), a->ints(1)};
    std::vector<std::int64_t> pads(4, 0);
    for (std::size_t d = 0; d < 2; ++d) {
      const std::int64_t in = x[2 + d];
      const std::int64_t out = (in + strides[d] - 1) / strides[d];
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - in);
      const std::int64_t small = total / 2;
      pads[d] = mode == "SAME_UPPER" ? small : total - small;
      pads[d + 2] = total - pads[d];
    }
    return pads;
  }

  void warn_replicated(const onnx::NodeProto& n, int index, const std::string& why) {
    result_.warnings.push_back(node_label(n, index) + " at " + node_path(index) +
                               ": imported as replicated (" + why + ")");
  }

  // One node being mapped: its non-empty inputs, the outputs it keeps and
  // the recsearch operator name it gets.
  struct NodeCtx {
    const onnx::NodeProto& n;
    int index;
    const std::string& op;
    std::string name;
    std::vector<std::string> ins;
    std::vector<std::string> outs;
  };
  using Mapper = void (Importer::*)(const NodeCtx&);

  // ONNX op type -> the member that maps it; types not listed are imported
  // replicated (replicated()).
  static const std::unordered_map<std::string, Mapper>& mappers() {
    static const std::unordered_map<std::string, Mapper> table = [] {
      std::unordered_map<std::string, Mapper> t = {
          {"Cast", &Importer::map_cast},
          {"Dropout", &Importer::map_dropout},
          {"MatMul", &Importer::map_matmul},
          {"Gemm", &Importer::map_gemm},
          {"Einsum", &Importer::map_einsum},
          {"Conv", &Importer::map_conv},
          {"MaxPool", &Importer::map_pool},
          {"AveragePool", &Importer::map_pool},
          {"GlobalAveragePool", &Importer::map_global_avg_pool},
          {"BatchNormalization", &Importer::map_batch_norm},
          {"LayerNormalization", &Importer::map_layer_norm},
          {"RMSNormalization", &Importer::map_rms_norm},
          {"SimplifiedLayerNormalization", &Importer::map_rms_norm},
          {"Softmax", &Importer::map_softmax},
          {"LogSoftmax", &Importer::map_softmax},
          {"Reshape", &Importer::map_reshape},
          {"Flatten", &Importer::map_flatten},
          {"Transpose", &Importer::map_transpose},
          {"Squeeze", &Importer::map_squeeze},
          {"Unsqueeze", &Importer::map_squeeze},
          {"Concat", &Importer::map_concat},
          {"Split", &Importer::map_split},
          {"Slice", &Importer::map_slice},
          {"ReduceSum", &Importer::map_reduce},
          {"ReduceMean", &Importer::map_reduce},
          {"ReduceMax", &Importer::map_reduce},
          {"Gather", &Importer::map_gather},
          {"OneHot", &Importer::map_one_hot},
          {"SoftmaxCrossEntropyLoss", &Importer::map_softmax_cross_entropy},
          {"Pad", &Importer::map_pad},
          {"Expand", &Importer::map_expand},
          {"Resize", &Importer::map_resize},
          {"Upsample", &Importer::map_resize},
          {"ScatterND", &Importer::map_scatter_nd},
      };
      // The elementwise families, each under one mapper.
      for (const auto& [op, kind] : unary_kinds()) t.emplace(op, &Importer::map_unary);
      for (const auto& [op, kind] : binary_kinds()) t.emplace(op, &Importer::map_binary);
      for (const auto& op : other_elementwise()) t.emplace(op, &Importer::elementwise_custom);
      return t;
    }();
    return table;
  }

  static const std::unordered_map<std::string, const char*>& unary_kinds() {
    static const std::unordered_map<std::string, const char*> kUnary = {
        {"Relu", "ReLU"}, {"Gelu", "GeLU"}, {"Sigmoid", "Sigmoid"},
        {"Tanh", "Tanh"}, {"Exp", "Exp"},   {"Log", "Log"},
        {"Sqrt", "Sqrt"}, {"Neg", "Neg"},   {"Identity", "Identity"},
    };
    return kUnary;
  }
  static const std::unordered_map<std::string, const char*>& binary_kinds() {
    static const std::unordered_map<std::string, const char*> kBinary = {
        {"Add", "Add"}, {"Sub", "Sub"},     {"Mul", "Mul"},     {"Div", "Div"},
        {"Pow", "Pow"}, {"Max", "Maximum"}, {"Min", "Minimum"}, {"Sum", "Add"},
    };
    return kBinary;
  }
  // Elementwise types with no recsearch kind: imported with an einsum attribute.
  static const std::set<std::string, std::less<>>& other_elementwise() {
    static const std::set<std::string, std::less<>> kOtherElementwise = {
        "Abs",         "Ceil",
        "Clip",        "Cos",
        "Elu",         "Equal",
        "Erf",         "Floor",
        "Greater",     "GreaterOrEqual",
        "HardSigmoid", "HardSwish",
        "IsInf",       "IsNaN",
        "LeakyRelu",   "Less",
        "LessOrEqual", "Mod",
        "Not",         "And",
        "Or",          "Xor",
        "PRelu",       "Reciprocal",
        "Round",       "Selu",
        "Sign",        "Sin",
        "Softplus",    "Softsign",
        "Where",       "Celu",
        "Mish",        "ThresholdedRelu",
        "Shrink",      "BitShift",
        "Mean",
    };
    return kOtherElementwise;
  }

  void map_node(int index) {
    const onnx::NodeProto& n = graph().node(index);
    NodeCtx x{n, index, n.op_type(), {}, node_inputs(n), node_outputs(n)};
    if (x.outs.empty()) fail_node(index, Errc::kSchema, "the node has no outputs");
    x.name = unique_op_name(n, index);
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      return replicated(x, "operator of domain '" + n.domain() + "'");
    if (const auto it = mappers().find(x.op); it != mappers().end()) return (this->*it->second)(x);
    return replicated(x, "no recsearch kind for ONNX " + x.op);
  }

  // The node's inputs, less the absent and the empty constant ones: an
  // optional input given as a tensor of shape [0] (Resize's roi) holds
  // nothing, and a zero-size tensor is no valid graph tensor.
  std::vector<std::string> node_inputs(const onnx::NodeProto& n) const {
    std::vector<std::string> ins;
    for (const auto& i : n.input()) {
      if (!i.empty() && !empty_constant(i)) ins.push_back(i);
    }
    return ins;
  }

  bool empty_constant(const std::string& name) const {
    if (!initializers_.count(name) && !static_.count(name)) return false;
    const auto v = values_.find(name);
    return v != values_.end() && v->second.shape && count_of(*v->second.shape) == 0;
  }

  std::vector<std::string> node_outputs(const onnx::NodeProto& n) const {
    std::vector<std::string> outs;
    for (int j = 0; j < n.output_size(); ++j) {
      const std::string& o = n.output(j);
      if (o.empty()) continue;
      // An optional output nobody reads whose shape inference left open
      // (e.g. MaxPool's Indices) is dropped.
      const auto v = values_.find(o);
      if (j > 0 && !uses_.count(o) && (v == values_.end() || !v->second.shape)) continue;
      outs.push_back(o);
    }
    return outs;
  }

  std::size_t rank_of(const NodeCtx& x, const std::string& t) {
    return shape_of(t, x.index).size();
  }

  void simple(const NodeCtx& x, const char* type, ir::Attrs a = {}) {
    add_op(x.index, x.name, type, x.ins, x.outs, std::move(a));
  }

  // A type recsearch has no kind for, but whose operands are elementwise
  // (numpy broadcasting): an einsum attribute lets the search cut it.
  void replicated(const NodeCtx& x, const std::string& why) {
    warn_replicated(x.n, x.index, why);
    // Under its ONNX name, unless that is a recsearch kind whose meaning
    // differs (e.g. a 1-D MaxPool, an opset-9 Softmax).
    const std::string type = ir::parse_op_kind(x.op) == ir::OpKind::Custom ? x.op : "onnx." + x.op;
    add_op(x.index, x.name, type, x.ins, x.outs, {});
  }

  void elementwise_custom(const NodeCtx& x) {
    // numpy broadcasting, checked here: some old opsets broadcast otherwise.
    std::size_t rank = 0;
    for (const auto& i : x.ins) rank = std::max(rank, rank_of(x, i));
    for (std::size_t d = 0; d < rank; ++d) {
      std::int64_t size = 1;
      for (const auto& i : x.ins) {
        const ir::Shape& s = shape_of(i, x.index);
        if (d >= s.size()) continue;
        const std::int64_t v = s[s.size() - 1 - d];
        if (v == 1) continue;
        if (size != 1 && size != v) {
          return replicated(x, "operands do not broadcast by numpy rules");
        }
        size = v;
      }
    }
    std::string eq;
    for (std::size_t j = 0; j < x.ins.size(); ++j) eq += (j ? ",..." : "...");
    eq += "->...";
    if (x.outs.size() != 1 || x.ins.empty()) {
      return replicated(x, "no recsearch kind for ONNX " + x.op);
    }
    add_op(x.index, x.name, x.op, x.ins, x.outs, ir::Attrs{{"einsum", eq}});
  }

  void map_unary(const NodeCtx& x) { simple(x, unary_kinds().at(x.op)); }

  void map_binary(const NodeCtx& x) {
    if (x.ins.size() == 2) return simple(x, binary_kinds().at(x.op));
    if (x.ins.size() == 1) return simple(x, "Identity");
    elementwise_custom(x);
  }

  void map_cast(const NodeCtx& x) {
    const auto dt = dtype_of(static_cast<std::int32_t>(attr_i(x.n, "to", 0)));
    if (!dt) {
      fail_node(x.index, Errc::kSchema, "'to' names an element type recsearch does not model");
    }
    simple(x, "Cast", ir::Attrs{{"to", std::string(ir::dtype_name(*dt))}});
  }

  void map_dropout(const NodeCtx& x) {
    ir::Attrs a;
    if (const auto* r = find_attr(x.n, "ratio"); r && r->type() == onnx::AttributeProto::FLOAT) {
      a.set("ratio", static_cast<double>(r->f()));
    } else if (x.n.input_size() > 1 && !x.n.input(1).empty()) {
      if (const auto v = known_float(x.n.input(1))) a.set("ratio", *v);
    }
    simple(x, "Dropout", std::move(a));
  }

  void map_matmul(const NodeCtx& x) {
    if (!transpose_b_.count(x.index)) return simple(x, "MatMul");
    simple(x, "MatMul", ir::Attrs{{"transpose_a", false}, {"transpose_b", true}});
  }

  void map_gemm(const NodeCtx& x) {
    const auto& ins = x.ins;
    if (ins.size() < 2) fail_node(x.index, Errc::kSchema, "Gemm needs inputs A and B");
    ir::Attrs a{{"transpose_a", attr_i(x.n, "transA", 0) != 0},
                {"transpose_b", attr_i(x.n, "transB", 0) != 0}};
    if (ins.size() == 2) return add_op(x.index, x.name, "MatMul", ins, x.outs, std::move(a));
    // Y = A·B + C: a MatMul into an intermediate tensor, then the add.
    const std::string mid = x.outs[0] + "/matmul";
    if (values_.count(mid) || tensors_.count(mid))
      fail_node(x.index, Errc::kDuplicate, "tensor name '" + mid + "' is already taken");
    values_[mid] = values_.at(x.outs[0]);
    add_op(x.index, x.name, "MatMul", {ins[0], ins[1]}, {mid}, std::move(a));
    std::string bias = x.name + "/bias";
    for (int k = 1; op_names_.count(bias); ++k) bias = x.name + "/bias_" + std::to_string(k);
    op_names_.insert(bias);
    add_op(x.index, bias, "Add", {mid, ins[2]}, x.outs, {});
  }

  void map_einsum(const NodeCtx& x) { simple(x, "Einsum", copy_attrs(x.n, {"equation"})); }

  void map_conv(const NodeCtx& x) {
    if (x.ins.size() < 2) fail_node(x.index, Errc::kSchema, "Conv needs inputs X and W");
    const ir::Shape& in = shape_of(x.ins[0], x.index);
    const ir::Shape& w = shape_of(x.ins[1], x.index);
    if (in.size() != 4 || w.size() != 4) return replicated(x, "only 2-D convolutions have a kind");
    ir::Attrs a = copy_attrs(x.n, {"strides", "pads", "dilations", "group", "kernel_shape"});
    if (const auto p = auto_pads(x.n, in, {w[2], w[3]}, x.index)) a.set("pads", *p);
    simple(x, "Conv2D", std::move(a));
  }

  void map_pool(const NodeCtx& x) {
    const ir::Shape& in = shape_of(x.ins.at(0), x.index);
    const auto* k = find_attr(x.n, "kernel_shape");
    if (in.size() != 4 || !k || k->ints_size() != 2) {
      return replicated(x, "only 2-D pooling has a kind");
    }
    ir::Attrs a = copy_attrs(x.n, {"kernel_shape", "strides", "pads", "dilations", "ceil_mode"});
    // ONNX pooling strides default to 1; recsearch's default is the kernel.
    if (!a.has("strides")) a.set("strides", std::vector<std::int64_t>{1, 1});
    if (const auto p = auto_pads(x.n, in, {k->ints(0), k->ints(1)}, x.index)) a.set("pads", *p);
    simple(x, x.op == "MaxPool" ? "MaxPool" : "AvgPool", std::move(a));
  }

  void map_global_avg_pool(const NodeCtx& x) { simple(x, "GlobalAvgPool"); }
  void map_batch_norm(const NodeCtx& x) { simple(x, "BatchNorm", copy_attrs(x.n, {"epsilon"})); }
  void map_layer_norm(const NodeCtx& x) {
    simple(x, "LayerNorm", copy_attrs(x.n, {"axis", "epsilon"}));
  }
  void map_rms_norm(const NodeCtx& x) {
    simple(x, "RMSNorm", copy_attrs(x.n, {"axis", "epsilon"}));
  }

  void map_softmax(const NodeCtx& x) {
    const auto r = static_cast<std::int64_t>(rank_of(x, x.ins.at(0)));
    const char* kind = x.op == "Softmax" ? "Softmax" : "LogSoftmax";
    if (result_.opset >= 13) return simple(x, kind, ir::Attrs{{"axis", attr_i(x.n, "axis", -1)}});
    // Before opset 13 the input is flattened to 2-D at `axis` (default 1):
    // the same as recsearch's single-axis softmax only at the last axis.
    std::int64_t axis = attr_i(x.n, "axis", 1);
    if (axis < 0) axis += r;
    if (axis == r - 1 || r == 0) return simple(x, kind, ir::Attrs{{"axis", std::int64_t{-1}}});
    replicated(x, "opset " + std::to_string(result_.opset) + " " + x.op +
                      " normalizes all dims from axis " + std::to_string(axis));
  }

  void map_reshape(const NodeCtx& x) { add_op(x.index, x.name, "Reshape", x.ins, x.outs, {}); }
  void map_flatten(const NodeCtx& x) {
    add_op(x.index, x.name, "Flatten", {x.ins.at(0)}, x.outs, copy_attrs(x.n, {"axis"}));
  }
  void map_transpose(const NodeCtx& x) { simple(x, "Transpose", copy_attrs(x.n, {"perm"})); }

  void map_squeeze(const NodeCtx& x) {
    ir::Attrs a = copy_attrs(x.n, {"axes"});
    if (!a.has("axes") && x.ins.size() > 1) {
      if (const auto v = known_ints(x.ins[1])) a.set("axes", *v);
    }
    simple(x, x.op.c_str(), std::move(a));
  }

  void map_concat(const NodeCtx& x) { simple(x, "Concat", copy_attrs(x.n, {"axis"})); }

  void map_split(const NodeCtx& x) {
    ir::Attrs a = copy_attrs(x.n, {"axis", "split"});
    if (!a.has("split") && x.ins.size() > 1) {
      const auto v = known_ints(x.ins[1]);
      // Sizes only known at run time: the outputs' shapes tell them.
      if (!v) return add_op(x.index, x.name, "Split", {x.ins[0], x.ins[1]}, x.outs, std::move(a));
      a.set("split", *v);
    }
    add_op(x.index, x.name, "Split", {x.ins.at(0)}, x.outs, std::move(a));
  }

  void map_slice(const NodeCtx& x) {
    add_op(x.index, x.name, "Slice", x.ins, x.outs, copy_attrs(x.n, {"starts", "ends", "axes"}));
  }

  void map_reduce(const NodeCtx& x) {
    ir::Attrs a = copy_attrs(x.n, {"axes", "keepdims"});
    if (!a.has("axes") && x.ins.size() > 1) {
      const auto v = known_ints(x.ins[1]);
      if (!v) return replicated(x, "its axes are computed at run time");
      if (!v->empty()) a.set("axes", *v);
    }
    if (!a.has("axes") && attr_i(x.n, "noop_with_empty_axes", 0) != 0)
      return add_op(x.index, x.name, "Identity", {x.ins.at(0)}, x.outs, {});
    add_op(x.index, x.name, x.op, {x.ins.at(0)}, x.outs, std::move(a));
  }

  void map_gather(const NodeCtx& x) { simple(x, "Gather", copy_attrs(x.n, {"axis"})); }

  void map_one_hot(const NodeCtx& x) {
    ir::Attrs a = copy_attrs(x.n, {"axis"});
    if (x.ins.size() > 1) {
      if (const auto v = known_ints(x.ins[1]); v && v->size() == 1) a.set("depth", (*v)[0]);
    }
    simple(x, "OneHot", std::move(a));
  }

  void map_softmax_cross_entropy(const NodeCtx& x) {
    // ONNX puts the classes at dim 1 ([N, C, d1, ...]); recsearch's kind
    // wants them last, which is the same only for 2-D logits.
    if (rank_of(x, x.ins.at(0)) != 2) {
      return replicated(x, "classes at dim 1 of logits with rank > 2");
    }
    std::string red = attr_s(x.n, "reduction");
    if (red.empty()) red = "mean";
    if (red != "mean" && red != "none") return replicated(x, "reduction '" + red + "'");
    add_op(x.index, x.name, "SoftmaxCrossEntropy", x.ins, {x.outs.at(0)},
           ir::Attrs{{"reduction", red}});
  }

  // ---- Pad, Expand, Resize, ScatterND ------------------------------------

  // A constant tensor the importer adds (the broadcast operand of an
  // Expand, the repeat counts of a Resize); its values never matter.
  std::string add_synthetic(const std::string& base, std::int32_t elem, ir::Shape shape) {
    std::string name = base;
    for (int k = 1; values_.count(name) || tensors_.count(name); ++k)
      name = base + "_" + std::to_string(k);
    values_[name] = ValueInfo{elem, std::move(shape)};
    static_.insert(name);
    return name;
  }

  // An intermediate activation between two operators made from one node.
  std::string add_intermediate(const NodeCtx& x, const std::string& suffix, ir::Shape shape) {
    std::string name = x.outs[0] + suffix;
    if (values_.count(name) || tensors_.count(name))
      fail_node(x.index, Errc::kDuplicate, "tensor name '" + name + "' is already taken");
    values_[name] = ValueInfo{values_.at(x.outs[0]).elem, std::move(shape)};
    producer_[name] = x.index;
    return name;
  }

  std::string sub_op_name(const std::string& base) {
    std::string name = base;
    for (int k = 1; op_names_.count(name); ++k) name = base + "_" + std::to_string(k);
    op_names_.insert(name);
    return name;
  }

  // Pad: all-zero pads are an Identity; constant, reflect or edge borders
  // on the two spatial dims of a 4-D tensor are a 1x1 AvgPool with those
  // pads (a window op whose border rows need no neighbour: the search may
  // cut batch, channels and rows).
  void map_pad(const NodeCtx& x) {
    std::optional<std::vector<std::int64_t>> pads;
    if (result_.opset >= 11) {
      if (x.n.input_size() > 1 && !x.n.input(1).empty()) pads = known_ints(x.n.input(1));
      if (x.n.input_size() > 3 && !x.n.input(3).empty())
        return replicated(x, "Pad with an 'axes' input");
    } else if (const auto* a = find_attr(x.n, "pads")) {
      pads = std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
    }
    if (!pads) return replicated(x, "its pads are computed at run time");
    const auto r = rank_of(x, x.ins.at(0));
    if (pads->size() != 2 * r) return replicated(x, "pads do not match the input's rank");
    if (std::all_of(pads->begin(), pads->end(), [](std::int64_t p) { return p == 0; }))
      return add_op(x.index, x.name, "Identity", {x.ins[0]}, x.outs, {});
    if (std::any_of(pads->begin(), pads->end(), [](std::int64_t p) { return p < 0; }))
      return replicated(x, "negative pads (a crop)");
    const auto& p = *pads;
    if (r != 4 || p[0] != 0 || p[1] != 0 || p[4] != 0 || p[5] != 0)
      return replicated(x, "pads on dims other than the two spatial dims of an NCHW tensor");
    ir::Attrs a{{"kernel_shape", std::vector<std::int64_t>{1, 1}},
                {"strides", std::vector<std::int64_t>{1, 1}},
                {"pads", std::vector<std::int64_t>{p[2], p[3], p[6], p[7]}}};
    add_op(x.index, x.name, "AvgPool", {x.ins[0]}, x.outs, std::move(a));
  }

  // Expand: numpy broadcasting of x to the output's shape, written as an
  // einsum against a constant that carries the broadcast dims, so that the
  // search can cut the result along any dim.
  void map_expand(const NodeCtx& x) {
    const ir::Shape in = shape_of(x.ins.at(0), x.index);
    const ir::Shape out = shape_of(x.outs.at(0), x.index);
    if (in == out) return add_op(x.index, x.name, "Identity", {x.ins[0]}, x.outs, {});
    ir::Shape wide(out.size(), 1);
    for (std::size_t d = 0; d < out.size(); ++d) {
      const std::size_t off = out.size() - in.size();
      const std::int64_t have = d < off ? 1 : in[d - off];
      if (have != out[d]) wide[d] = out[d];
    }
    const std::string c = add_synthetic(x.outs[0] + "/broadcast", values_.at(x.ins[0]).elem, wide);
    add_op(x.index, x.name, "Expand", {x.ins[0], c}, x.outs, ir::Attrs{{"einsum", "...,...->..."}});
  }

  // Resize of an NCHW tensor by whole factors along H and W: each input
  // pixel becomes an a x b block (an einsum against an [a, b] constant,
  // whose flops are the output's elements), then a reshape folds the blocks
  // into rows and columns. Batch, channels and input rows stay cuttable.
  void map_resize(const NodeCtx& x) {
    const ir::Shape in = shape_of(x.ins.at(0), x.index);
    const ir::Shape out = shape_of(x.outs.at(0), x.index);
    if (in.size() != 4 || in[0] != out[0] || in[1] != out[1])
      return replicated(x, "it resizes dims other than the two spatial dims of an NCHW tensor");
    if (out[2] % in[2] != 0 || out[3] % in[3] != 0)
      return replicated(x, "no whole upsampling factor along H and W (" + ir::shape_to_string(in) +
                               " -> " + ir::shape_to_string(out) + ")");
    const std::int64_t a = out[2] / in[2], b = out[3] / in[3];
    if (a == 1 && b == 1) return add_op(x.index, x.name, "Identity", {x.ins[0]}, x.outs, {});
    const std::string c = add_synthetic(x.outs[0] + "/factors", values_.at(x.ins[0]).elem, {a, b});
    const std::string mid = add_intermediate(x, "/blocks", {in[0], in[1], in[2], a, in[3], b});
    ir::Attrs attrs = copy_attrs(x.n, {"mode"});
    attrs.set("einsum", std::string("nchw,ij->nchiwj"));
    add_op(x.index, x.name, "Resize", {x.ins[0], c}, {mid}, std::move(attrs));
    add_op(x.index, sub_op_name(x.name + "/fold"), "Reshape", {mid}, x.outs, {});
  }

  void map_scatter_nd(const NodeCtx& x) {
    replicated(x,
               "ScatterND writes where run-time indices say: no kind can tell which part of "
               "the output an update covers");
  }

  void map_nodes() {
    const auto& g = graph();
    // Graph inputs first, in file order, so that they keep their order.
    for (const auto& name : graph_inputs_) {
      if (uses_.count(name)) (void)tensor_for(name, 0);
    }
    for (int i = 0; i < g.node_size(); ++i) {
      if (folded_.count(i)) {
        ++result_.folded_nodes;
        continue;
      }
      if (weight_views_.count(i)) {
        ++result_.weight_view_nodes;
        continue;
      }
      if (fused_.count(i)) continue;  // part of a fused GeLU, or a Mul by 1
      if (const auto it = gelu_.find(i); it != gelu_.end()) {
        const onnx::NodeProto& n = g.node(i);
        add_op(i, unique_op_name(n, i), "GeLU", {it->second}, node_outputs(n), {});
        continue;
      }
      map_node(i);
    }
  }

  void finish() {
    try {
      g_.finalize();
    } catch (const Error& e) {
      attribute_error(e);
    }
    try {
      (void)algebra::build_op_spaces(g_);
    } catch (const Error& e) {
      attribute_error(e);
    }
    result_.graph = std::move(g_);
  }

  // Library errors name "/operators/<id>/..."; point at the ONNX node.
  [[noreturn]] void attribute_error(const Error& e) const {
    const std::string& p = e.json_path();
    constexpr std::string_view kOps = "/operators/";
    if (p.rfind(kOps, 0) == 0) {
      std::size_t end = kOps.size();
      std::size_t id = 0;
      while (end < p.size() && std::isdigit(static_cast<unsigned char>(p[end]))) {
        id = id * 10 + static_cast<std::size_t>(p[end] - '0');
        ++end;
      }
      if (id < op_node_.size()) {
        const ir::Operator& op = g_.op(static_cast<ir::OpId>(id));
        std::string rest = p.substr(end);
        fail_node(op_node_[id], e.code(),
                  e.detail() + " (imported as " + op.type + " '" + op.name + "'" +
                      (rest.empty() ? "" : ", at " + rest) + ")");
      }
    }
    throw e.in_file(source_);
  }

  onnx::ModelProto model_;
  std::string source_;
  const OnnxImportOptions& opts_;
  OnnxImport result_;
  ir::Graph g_;

  std::unordered_map<std::string, ValueInfo> values_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::unordered_map<std::string, const onnx::TensorProto*> constants_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, int> uses_;
  std::vector<std::string> graph_inputs_;
  std::unordered_set<std::string> static_;
  std::unordered_set<std::string> stats_;
  std::unordered_map<std::string, std::string> copies_;    // Identity output -> weight it copies
  std::unordered_map<std::string, std::string> alias_;     // view output -> the weight it views
                                                           // (or a Mul by 1 -> its operand)
  std::unordered_map<std::string, ir::Shape> view_shape_;  // weight -> the shape it is used with
  std::unordered_set<int> weight_views_;                   // nodes that are copies or views
  std::unordered_set<int> folded_;
  std::unordered_map<std::string, std::vector<int>> users_;  // tensor -> the nodes reading it
  std::unordered_set<int> fused_;                            // nodes absorbed (mark_fusions)
  std::unordered_map<int, std::string> gelu_;                // node -> x, where it ends a GeLU
  std::unordered_set<int> transpose_b_;           // MatMuls reading a weight through its Transpose
  std::unordered_map<int, std::string> gave_up_;  // node -> why folding left its output open
  std::unordered_map<std::string, ir::TensorId> tensors_;
  std::unordered_set<std::string> op_names_;
  std::vector<int> op_node_;  // per recsearch operator, its ONNX node index
};

OnnxImport import_skeleton(ModelSkeleton s, const std::string& source,
                           const OnnxImportOptions& options) {
  std::string name = options.name.empty() ? s.model.graph().name() : options.name;
  const std::size_t skipped = s.skipped_bytes;
  Importer imp(std::move(s), source, options);
  OnnxImport r = imp.run();
  r.skipped_weight_bytes = skipped;
  r.graph.set_name(name.empty() ? "onnx_model" : name);
  return r;
}

}  // namespace

bool onnx_import_available() noexcept { return true; }

OnnxImport parse_onnx(std::string_view bytes, const std::string& source,
                      const OnnxImportOptions& options) {
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error(Errc::kIo, "model larger than 2 GiB in memory: read it from a file", {}, source);
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return import_skeleton(onnx_import::read_model_skeleton(in, source), source, options);
}

OnnxImport read_onnx_file(const std::string& path, const OnnxImportOptions& options) {
  const int fd = path == "-" ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const std::string source = path == "-" ? "<stdin>" : path;
  if (fd < 0)
    throw Error(Errc::kIo, std::string("cannot open: ") + std::strerror(errno), {}, source);
  google::protobuf::io::FileInputStream in(fd);
  in.SetCloseOnDelete(true);
  ModelSkeleton s = onnx_import::read_model_skeleton(in, source);
  if (in.GetErrno() != 0)
    throw Error(Errc::kIo, std::string("cannot read: ") + std::strerror(in.GetErrno()), {}, source);
  return import_skeleton(std::move(s), source, options);
}

}  // namespace recsearch::io
