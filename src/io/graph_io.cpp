// The graph file (DESIGN.md "Graph file"): JSON -> ir::Graph and back.
//
// The reader checks JSON types and resolves tensor names itself, so that
// errors carry the exact JSON path; tensors and operators are added in file
// order, so the paths of what ir::Graph checks (duplicate names, a tensor
// produced twice, a produced parameter, cycles) are the file's paths too,
// and those errors are only re-attributed to the file. Shapes against operator
// kinds are the algebra's job (build_op_spaces), not the reader's.
#include <cmath>
#include <unordered_map>

#include "io/json_util.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::io {

namespace {

using detail::child;
using detail::Json;
using detail::OrderedJson;
using detail::Reader;

std::string_view kind_spelling(ir::TensorKind k) {
  switch (k) {
    case ir::TensorKind::Parameter: return "parameter";
    case ir::TensorKind::Constant: return "constant";
    case ir::TensorKind::Activation: return "activation";
    case ir::TensorKind::Input: break;
  }
  return "input";
}

ir::DType read_dtype(const Reader& r, const Json& j, const std::string& path) {
  const std::string s = r.string(j, path);
  if (const auto t = ir::parse_dtype(s)) return *t;
  r.fail(Errc::kSchema,
         "unknown dtype '" + s + "' (expected f64, f32, f16, bf16, f8, i64, i32, i16, i8, u8 or bool)",
         path);
}

ir::TensorKind read_kind(const Reader& r, const Json& j, const std::string& path) {
  const std::string s = r.string(j, path);
  if (s == "input") return ir::TensorKind::Input;
  if (s == "parameter") return ir::TensorKind::Parameter;
  if (s == "constant") return ir::TensorKind::Constant;
  // "activation" is what a produced tensor becomes anyway; accepting it lets
  // users annotate intermediates. The graph promotes it when produced.
  if (s == "activation") return ir::TensorKind::Input;
  r.fail(Errc::kSchema, "unknown tensor kind '" + s + "' (expected input, parameter or constant)",
         path);
}

ir::Shape read_shape(const Reader& r, const Json& j, const std::string& path) {
  if (!j.is_array()) {
    r.fail(Errc::kSchema, std::string("expected an array of integers, got ") + j.type_name(), path);
  }
  ir::Shape shape;
  shape.reserve(j.size());
  for (std::size_t d = 0; d < j.size(); ++d) {
    const std::string at = child(path, d);
    const std::int64_t v = r.integer(j[d], at);
    if (v <= 0) r.fail(Errc::kShape, "dimension must be positive, got " + std::to_string(v), at);
    shape.push_back(v);
  }
  if (!ir::checked_num_elements(shape)) {
    r.fail(Errc::kShape, "number of elements " + ir::shape_to_string(shape) + " overflows int64",
           path);
  }
  return shape;
}

ir::AttrValue read_attr_array(const Reader& r, const Json& j, const std::string& path) {
  // The element types decide the list type: all integers -> ints, any float
  // among numbers -> doubles (ONNX float lists often contain 1 and 0.5),
  // all strings -> strings. An empty list carries no type; ints is the
  // common case (axes, pads).
  bool any_float = false;
  bool all_numbers = true;
  bool all_strings = true;
  for (const auto& e : j) {
    any_float = any_float || e.is_number_float();
    all_numbers = all_numbers && e.is_number();
    all_strings = all_strings && e.is_string();
  }
  if (all_numbers) {
    if (!any_float) {
      std::vector<std::int64_t> v;
      v.reserve(j.size());
      for (std::size_t i = 0; i < j.size(); ++i) v.push_back(r.integer(j[i], child(path, i)));
      return v;
    }
    std::vector<double> v;
    v.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) v.push_back(r.number(j[i], child(path, i)));
    return v;
  }
  if (all_strings) return r.strings(j, path);
  for (std::size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    if (!e.is_number() && !e.is_string()) {
      r.fail(Errc::kSchema,
             std::string("expected a list of numbers or of strings, got an element of type ") +
                 e.type_name(),
             child(path, i));
    }
  }
  r.fail(Errc::kSchema, "expected a list of numbers or of strings, not a mix", path);
}

ir::AttrValue read_attr(const Reader& r, const Json& j, const std::string& path) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return r.integer(j, path);
  if (j.is_number_float()) return r.number(j, path);
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) return read_attr_array(r, j, path);
  r.fail(Errc::kSchema,
         std::string("expected a boolean, number, string or list attribute, got ") + j.type_name(),
         path);
}

void read_tensors(const Reader& r, const Json& tensors, ir::Graph& g) {
  r.array(tensors, "/tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string at = child("/tensors", i);
    const Json& t = r.object(tensors[i], at);
    std::string name = r.nonempty_string(r.require(t, "name", at), child(at, "name"));
    ir::Shape shape = read_shape(r, r.require(t, "shape", at), child(at, "shape"));
    ir::DType dtype = ir::DType::F32;
    if (const Json* d = r.find(t, "dtype")) dtype = read_dtype(r, *d, child(at, "dtype"));
    ir::TensorKind kind = ir::TensorKind::Input;
    if (const Json* k = r.find(t, "kind")) kind = read_kind(r, *k, child(at, "kind"));
    // A duplicate name is reported by the graph at "/tensors/<i>/name".
    try {
      g.add_tensor(std::move(name), std::move(shape), dtype, kind);
    } catch (const Error& e) {
      r.rethrow(e);
    }
  }
}

std::vector<ir::TensorId> read_tensor_refs(const Reader& r, const Json& j, const std::string& path,
                                           const ir::Graph& g) {
  if (!j.is_array()) {
    r.fail(Errc::kSchema, std::string("expected an array of tensor names, got ") + j.type_name(),
           path);
  }
  std::vector<ir::TensorId> ids;
  ids.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string at = child(path, i);
    const std::string name = r.string(j[i], at);
    const auto id = g.find_tensor(name);
    if (!id) r.fail(Errc::kUnknownName, "unknown tensor '" + name + "'", at);
    ids.push_back(*id);
  }
  return ids;
}

void read_operators(const Reader& r, const Json& ops, ir::Graph& g) {
  r.array(ops, "/operators");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::string at = child("/operators", i);
    const Json& o = r.object(ops[i], at);
    ir::Operator op;
    op.name = r.nonempty_string(r.require(o, "name", at), child(at, "name"));
    op.type = r.nonempty_string(r.require(o, "type", at), child(at, "type"));
    op.inputs = read_tensor_refs(r, r.require(o, "inputs", at), child(at, "inputs"), g);
    op.outputs = read_tensor_refs(r, r.require(o, "outputs", at), child(at, "outputs"), g);
    if (const Json* a = r.find(o, "attrs")) {
      const std::string attrs_at = child(at, "attrs");
      r.expect_object(*a, attrs_at);
      for (const auto& [key, value] : a->items()) {
        op.attrs.set(key, read_attr(r, value, child(attrs_at, key)));
      }
    }
    if (const Json* e = r.find(o, "einsum")) {
      // An operator-level "einsum" is shorthand for the attribute; two
      // different equations would silently pick one, so they are an error.
      const std::string eq = r.string(*e, child(at, "einsum"));
      if (const ir::AttrValue* prev = op.attrs.find("einsum")) {
        const auto* s = std::get_if<std::string>(prev);
        if (s == nullptr || *s != eq) {
          r.fail(Errc::kSchema, "\"einsum\" differs from attrs.einsum", child(at, "einsum"));
        }
      }
      op.attrs.set("einsum", eq);
    }
    if (const Json* s = r.find(o, "strategy")) op.strategy = detail::read_strategy(r, *s, child(at, "strategy"));
    if (const Json* s = r.find(o, "allowed")) op.allowed = r.strings(*s, child(at, "allowed"));
    // Operators are added in file order, so the graph's "/operators/<id>"
    // paths (duplicate names, second producers, produced parameters) are
    // already the file's paths.
    try {
      (void)g.add_operator(std::move(op));
    } catch (const Error& e) {
      r.rethrow(e);
    }
  }
}

OrderedJson attr_json(const ir::AttrValue& v) {
  // nlohmann prints a double 2.0 as "2.0", so a float reads back as a float.
  return std::visit([](const auto& x) { return OrderedJson(x); }, v);
}

}  // namespace

ir::Graph parse_graph(std::string_view text, const std::string& source, CostParams* cost) {
  const Json root = detail::parse_json(text, source);
  const Reader r(source);
  r.check_format(root, "recsearch.graph");
  ir::Graph g;
  if (const Json* n = r.find(root, "name")) g.set_name(r.string(*n, "/name"));
  read_tensors(r, r.require(root, "tensors", ""), g);
  read_operators(r, r.require(root, "operators", ""), g);
  if (const Json* c = r.find(root, "cost")) {
    // Checked even when the caller does not want the values: a misspelt
    // coefficient must not pass `validate` silently.
    CostParams scratch;
    detail::read_cost_params(r, *c, "/cost", cost != nullptr ? *cost : scratch);
  }
  try {
    g.finalize();
  } catch (const Error& e) {
    r.rethrow(e);
  }
  return g;
}

ir::Graph read_graph_file(const std::string& path, CostParams* cost) {
  return parse_graph(read_text_file(path), path, cost);
}

std::string graph_to_json(const ir::Graph& g, int indent) {
  OrderedJson root;
  root["format"] = "recsearch.graph";
  root["version"] = 1;
  root["name"] = g.name();
  OrderedJson tensors = OrderedJson::array();
  for (const ir::Tensor& t : g.tensors()) {
    OrderedJson jt;
    jt["name"] = t.name;
    jt["shape"] = t.shape;
    jt["dtype"] = std::string(ir::dtype_name(t.dtype));
    if (t.kind != ir::TensorKind::Activation) jt["kind"] = std::string(kind_spelling(t.kind));
    tensors.push_back(std::move(jt));
  }
  root["tensors"] = std::move(tensors);
  OrderedJson ops = OrderedJson::array();
  for (const ir::Operator& op : g.operators()) {
    OrderedJson jo;
    jo["name"] = op.name;
    jo["type"] = op.type;
    OrderedJson ins = OrderedJson::array();
    for (const ir::TensorId t : op.inputs) ins.push_back(g.tensor(t).name);
    jo["inputs"] = std::move(ins);
    OrderedJson outs = OrderedJson::array();
    for (const ir::TensorId t : op.outputs) outs.push_back(g.tensor(t).name);
    jo["outputs"] = std::move(outs);
    if (!op.attrs.empty()) {
      OrderedJson attrs = OrderedJson::object();
      for (const auto& [k, v] : op.attrs.items()) attrs[k] = attr_json(v);
      jo["attrs"] = std::move(attrs);
    }
    if (op.strategy) jo["strategy"] = *op.strategy;
    if (op.allowed) jo["allowed"] = *op.allowed;
    ops.push_back(std::move(jo));
  }
  root["operators"] = std::move(ops);
  return detail::dump_layout(root, indent, 2);
}

}  // namespace recsearch::io
