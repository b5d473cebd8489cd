// SPDX-License-Identifier: Apache-2.0
// The C API, first half: library queries and errors, building graphs (by
// calls or from JSON), clusters and options. Every entry point validates its
// arguments itself (NULL handles, unknown names, ranks) before the C++
// library sees them, and runs inside capi::guard.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "handles.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::capi {
namespace {

thread_local std::string t_message;
thread_local int t_code = 0;
thread_local const char* t_fallback = nullptr;  // when even the message could not be stored

// Names given by C callers may be NULL or (from foreign bindings) hold odd
// bytes; messages quote them verbatim, which is enough.
std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

ir::OpId find_op(const ir::Graph& g, const char* name) {
  const std::string n = need_string(name, "operator name");
  const auto id = g.find_operator(n);
  if (!id) throw Error(Errc::kUnknownName, "unknown operator " + quoted(n));
  return *id;
}

// Every change to a graph drops its prepared form.
ir::Graph& edit(rs_graph* g) {
  need(g, "graph");
  const std::lock_guard lock(g->mu);
  g->ready.reset();
  return g->draft;
}

void set_attr(rs_graph* g, const char* op, const char* attr, ir::AttrValue v) {
  ir::Graph& draft = edit(g);
  const ir::OpId id = find_op(draft, op);
  const std::string name = need_string(attr, "attribute name");
  if (name.empty()) throw Error(Errc::kUsage, "attribute name must not be empty");
  draft.mutable_op(id).attrs.set(name, std::move(v));
}

std::vector<std::string> strings(const char* const* v, std::size_t n, const char* what) {
  if (n > 0) need(v, what);
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(need_string(v[i], (std::string(what) + " entry").c_str()));
  return out;
}

// Rebuilds the validated cluster after a change; on error the change is
// undone. Without levels there is nothing to build yet, but the device
// model is still checked (against a one-device level).
void rebuild(rs_cluster* c, std::vector<Level> levels, DeviceSpec device) {
  std::optional<Cluster> built;
  if (levels.empty()) {
    (void)Cluster(c->name, {Level{"device", 1}}, device);
  } else {
    built.emplace(c->name, levels, device);
  }
  c->levels = std::move(levels);
  c->device = device;
  c->cluster = std::move(built);
}

Mode parse_mode(const std::string& s) {
  if (s == "train") return Mode::Train;
  if (s == "infer") return Mode::Infer;
  throw Error(Errc::kUsage, "unknown mode " + quoted(s) + " (train or infer)");
}

}  // namespace

void set_error(int code, std::string_view message) noexcept {
  t_code = code;
  try {
    // Messages quote input (names, JSON excerpts) that may hold any byte; a
    // NUL would cut the C string short and control bytes garble terminals.
    static constexpr char kHex[] = "0123456789abcdef";
    t_message.clear();
    for (const char ch : message) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 0x20 || u == 0x7f) {
        t_message += "\\x";
        t_message += kHex[u >> 4];
        t_message += kHex[u & 15];
      } else {
        t_message += ch;
      }
    }
    t_fallback = nullptr;
  } catch (...) {
    t_fallback = "out of memory (while recording an error) [E401]";
  }
}

void set_error(const Error& e) noexcept {
  try {
    std::string s;
    if (!e.file().empty()) s += e.file() + ": ";
    if (!e.json_path().empty()) s += e.json_path() + ": ";
    s += e.detail();
    s += " [E" + std::to_string(static_cast<int>(e.code())) + "]";
    set_error(static_cast<int>(e.code()), s);
  } catch (...) {
    set_error(static_cast<int>(e.code()), e.what());
  }
}

void set_internal_error(const char* what) noexcept {
  try {
    set_error(static_cast<int>(Errc::kInternal),
              std::string("internal error: ") + what + " (please report) [E501]");
  } catch (...) {
    set_error(static_cast<int>(Errc::kInternal), what);
  }
}

std::string need_string(const char* s, const char* what) {
  need(s, what);
  return s;
}

std::shared_ptr<const Problem> prepare(const rs_graph& g) {
  const std::lock_guard lock(g.mu);
  if (!g.ready) g.ready = std::make_shared<const Problem>(g.draft, g.cost, g.source);
  return g.ready;
}

void give_string(const std::string& s, char** out, std::size_t* len) {
  need(out, "output pointer");
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  *out = p;
  if (len != nullptr) *len = s.size();
}

const Cluster& cluster_of(const rs_cluster& c) {
  if (!c.cluster)
    throw Error(Errc::kCluster,
                "cluster '" + c.name + "' has no levels yet (add them with rs_cluster_add_level)",
                "/levels");
  return *c.cluster;
}

CostParams merged_cost(const rs_graph& g, const rs_cluster* c, const rs_options* o) {
  CostParams cost = g.cost;
  // The cluster file's coefficients override only the keys it sets: read
  // again over the graph's, as the CLI does.
  if (c != nullptr && c->file_text) (void)io::parse_cluster(*c->file_text, c->file_source, &cost);
  if (o != nullptr)
    for (const std::string& text : o->cost_json) io::parse_cost_params(text, "<options>", cost);
  if (o != nullptr && o->model) cost.model = o->model;
  return cost;
}

// rs_cost_callbacks as a cost::CostModel: the symbolic price first, then the
// user's callback, if any, over it.
class CallbackModel final : public cost::CostModel {
 public:
  explicit CallbackModel(const rs_cost_callbacks& cb) : cb_(cb) {}

  [[nodiscard]] double collective_seconds(cost::Collective c, double group_bytes, const Cut& cut,
                                          const CostParams& p) const noexcept override {
    const double symbolic = CostModel::collective_seconds(c, group_bytes, cut, p);
    if (cb_.collective_seconds == nullptr) return symbolic;
    // collective_name views string literals, so data() is NUL-terminated.
    return cb_.collective_seconds(cost::collective_name(c).data(), group_bytes, cut.size,
                                  cut.bandwidth_Bps, cut.latency_s, symbolic, cb_.user);
  }

  [[nodiscard]] double compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                       const CostParams& p, Mode mode) const noexcept override {
    const double symbolic = CostModel::compute_seconds(flops, bytes, dev, p, mode);
    if (cb_.compute_seconds == nullptr) return symbolic;
    return cb_.compute_seconds(flops, bytes, symbolic, cb_.user);
  }

 private:
  rs_cost_callbacks cb_;
};

}  // namespace recsearch::capi

using namespace recsearch;
using capi::guard;
using capi::need;
using capi::need_string;

extern "C" {

const char* rs_version(void) { return RS_VERSION_STRING; }

int rs_version_number(void) {
  return RS_VERSION_MAJOR * 10000 + RS_VERSION_MINOR * 100 + RS_VERSION_PATCH;
}

const char* rs_last_error(void) {
  if (capi::t_fallback != nullptr) return capi::t_fallback;
  return capi::t_message.c_str();
}

int rs_last_error_code(void) { return capi::t_code; }

const char* rs_status_name(rs_status status) {
  switch (status) {
    case RS_OK: return "ok";
    case RS_BAD_INPUT: return "bad_input";
    case RS_USAGE: return "usage";
    case RS_NO_FIT: return "no_fit";
    case RS_RUNTIME: return "runtime";
    case RS_INTERNAL: return "internal";
  }
  return "unknown";
}

void rs_free(char* p) { std::free(p); }

// ---- graphs ----------------------------------------------------------------

rs_status rs_graph_create(const char* name, rs_graph** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    auto g = std::make_unique<rs_graph>();
    if (name != nullptr) g->draft.set_name(name);
    *out = g.release();
  });
}

rs_status rs_graph_from_json(const char* text, size_t len, const char* source, rs_graph** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    if (len > 0) need(text, "text");
    auto g = std::make_unique<rs_graph>();
    g->source = source != nullptr ? source : "<memory>";
    g->draft = io::parse_graph(std::string_view(len > 0 ? text : "", len), g->source, &g->cost);
    (void)capi::prepare(*g);  // shapes and attributes are part of reading a graph
    *out = g.release();
  });
}

rs_status rs_graph_read_file(const char* path, rs_graph** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    const std::string p = need_string(path, "path");
    const std::string text = io::read_text_file(p);
    auto g = std::make_unique<rs_graph>();
    g->source = p;
    g->draft = io::parse_graph(text, p, &g->cost);
    (void)capi::prepare(*g);
    *out = g.release();
  });
}

void rs_graph_free(rs_graph* g) { delete g; }

rs_status rs_graph_add_tensor(rs_graph* g, const char* name, const int64_t* shape, size_t rank,
                              const char* dtype, const char* kind) {
  return guard([&] {
    ir::Graph& draft = capi::edit(g);
    const std::string n = need_string(name, "tensor name");
    if (rank > 0) need(shape, "shape");
    const std::string path = "/tensors/" + std::to_string(draft.num_tensors());
    ir::Shape s(shape, shape + rank);
    for (std::size_t d = 0; d < rank; ++d)
      if (s[d] <= 0)
        throw Error(Errc::kShape,
                    "tensor " + capi::quoted(n) + ": dimension " + std::to_string(d) +
                        " must be positive, got " + std::to_string(s[d]),
                    path + "/shape/" + std::to_string(d));
    if (!ir::checked_num_elements(s))
      throw Error(Errc::kShape,
                  "tensor " + capi::quoted(n) + ": number of elements " + ir::shape_to_string(s) +
                      " overflows int64",
                  path + "/shape");
    const std::string dt = need_string(dtype, "dtype");
    const auto parsed_dtype = ir::parse_dtype(dt);
    if (!parsed_dtype)
      throw Error(Errc::kUsage, "unknown dtype " + capi::quoted(dt) +
                                    " (f64 f32 f16 bf16 f8 i64 i32 i16 i8 u8 bool)");
    ir::TensorKind k = ir::TensorKind::Input;
    if (kind != nullptr) {
      const auto parsed_kind = ir::parse_tensor_kind(kind);
      if (!parsed_kind || *parsed_kind == ir::TensorKind::Activation)
        throw Error(Errc::kUsage, "unknown tensor kind " + capi::quoted(kind) +
                                      " (input, parameter or constant)");
      k = *parsed_kind;
    }
    (void)draft.add_tensor(n, std::move(s), *parsed_dtype, k);
  });
}

rs_status rs_graph_add_operator(rs_graph* g, const char* name, const char* type,
                                const char* const* inputs, size_t num_inputs,
                                const char* const* outputs, size_t num_outputs) {
  return guard([&] {
    ir::Graph& draft = capi::edit(g);
    ir::Operator op;
    op.name = need_string(name, "operator name");
    op.type = need_string(type, "operator type");
    const std::string path = "/operators/" + std::to_string(draft.num_operators());
    if (op.type.empty())
      throw Error(Errc::kSchema, "operator type must not be empty", path + "/type");
    const auto refs = [&](const char* const* names, std::size_t n, const char* field) {
      const std::vector<std::string> v = capi::strings(names, n, field);
      std::vector<ir::TensorId> ids;
      ids.reserve(n);
      for (std::size_t j = 0; j < n; ++j) {
        const auto id = draft.find_tensor(v[j]);
        if (!id)
          throw Error(
              Errc::kUnknownName,
              "operator " + capi::quoted(op.name) + ": unknown tensor " + capi::quoted(v[j]),
              path + "/" + field + "/" + std::to_string(j));
        ids.push_back(*id);
      }
      return ids;
    };
    op.inputs = refs(inputs, num_inputs, "inputs");
    op.outputs = refs(outputs, num_outputs, "outputs");
    (void)draft.add_operator(std::move(op));
  });
}

rs_status rs_graph_set_attr_int(rs_graph* g, const char* op, const char* attr, int64_t value) {
  return guard([&] { capi::set_attr(g, op, attr, std::int64_t{value}); });
}

rs_status rs_graph_set_attr_float(rs_graph* g, const char* op, const char* attr, double value) {
  return guard([&] {
    if (!std::isfinite(value)) throw Error(Errc::kUsage, "attribute value must be finite");
    capi::set_attr(g, op, attr, value);
  });
}

rs_status rs_graph_set_attr_bool(rs_graph* g, const char* op, const char* attr, int value) {
  return guard([&] { capi::set_attr(g, op, attr, value != 0); });
}

rs_status rs_graph_set_attr_string(rs_graph* g, const char* op, const char* attr,
                                   const char* value) {
  return guard([&] { capi::set_attr(g, op, attr, need_string(value, "attribute value")); });
}

rs_status rs_graph_set_attr_ints(rs_graph* g, const char* op, const char* attr,
                                 const int64_t* values, size_t count) {
  return guard([&] {
    if (count > 0) need(values, "values");
    capi::set_attr(g, op, attr, std::vector<std::int64_t>(values, values + count));
  });
}

rs_status rs_graph_set_attr_floats(rs_graph* g, const char* op, const char* attr,
                                   const double* values, size_t count) {
  return guard([&] {
    if (count > 0) need(values, "values");
    std::vector<double> v(values, values + count);
    for (double x : v)
      if (!std::isfinite(x)) throw Error(Errc::kUsage, "attribute values must be finite");
    capi::set_attr(g, op, attr, std::move(v));
  });
}

rs_status rs_graph_set_attr_strings(rs_graph* g, const char* op, const char* attr,
                                    const char* const* values, size_t count) {
  return guard([&] { capi::set_attr(g, op, attr, capi::strings(values, count, "values")); });
}

rs_status rs_graph_pin_strategy(rs_graph* g, const char* op, const int64_t* splits,
                                const size_t* ranks, size_t num_inputs) {
  return guard([&] {
    ir::Graph& draft = capi::edit(g);
    const ir::OpId id = capi::find_op(draft, op);
    const ir::Operator& o = draft.op(id);
    const std::string path = "/operators/" + std::to_string(id) + "/strategy";
    if (num_inputs != o.inputs.size())
      throw Error(Errc::kStrategy,
                  "operator " + capi::quoted(o.name) + " has " + std::to_string(o.inputs.size()) +
                      " input(s), the strategy gives " + std::to_string(num_inputs),
                  path);
    if (num_inputs > 0) need(ranks, "ranks");
    ir::Strategy s;
    std::size_t at = 0;
    for (std::size_t j = 0; j < num_inputs; ++j) {
      const std::size_t rank = draft.tensor(o.inputs[j]).rank();
      if (ranks[j] != rank)
        throw Error(Errc::kStrategy,
                    "operator " + capi::quoted(o.name) + ": input " + std::to_string(j) + " ('" +
                        draft.tensor(o.inputs[j]).name + "') has rank " + std::to_string(rank) +
                        ", the strategy gives " + std::to_string(ranks[j]) + " split count(s)",
                    path + "/" + std::to_string(j));
      if (rank > 0) need(splits, "splits");
      std::vector<std::int64_t> v(splits + at, splits + at + rank);
      for (std::size_t d = 0; d < rank; ++d)
        if (v[d] < 1)
          throw Error(Errc::kStrategy, "split counts must be positive, got " + std::to_string(v[d]),
                      path + "/" + std::to_string(j) + "/" + std::to_string(d));
      at += rank;
      s.push_back(std::move(v));
    }
    draft.mutable_op(id).strategy = std::move(s);
  });
}

rs_status rs_graph_set_allowed(rs_graph* g, const char* op, const char* const* loops,
                               size_t count) {
  return guard([&] {
    ir::Graph& draft = capi::edit(g);
    const ir::OpId id = capi::find_op(draft, op);
    draft.mutable_op(id).allowed = capi::strings(loops, count, "loops");
  });
}

rs_status rs_graph_validate(rs_graph* g) {
  return guard([&] {
    need(g, "graph");
    (void)capi::prepare(*g);
  });
}

rs_status rs_graph_num_tensors(const rs_graph* g, size_t* out) {
  return guard([&] {
    need(g, "graph");
    need(out, "output pointer");
    *out = g->draft.num_tensors();
  });
}

rs_status rs_graph_num_operators(const rs_graph* g, size_t* out) {
  return guard([&] {
    need(g, "graph");
    need(out, "output pointer");
    *out = g->draft.num_operators();
  });
}

rs_status rs_graph_to_json(const rs_graph* g, char** out, size_t* len) {
  return guard([&] {
    need(g, "graph");
    capi::give_string(io::graph_to_json(g->draft), out, len);
  });
}

// ---- clusters --------------------------------------------------------------

rs_status rs_cluster_create_flat(int64_t devices, rs_cluster** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    const Cluster built = Cluster::flat(devices);
    auto c = std::make_unique<rs_cluster>();
    c->name = built.name();
    c->levels = built.levels();
    c->device = built.device();
    c->cluster = built;
    *out = c.release();
  });
}

rs_status rs_cluster_create_mesh(const int64_t* dims, size_t count, rs_cluster** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    if (count > 0) need(dims, "dims");
    const Cluster built = Cluster::mesh(std::vector<std::int64_t>(dims, dims + count));
    auto c = std::make_unique<rs_cluster>();
    c->name = built.name();
    c->levels = built.levels();
    c->device = built.device();
    c->cluster = built;
    *out = c.release();
  });
}

rs_status rs_cluster_create(const char* name, rs_cluster** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    auto c = std::make_unique<rs_cluster>();
    if (name != nullptr) c->name = name;
    capi::rebuild(c.get(), {}, DeviceSpec{});
    *out = c.release();
  });
}

namespace {

rs_status cluster_from_json(const char* text, size_t len, const char* source, bool strict,
                            rs_cluster** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    if (len > 0) need(text, "text");
    auto c = std::make_unique<rs_cluster>();
    c->file_source = source != nullptr ? source : "<memory>";
    std::string t(len > 0 ? text : "", len);
    const Cluster built =
        io::parse_cluster(t, c->file_source, nullptr, io::UnknownKeys{.strict = strict});
    c->file_text = std::move(t);
    c->name = built.name();
    c->levels = built.levels();
    c->device = built.device();
    c->cluster = built;
    *out = c.release();
  });
}

}  // namespace

rs_status rs_cluster_from_json(const char* text, size_t len, const char* source, rs_cluster** out) {
  return cluster_from_json(text, len, source, false, out);
}

rs_status rs_cluster_from_json_strict(const char* text, size_t len, const char* source,
                                      rs_cluster** out) {
  return cluster_from_json(text, len, source, true, out);
}

void rs_cluster_free(rs_cluster* c) { delete c; }

rs_status rs_cluster_add_level(rs_cluster* c, const char* name, int64_t size, double bandwidth_GBps,
                               double latency_us) {
  return guard([&] {
    need(c, "cluster");
    std::vector<Level> levels = c->levels;
    levels.push_back(Level{need_string(name, "level name"), size, bandwidth_GBps, latency_us});
    capi::rebuild(c, std::move(levels), c->device);
  });
}

rs_status rs_cluster_set_device(rs_cluster* c, double peak_TFLOPs, double memory_GiB,
                                double memory_bandwidth_GBps) {
  return guard([&] {
    need(c, "cluster");
    capi::rebuild(c, c->levels, DeviceSpec{peak_TFLOPs, memory_GiB, memory_bandwidth_GBps});
  });
}

rs_status rs_cluster_num_devices(const rs_cluster* c, int64_t* out) {
  return guard([&] {
    need(c, "cluster");
    need(out, "output pointer");
    *out = c->cluster ? c->cluster->num_devices() : 1;
  });
}

// ---- options ---------------------------------------------------------------

rs_status rs_options_create(rs_options** out) {
  return guard([&] {
    need(out, "output pointer");
    *out = nullptr;
    *out = new rs_options();
  });
}

void rs_options_free(rs_options* o) { delete o; }

rs_status rs_options_set_mode(rs_options* o, const char* mode) {
  return guard([&] {
    need(o, "options");
    o->search.mode = capi::parse_mode(need_string(mode, "mode"));
    o->mode_set = true;
  });
}

rs_status rs_options_set_algorithm(rs_options* o, const char* algorithm) {
  return guard([&] {
    need(o, "options");
    const std::string a = need_string(algorithm, "algorithm");
    const auto parsed = search::parse_algorithm(a);
    if (!parsed)
      throw Error(Errc::kUsage, "unknown algorithm " + capi::quoted(a) +
                                    " (rec, data-parallel, megatron, grid, ilp or exhaustive)");
    o->search.algorithm = *parsed;
  });
}

rs_status rs_options_set_effort(rs_options* o, const char* effort) {
  return guard([&] {
    need(o, "options");
    const std::string e = need_string(effort, "effort");
    const auto parsed = search::parse_effort(e);
    if (!parsed)
      throw Error(Errc::kUsage, "unknown effort " + capi::quoted(e) + " (fast or default)");
    o->search.effort = *parsed;
  });
}

rs_status rs_options_set_threads(rs_options* o, int threads) {
  return guard([&] {
    need(o, "options");
    if (threads < 0 || threads > 65536)
      throw Error(Errc::kUsage,
                  "threads must be between 0 and 65536, got " + std::to_string(threads));
    o->search.threads = threads;
  });
}

rs_status rs_options_set_memory_budget(rs_options* o, double bytes) {
  return guard([&] {
    need(o, "options");
    if (!std::isfinite(bytes) || bytes <= 0)
      throw Error(Errc::kUsage, "memory budget must be a positive finite number of bytes");
    char buf[64];
    std::snprintf(buf, sizeof buf, "{\"memory_budget_bytes\": %.17g}", bytes);
    o->cost_json.emplace_back(buf);
  });
}

rs_status rs_options_set_training(rs_options* o, const char* recompute, int zero_stage,
                                  int64_t microbatches) {
  return guard([&] {
    need(o, "options");
    search::TrainingChoice t;
    if (recompute != nullptr && std::string(recompute) != "auto") {
      t.recompute = plan::parse_recompute(recompute);
      if (!t.recompute)
        throw Error(Errc::kUsage, "unknown recompute " + capi::quoted(recompute) +
                                      " (auto, none, selective or full)");
    }
    if (zero_stage < -1 || zero_stage > plan::kMaxZeroStage)
      throw Error(Errc::kUsage, "ZeRO stage must be 0 to 3, or -1 for the search to choose");
    if (zero_stage >= 0) t.zero_stage = zero_stage;
    if (microbatches < 0)
      throw Error(Errc::kUsage, "microbatches must be at least 1, or 0 for the search to choose");
    if (microbatches > 0) t.microbatches = microbatches;
    o->search.training = t;
  });
}

rs_status rs_options_set_cost(rs_options* o, const char* name, double value) {
  return guard([&] {
    need(o, "options");
    const std::string n = need_string(name, "coefficient name");
    if (!std::isfinite(value)) throw Error(Errc::kUsage, "coefficient value must be finite");
    // Checked against the known names (and ranges) by the JSON reader.
    for (char ch : n)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'))
        throw Error(Errc::kUsage, "unknown cost coefficient " + capi::quoted(n));
    std::string text;
    if (n == "count_latency" || n == "bucket_gradients" || n == "overlap" || n == "tf32") {
      text = "{\"" + n + "\": " + (value != 0 ? "true" : "false") + "}";
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", value);
      text = "{\"" + n + "\": " + buf + "}";
    }
    CostParams scratch;
    try {
      io::parse_cost_params(text, "<options>", scratch);
    } catch (const Error& e) {
      throw Error(Errc::kUsage, e.detail());
    }
    o->cost_json.push_back(std::move(text));
  });
}

rs_status rs_options_set_cost_callbacks(rs_options* o, const rs_cost_callbacks* callbacks) {
  return guard([&] {
    need(o, "options");
    o->model = callbacks == nullptr ? nullptr : std::make_shared<capi::CallbackModel>(*callbacks);
  });
}

rs_status rs_options_set_cost_json(rs_options* o, const char* text, size_t len) {
  return guard([&] {
    need(o, "options");
    if (len > 0) need(text, "text");
    std::string t(len > 0 ? text : "", len);
    CostParams scratch;
    io::parse_cost_params(t, "<options>", scratch);
    o->cost_json.push_back(std::move(t));
  });
}

}  // extern "C"
