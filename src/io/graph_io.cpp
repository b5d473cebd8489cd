// SPDX-License-Identifier: Apache-2.0
// The graph file (docs/design.md, Graph file): JSON -> ir::Graph and back.
//
// The reader checks JSON types and resolves tensor names itself, so that
// errors carry the exact JSON path; tensors and operators are added in file
// order, so the paths of what ir::Graph checks (duplicate names, a tensor
// produced twice, a produced parameter, cycles) are the file's paths too,
// and those errors are only re-attributed to the file. Shapes against operator
// kinds are the algebra's job (build_op_spaces), not the reader's.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/graph_read.hpp"
#include "io/json_util.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::io::detail {

namespace {

constexpr std::string_view kRootKeys[] = {"format",  "version",   "name", "description",
                                          "tensors", "operators", "cost", "training"};
constexpr std::string_view kTensorKeys[] = {"name", "shape", "dtype", "kind"};
constexpr std::string_view kOperatorKeys[] = {"name",   "type",     "inputs",  "outputs",  "attrs",
                                              "einsum", "strategy", "allowed", "recompute"};

std::span<const std::string_view> keys_of(GraphObject where) {
  switch (where) {
    case GraphObject::kTensor: return kTensorKeys;
    case GraphObject::kOperator: return kOperatorKeys;
    case GraphObject::kRoot: break;
  }
  return kRootKeys;
}

std::string_view object_name(GraphObject where) {
  switch (where) {
    case GraphObject::kTensor: return "a tensor";
    case GraphObject::kOperator: return "an operator";
    case GraphObject::kRoot: break;
  }
  return "the graph";
}

// Edits between two keys (insert, delete, replace, swap two neighbours:
// "dytpe" is one from "dtype"), case ignored.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// " (did you mean "attrs"?)" for the closest known key within a third of
// its length (at least 1, at most 3 edits; case does not count), else "".
std::string suggestion(GraphObject where, std::string_view key) {
  std::string_view best;
  std::size_t best_d = SIZE_MAX;
  for (const std::string_view k : keys_of(where)) {
    const std::size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  const std::size_t limit = std::clamp<std::size_t>(best.size() / 3, 1, 3);
  if (best_d > limit) return {};
  return " (did you mean \"" + std::string(best) + "\"?)";
}

}  // namespace

bool known_graph_key(GraphObject where, std::string_view key) noexcept {
  const auto keys = keys_of(where);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

void UnknownKeys::add(GraphObject where, std::string_view key, const std::string& path) {
  if (strict_) {
    throw Error(Errc::kSchema,
                "unknown key \"" + std::string(key) + "\" in " + std::string(object_name(where)) +
                    suggestion(where, key),
                path, source_);
  }
  Seen& s = seen_[{where, std::string(key)}];
  if (s.count++ == 0) s.first_path = path;
}

std::vector<std::string> UnknownKeys::warnings() const {
  std::vector<std::string> out;
  for (const auto& [what, s] : seen_) {
    std::string line = "unknown key \"" + what.second + "\" in " +
                       std::string(object_name(what.first)) + " ignored, at " + s.first_path;
    if (s.count > 1) line += " and " + std::to_string(s.count - 1) + " more";
    out.push_back(line + suggestion(what.first, what.second));
  }
  return out;
}

}  // namespace recsearch::io::detail

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
  r.fail(
      Errc::kSchema,
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

// Unknown keys of a record (nlohmann keeps them sorted; the warnings and
// strict mode's error do not depend on the order).
void check_keys(const Json& obj, detail::GraphObject where, const std::string& at,
                detail::UnknownKeys& keys) {
  for (const auto& [key, value] : obj.items()) {
    if (!detail::known_graph_key(where, key)) keys.add(where, key, child(at, key));
  }
}

void read_tensor(const Reader& r, const Json& t, std::size_t i, ir::Graph& g,
                 detail::UnknownKeys& keys) {
  const std::string at = child("/tensors", i);
  r.expect_object(t, at);
  std::string name = r.nonempty_string(r.require(t, "name", at), child(at, "name"));
  ir::Shape shape = read_shape(r, r.require(t, "shape", at), child(at, "shape"));
  ir::DType dtype = ir::DType::F32;
  if (const Json* d = r.find(t, "dtype")) dtype = read_dtype(r, *d, child(at, "dtype"));
  ir::TensorKind kind = ir::TensorKind::Input;
  if (const Json* k = r.find(t, "kind")) kind = read_kind(r, *k, child(at, "kind"));
  check_keys(t, detail::GraphObject::kTensor, at, keys);
  // A duplicate name is reported by the graph at "/tensors/<i>/name".
  try {
    (void)g.add_tensor(std::move(name), std::move(shape), dtype, kind);
  } catch (const Error& e) {
    r.rethrow(e);
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

void read_operator(const Reader& r, const Json& o, std::size_t i, ir::Graph& g,
                   detail::UnknownKeys& keys) {
  const std::string at = child("/operators", i);
  r.expect_object(o, at);
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
  if (const Json* s = r.find(o, "strategy"))
    op.strategy = detail::read_strategy(r, *s, child(at, "strategy"));
  if (const Json* s = r.find(o, "allowed")) op.allowed = r.strings(*s, child(at, "allowed"));
  if (const Json* s = r.find(o, "recompute"))
    op.recompute = detail::read_recompute(r, *s, child(at, "recompute"));
  check_keys(o, detail::GraphObject::kOperator, at, keys);
  // Operators are added in file order, so the graph's "/operators/<id>"
  // paths (duplicate names, second producers, produced parameters) are
  // already the file's paths.
  try {
    (void)g.add_operator(std::move(op));
  } catch (const Error& e) {
    r.rethrow(e);
  }
}

OrderedJson attr_json(const ir::AttrValue& v) {
  // nlohmann prints a double 2.0 as "2.0", so a float reads back as a float.
  return std::visit([](const auto& x) { return OrderedJson(x); }, v);
}

// Builds the graph while the file streams by. Records are handled as soon
// as what they depend on is known: tensors once "format" and "version" are
// checked, operators once all tensors are in. Files written in another
// field order still work; their early records wait in a buffer.
class GraphStream final : public detail::StreamHandler {
 public:
  GraphStream(const Reader& r, ir::Graph& g, detail::UnknownKeys& keys)
      : r_(r), g_(g), keys_(keys) {}

  Mode mode(const std::string& key) override {
    return key == "tensors" || key == "operators" ? Mode::kStream : Mode::kCollect;
  }

  void record(const std::string& key, std::size_t index, Json&& value) override {
    if (key == "tensors") {
      tensors_seen_ = true;
      if (format_ok_ && pending_tensors_.empty()) {
        read_tensor(r_, value, index, g_, keys_);
        ++tensors_read_;
      } else {
        pending_tensors_.push_back(std::move(value));
      }
    } else {
      operators_seen_ = true;
      if (format_ok_ && tensors_done_ && pending_tensors_.empty() && pending_ops_.empty()) {
        read_operator(r_, value, index, g_, keys_);
        ++ops_read_;
      } else {
        pending_ops_.push_back(std::move(value));
      }
    }
  }

  void field_done(const std::string& key, const Json& head) override {
    if (!detail::known_graph_key(detail::GraphObject::kRoot, key)) {
      keys_.add(detail::GraphObject::kRoot, key, child("", key));
    }
    if (key == "tensors" || key == "operators") {
      // A streamed key whose value was collected is not an array.
      if (const Json* v = r_.find(head, key)) (void)r_.array(*v, child("", key));
      (key == "tensors" ? tensors_seen_ : operators_seen_) = true;
      if (key == "tensors") tensors_done_ = true;
    }
    if (!format_ok_ && head.contains("format") && head.contains("version")) {
      r_.check_format(head, "recsearch.graph");
      format_ok_ = true;
    }
    flush();
  }

  // After the whole file: the checks that need to have seen everything.
  void finish(const Json& head) {
    if (!format_ok_) {
      r_.check_format(head, "recsearch.graph");
      format_ok_ = true;
    }
    if (!tensors_seen_) (void)r_.require(head, "tensors", "");
    if (!operators_seen_) (void)r_.require(head, "operators", "");
    flush();
  }

 private:
  void flush() {
    if (!format_ok_) return;
    for (Json& t : pending_tensors_) {
      read_tensor(r_, std::exchange(t, Json()), tensors_read_++, g_, keys_);
    }
    pending_tensors_.clear();
    if (!tensors_done_) return;
    for (Json& o : pending_ops_) {
      read_operator(r_, std::exchange(o, Json()), ops_read_++, g_, keys_);
    }
    pending_ops_.clear();
  }

  const Reader& r_;
  ir::Graph& g_;
  detail::UnknownKeys& keys_;
  bool format_ok_ = false;
  bool tensors_seen_ = false;
  bool operators_seen_ = false;
  bool tensors_done_ = false;
  std::size_t tensors_read_ = 0;
  std::size_t ops_read_ = 0;
  std::vector<Json> pending_tensors_;
  std::vector<Json> pending_ops_;
};

}  // namespace

namespace detail {

void reserve_for(ir::Graph& g, std::size_t text_bytes) {
  // A GPT graph file spends about 214 bytes per operator, its tensors
  // included (1.55 tensors per operator): reserving at most 192 bytes per
  // operator and 128 per tensor spares big graphs the operator vector's
  // regrowth (a copy of every operator) and the indexes' rehashes. Reserved
  // room costs address space only; small files reserve nothing.
  if (text_bytes > (std::size_t{1} << 20)) g.reserve(text_bytes / 128, text_bytes / 192);
}

ir::Graph parse_graph_streaming(std::string_view text, const std::string& source, CostParams* cost,
                                UnknownKeys& keys) {
  const Reader r(source);
  ir::Graph g;
  reserve_for(g, text.size());
  GraphStream stream(r, g, keys);
  const Json head = detail::stream_object(text, source, stream);
  stream.finish(head);
  if (const Json* n = r.find(head, "name")) g.set_name(r.string(*n, "/name"));
  if (const Json* t = r.find(head, "training"))
    g.set_training_pins(detail::read_training_pins(r, *t, "/training"));
  if (const Json* c = r.find(head, "cost")) {
    // Checked even when the caller does not want the values: a misspelt
    // coefficient must not pass `validate` silently.
    CostParams scratch;
    detail::read_cost_params(r, *c, "/cost", cost != nullptr ? *cost : scratch);
  }
  return g;
}

}  // namespace detail

namespace {

// Whether the text ends with its closing brace: a truncated file goes to the
// streaming reader at once, which fails at its end in constant memory.
bool ends_like_an_object(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{' && last != first &&
         text[last] == '}';
}

// `capacity`: readable bytes from text.data() (simdjson reads past the end).
ir::Graph read_graph(std::string_view text, std::size_t capacity, const std::string& source,
                     CostParams* cost, const GraphReadOptions& options) {
  detail::UnknownKeys keys(options.strict, source);
  ir::Graph g;
  bool done = false;
  if (ends_like_an_object(text)) {
    detail::reserve_for(g, text.size());
    CostParams fast_cost = cost != nullptr ? *cost : CostParams{};
    done = detail::read_graph_fast(text, capacity, source, g, &fast_cost, keys);
    if (done && cost != nullptr) *cost = fast_cost;
  }
  if (!done) {
    keys.clear();
    g = detail::parse_graph_streaming(text, source, cost, keys);
  }
  try {
    g.finalize();
  } catch (const Error& e) {
    throw e.in_file(source);
  }
  if (options.warnings != nullptr) {
    for (std::string& w : keys.warnings()) options.warnings->push_back(std::move(w));
  }
  return g;
}

}  // namespace

ir::Graph parse_graph(std::string_view text, const std::string& source, CostParams* cost,
                      const GraphReadOptions& options) {
  // simdjson reads up to its padding past the text: a copy with room for it.
  std::string padded;
  padded.reserve(text.size() + detail::simd_padding());
  padded.assign(text);
  return read_graph(padded, padded.capacity(), source, cost, options);
}

ir::Graph parse_graph(std::string_view text, const std::string& source, CostParams* cost) {
  return parse_graph(text, source, cost, GraphReadOptions{});
}

ir::Graph read_graph_file(const std::string& path, CostParams* cost,
                          const GraphReadOptions& options) {
  const detail::PaddedText file(path, detail::simd_padding());
  const std::string source = options.source.empty() ? path : options.source;
  return read_graph(file.text(), file.capacity(), source, cost, options);
}

ir::Graph read_graph_file(const std::string& path, CostParams* cost) {
  return read_graph_file(path, cost, GraphReadOptions{});
}

std::string graph_to_json(const ir::Graph& g, int indent) {
  detail::LayoutWriter w(indent);
  w.field("format", "recsearch.graph");
  w.field("version", 1);
  w.field("name", g.name());
  if (!g.training_pins().empty()) {
    const ir::TrainingPins& pins = g.training_pins();
    OrderedJson jt = OrderedJson::object();
    if (pins.recompute) jt["recompute"] = std::string(plan::recompute_name(*pins.recompute));
    if (pins.zero_stage) jt["zero_stage"] = *pins.zero_stage;
    if (pins.microbatches) jt["microbatches"] = *pins.microbatches;
    w.field("training", jt);
  }
  w.begin_array("tensors");
  for (const ir::Tensor& t : g.tensors()) {
    OrderedJson jt;
    jt["name"] = t.name;
    jt["shape"] = t.shape;
    jt["dtype"] = std::string(ir::dtype_name(t.dtype));
    if (t.kind != ir::TensorKind::Activation) jt["kind"] = std::string(kind_spelling(t.kind));
    w.element(jt);
  }
  w.end_array();
  w.begin_array("operators");
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
    if (op.recompute) jo["recompute"] = std::string(plan::recompute_name(*op.recompute));
    w.element(jo);
  }
  w.end_array();
  return w.finish();
}

}  // namespace recsearch::io
