// SPDX-License-Identifier: Apache-2.0
// The fast graph reader (graph_read.hpp): simdjson On-Demand over the whole
// file, building the graph record by record as the streaming reader does,
// with no DOM and no per-record allocation beyond the graph's own.
//
// It gives up (returns false) rather than report anything: every check that
// fails here, every type it does not expect and every layout it does not
// handle sends the file to the streaming reader, which then reports the
// error exactly as before (graph_read.hpp says why). So this file must only
// never accept what the streaming reader rejects, and build the same graph
// from what both accept. Where nlohmann and simdjson could disagree (escape
// sequences, control characters, -0, integers written as floats, huge
// numbers, duplicate keys), it gives up too.
#include <simdjson.h>

#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/graph_read.hpp"
#include "io/json_util.hpp"
#include "io/simd_util.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::io::detail {

namespace {

using namespace simd;

// Per record, which known keys were seen: a second one is a duplicate,
// which the streaming reader reports.
class KeySet {
 public:
  void mark(int bit) {
    if ((bits_ & (1U << bit)) != 0) throw GiveUp{};
    bits_ |= 1U << bit;
  }
  [[nodiscard]] bool has(int bit) const { return (bits_ & (1U << bit)) != 0; }

 private:
  std::uint32_t bits_ = 0;
};

// A list of positive integers, gathered in `scratch` (reused from record to
// record) and returned in a vector of exactly its size: growing the result
// element by element allocated up to three times for a rank-4 shape.
std::vector<std::int64_t> positive_integers(od::value v, std::vector<std::int64_t>& scratch) {
  scratch.clear();
  for (auto e : get(v.get_array())) scratch.push_back(positive(get(e)));
  return {scratch.begin(), scratch.end()};
}

std::vector<std::string> strings(od::value v) {
  std::vector<std::string> out;
  for (auto e : get(v.get_array())) out.emplace_back(text(get(e)));
  return out;
}

class FastGraph {
 public:
  FastGraph(ir::Graph& g, UnknownKeys& keys) : g_(g), keys_(keys) {}

  void tensor(od::value v, std::size_t i) {
    enum { kName, kShape, kDtype, kKind };
    KeySet seen;
    std::string_view name;
    ir::Shape shape;
    ir::DType dtype = ir::DType::F32;
    ir::TensorKind kind = ir::TensorKind::Input;
    for (auto field : get(v.get_object())) {
      od::field f = get(std::move(field));
      const std::string_view key = key_of(f);
      if (key == "name") {
        seen.mark(kName);
        name = text(f.value());
        if (name.empty()) throw GiveUp{};
      } else if (key == "shape") {
        seen.mark(kShape);
        shape = positive_integers(f.value(), ints_);
        if (!ir::checked_num_elements(shape)) throw GiveUp{};
      } else if (key == "dtype") {
        seen.mark(kDtype);
        const auto t = ir::parse_dtype(text(f.value()));
        if (!t) throw GiveUp{};
        dtype = *t;
      } else if (key == "kind") {
        seen.mark(kKind);
        kind = tensor_kind(text(f.value()));
      } else {
        unknown(GraphObject::kTensor, key, "/tensors", i, f.value());
      }
    }
    if (!seen.has(kName) || !seen.has(kShape)) throw GiveUp{};
    // A duplicate name throws here, and the streaming reader reports it.
    (void)g_.add_tensor(std::string(name), std::move(shape), dtype, kind);
  }

  void op(od::value v, std::size_t i) {
    enum { kName, kType, kInputs, kOutputs, kAttrs, kEinsum, kStrategy, kAllowed, kRecompute };
    KeySet seen;
    ir::Operator op;
    std::optional<std::string> einsum;
    for (auto field : get(v.get_object())) {
      od::field f = get(std::move(field));
      const std::string_view key = key_of(f);
      if (key == "name") {
        seen.mark(kName);
        op.name = text(f.value());
      } else if (key == "type") {
        seen.mark(kType);
        op.type = text(f.value());
      } else if (key == "inputs") {
        seen.mark(kInputs);
        op.inputs = tensor_refs(f.value());
      } else if (key == "outputs") {
        seen.mark(kOutputs);
        op.outputs = tensor_refs(f.value());
      } else if (key == "attrs") {
        seen.mark(kAttrs);
        attrs(f.value(), op.attrs);
      } else if (key == "einsum") {
        seen.mark(kEinsum);
        einsum = std::string(text(f.value()));
      } else if (key == "strategy") {
        seen.mark(kStrategy);
        ir::Strategy s;
        for (auto e : get(f.value().get_array())) s.push_back(positive_integers(get(e), ints_));
        op.strategy = std::move(s);
      } else if (key == "allowed") {
        seen.mark(kAllowed);
        op.allowed = strings(f.value());
      } else if (key == "recompute") {
        seen.mark(kRecompute);
        // A bad value: the streaming reader reports it with its path.
        const auto rc = plan::parse_recompute(text(f.value()));
        if (!rc) throw GiveUp{};
        op.recompute = *rc;
      } else {
        unknown(GraphObject::kOperator, key, "/operators", i, f.value());
      }
    }
    if (!seen.has(kName) || !seen.has(kType) || !seen.has(kInputs) || !seen.has(kOutputs) ||
        op.name.empty() || op.type.empty())
      throw GiveUp{};
    if (einsum) {
      // The streaming reader's rule: the shorthand must agree with attrs.einsum.
      if (const ir::AttrValue* prev = op.attrs.find("einsum")) {
        const auto* s = std::get_if<std::string>(prev);
        if (s == nullptr || *s != *einsum) throw GiveUp{};
      }
      op.attrs.set("einsum", std::move(*einsum));
    }
    (void)g_.add_operator(std::move(op));
  }

  // A key the graph does not know: a warning (strict mode: the streaming
  // reader raises the error), and its value validated.
  void unknown(GraphObject where, std::string_view key, std::string_view array, std::size_t i,
               od::value v) {
    if (keys_.strict()) throw GiveUp{};
    keys_.add(where, key, child(child(std::string(array), i), key));
    validate(v, 2);
  }

  void unknown_root(std::string_view key, od::value v) {
    if (keys_.strict()) throw GiveUp{};
    keys_.add(GraphObject::kRoot, key, child("", key));
    validate(v, 1);
  }

 private:
  static ir::TensorKind tensor_kind(std::string_view s) {
    if (s == "input" || s == "activation") return ir::TensorKind::Input;
    if (s == "parameter") return ir::TensorKind::Parameter;
    if (s == "constant") return ir::TensorKind::Constant;
    throw GiveUp{};
  }

  // Names resolved to ids, gathered in a reused buffer so that the result
  // is allocated once at its size.
  std::vector<ir::TensorId> tensor_refs(od::value v) {
    ids_.clear();
    for (auto e : get(v.get_array())) {
      const auto id = resolve(text(get(e)));
      if (!id) throw GiveUp{};
      ids_.push_back(*id);
    }
    return {ids_.begin(), ids_.end()};
  }

  // A tensor name to its id. Graph files list tensors about in the order
  // operators first use them, and an operator mostly reads what one a few
  // records back wrote: the next tensor after the last first use and a
  // small table of recent names answer about 84% of GPT references, each
  // checked against the name the graph holds. The rest go to the graph's
  // index, whose probes (one random slot in 32 MB at 10^6 operators) missed
  // the cache on nearly every lookup.
  std::optional<ir::TensorId> resolve(std::string_view name) {
    const std::size_t h = std::hash<std::string_view>{}(name);
    Recent& r = recent_[h & (recent_.size() - 1)];
    std::optional<ir::TensorId> id;
    if (next_ < g_.num_tensors() && g_.tensor(next_).name == name) {
      id = next_;
    } else if (r.id != ir::kNone && r.hash == h && g_.tensor(r.id).name == name) {
      return r.id;
    } else {
      id = g_.find_tensor(name);
      if (!id) return std::nullopt;
    }
    if (*id >= next_) next_ = *id + 1;
    r = Recent{h, *id};
    return id;
  }

  // One list element as the streaming reader classifies it.
  using Element = std::variant<std::int64_t, double, std::string>;

  static ir::AttrValue attr_list(od::value v) {
    std::vector<Element> elements;
    bool any_float = false;
    bool any_number = false;
    bool any_string = false;
    for (auto e : get(v.get_array())) {
      od::value x = get(e);
      const od::json_type t = get(x.type());
      if (t == od::json_type::string) {
        any_string = true;
        elements.emplace_back(std::string(text(x)));
      } else if (t == od::json_type::number) {
        any_number = true;
        if (is_float_token(x.raw_json_token())) {
          any_float = true;
          elements.emplace_back(real(x));
        } else {
          elements.emplace_back(integer(x));
        }
      } else {
        throw GiveUp{};
      }
    }
    if (any_string && any_number) throw GiveUp{};
    if (any_string) {
      std::vector<std::string> out;
      out.reserve(elements.size());
      for (auto& e : elements) out.push_back(std::move(std::get<std::string>(e)));
      return out;
    }
    if (!any_float) {
      std::vector<std::int64_t> out;
      out.reserve(elements.size());
      for (const auto& e : elements) out.push_back(std::get<std::int64_t>(e));
      return out;
    }
    std::vector<double> out;
    out.reserve(elements.size());
    for (const auto& e : elements) {
      out.push_back(std::holds_alternative<double>(e)
                        ? std::get<double>(e)
                        : static_cast<double>(std::get<std::int64_t>(e)));
    }
    return out;
  }

  static ir::AttrValue attr(od::value v) {
    switch (get(v.type())) {
      case od::json_type::boolean: return get(v.get_bool());
      case od::json_type::number: {
        if (!is_float_token(v.raw_json_token())) return integer(v);
        return real(v);
      }
      case od::json_type::string: return std::string(text(v));
      case od::json_type::array: return attr_list(v);
      case od::json_type::object:
      case od::json_type::null: break;
    }
    throw GiveUp{};
  }

  static void attrs(od::value v, ir::Attrs& out) {
    std::vector<std::string> names;
    for (auto field : get(v.get_object())) {
      od::field f = get(std::move(field));
      std::string name(key_of(f));
      for (const std::string& n : names) {
        if (n == name) throw GiveUp{};
      }
      out.set(name, attr(f.value()));
      names.push_back(std::move(name));
    }
  }

  ir::Graph& g_;
  UnknownKeys& keys_;
  std::vector<std::int64_t> ints_;  // scratch of positive_integers
  std::vector<ir::TensorId> ids_;   // scratch of tensor_refs
  // resolve()'s guesses: the tensor after the last first use, and recent
  // names by hash (4096 entries, 64 KiB).
  struct Recent {
    std::size_t hash = 0;
    ir::TensorId id = ir::kNone;
  };
  ir::TensorId next_ = 0;
  std::array<Recent, 4096> recent_{};
};

// The whole document, in the usual field order: "format" and "version"
// before "tensors", "tensors" before "operators".
void read_document(std::string_view text_in, std::size_t capacity, const std::string& source,
                   ir::Graph& g, CostParams* cost, UnknownKeys& keys) {
  od::parser parser;
  od::document doc =
      get(parser.iterate(simdjson::padded_string_view(text_in.data(), text_in.size(), capacity)));
  FastGraph fast(g, keys);
  std::optional<std::string> format;
  std::optional<std::int64_t> version;
  std::optional<std::string> name;
  bool tensors = false;
  bool operators = false;
  std::vector<std::string> top_keys;
  for (auto field : get(doc.get_object())) {
    od::field f = get(std::move(field));
    const std::string_view key = key_of(f);
    for (const std::string& k : top_keys) {
      if (k == key) throw GiveUp{};
    }
    top_keys.emplace_back(key);
    if (key == "format") {
      format = std::string(text(f.value()));
    } else if (key == "version") {
      version = integer(f.value());
    } else if (key == "name") {
      name = std::string(text(f.value()));
    } else if (key == "tensors") {
      if (format != "recsearch.graph" || version != 1) throw GiveUp{};
      std::size_t i = 0;
      for (auto e : get(f.value().get_array())) fast.tensor(get(e), i++);
      tensors = true;
    } else if (key == "operators") {
      if (!tensors) throw GiveUp{};
      std::size_t i = 0;
      for (auto e : get(f.value().get_array())) fast.op(get(e), i++);
      operators = true;
    } else if (key == "cost") {
      // Small: read by the shared CostParams reader (its errors give up),
      // from the value as the streaming reader builds it (to_json: a key
      // given twice gives up, where parsing the value's text would keep
      // the last).
      const Reader r(source);
      CostParams scratch;
      read_cost_params(r, to_json(f.value(), 2), "/cost", cost != nullptr ? *cost : scratch);
    } else if (key == "training") {
      // Small, like "cost": the shared reader (its errors give up).
      g.set_training_pins(read_training_pins(Reader(source), to_json(f.value(), 2), "/training"));
    } else if (key == "description") {
      validate(f.value(), 1);
    } else {
      fast.unknown_root(key, f.value());
    }
    next_field_follows(doc);
  }
  // Nothing may follow the object ("{} trailing" is not JSON).
  const char* rest = nullptr;
  if (doc.current_location().get(rest) != simdjson::OUT_OF_BOUNDS) throw GiveUp{};
  if (!tensors || !operators) throw GiveUp{};
  if (name) g.set_name(std::move(*name));
}

}  // namespace

bool read_graph_fast(std::string_view text_in, std::size_t capacity, const std::string& source,
                     ir::Graph& g, CostParams* cost, UnknownKeys& keys) {
  if (capacity < text_in.size() + simdjson::SIMDJSON_PADDING) return false;
  try {
    read_document(text_in, capacity, source, g, cost, keys);
    return true;
  } catch (const GiveUp&) {
    return false;
  } catch (const Error&) {
    // A graph check (duplicate name, second producer) or the cost object:
    // the streaming reader reports it with the file's path.
    return false;
  }
}

}  // namespace recsearch::io::detail
