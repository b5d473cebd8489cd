// SPDX-License-Identifier: Apache-2.0
// Model specs (defaults, checks, published presets) and the two sinks of the
// generators: an in-memory ir::Graph and a streamed graph JSON file.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"

namespace recsearch::gen {

namespace {

struct Preset {
  const char* name;
  ModelSpec spec;
};

ModelSpec gpt(std::int64_t hidden, std::int64_t layers, std::int64_t heads,
              std::int64_t seq = 1024) {
  ModelSpec s;
  s.family = Family::Gpt;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.seq = seq;
  s.vocab = 51200;
  return s;
}

ModelSpec bert(std::int64_t hidden, std::int64_t layers, std::int64_t heads) {
  ModelSpec s;
  s.family = Family::Bert;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.seq = 512;
  s.vocab = 30522;
  return s;
}

ModelSpec resnet(std::int64_t depth, std::int64_t width = 1) {
  ModelSpec s;
  s.family = Family::ResNet;
  s.depth = depth;
  s.width = width;
  return s;
}

ModelSpec moe(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t experts) {
  ModelSpec s;
  s.family = Family::Moe;
  s.hidden = hidden;
  s.layers = layers;
  s.heads = heads;
  s.experts = experts;
  s.seq = 1024;
  s.vocab = 32000;
  return s;
}

// Published sizes: GPT-3 / Megatron-LM (hidden, layers, heads), BERT,
// torchvision ResNets and Wide-ResNets, GShard MoE at the sizes used by
// auto-parallel benchmarks.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"gpt-350m", gpt(1024, 24, 16)},
      {"gpt-760m", gpt(1536, 24, 16)},
      {"gpt-1.3b", gpt(2048, 24, 32)},
      {"gpt-2.6b", gpt(2560, 32, 32)},
      {"gpt-6.7b", gpt(4096, 32, 32)},
      {"gpt-15b", gpt(5120, 48, 40)},
      {"gpt-39b", gpt(8192, 48, 64)},
      {"gpt-175b", gpt(12288, 96, 96, 2048)},
      {"gpt-1t", gpt(25600, 128, 160, 2048)},
      {"bert-base", bert(768, 12, 12)},
      {"bert-large", bert(1024, 24, 16)},
      {"resnet18", resnet(18)},
      {"resnet34", resnet(34)},
      {"resnet50", resnet(50)},
      {"resnet101", resnet(101)},
      {"resnet152", resnet(152)},
      {"wide-resnet50-2", resnet(50, 2)},
      {"wide-resnet101-2", resnet(101, 2)},
      {"moe-380m", moe(768, 8, 16, 8)},
      {"moe-690m", moe(768, 8, 16, 16)},
      {"moe-1.3b", moe(768, 16, 16, 16)},
      {"moe-2.4b", moe(1024, 16, 16, 16)},
      {"moe-10b", moe(1536, 16, 16, 32)},
      {"moe-27b", moe(2048, 16, 16, 48)},
      {"moe-70b", moe(2048, 32, 16, 64)},
  };
  return p;
}

void set_default(std::int64_t& field, std::int64_t def) {
  if (field == 0) field = def;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(Errc::kUsage, "gen: " + what);
}

void require_positive(std::int64_t v, const char* field) {
  require(v > 0, std::string("--") + field + " must be positive, got " + std::to_string(v));
}

// The product of dims, or a usage error naming what overflows: a generated
// graph must be one the reader accepts.
void require_fits(std::initializer_list<std::int64_t> dims, const char* what) {
  std::int64_t p = 1;
  for (const auto d : dims) {
    if (__builtin_mul_overflow(p, d, &p)) {
      throw Error(Errc::kUsage, std::string("gen: the ") + what +
                                    " tensor has more than 2^63 elements; reduce the sizes");
    }
  }
}

// ---- sinks -------------------------------------------------------------------
class GraphBuilderSink final : public GraphSink {
 public:
  explicit GraphBuilderSink(ir::Graph& g) : g_(g) {}

  void tensor(std::string_view name, std::span<const std::int64_t> shape, ir::DType dtype,
              ir::TensorKind kind) override {
    g_.add_tensor(std::string(name), ir::Shape(shape.begin(), shape.end()), dtype,
                  kind == ir::TensorKind::Activation ? ir::TensorKind::Input : kind);
  }
  void op(std::string_view name, std::string_view type, std::span<const std::string_view> inputs,
          std::span<const std::string_view> outputs, const ir::Attrs& attrs) override {
    ir::Operator o;
    o.name = name;
    o.type = type;
    o.attrs = attrs;
    for (const auto n : inputs) o.inputs.push_back(id(n));
    for (const auto n : outputs) o.outputs.push_back(id(n));
    g_.add_operator(std::move(o));
  }

 private:
  ir::TensorId id(std::string_view n) const {
    const auto t = g_.find_tensor(n);
    if (!t)
      throw Error(Errc::kInternal,
                  "gen: operator names undeclared tensor '" + std::string(n) + "'");
    return *t;
  }
  ir::Graph& g_;
};

class CountingSink final : public GraphSink {
 public:
  void tensor(std::string_view, std::span<const std::int64_t>, ir::DType, ir::TensorKind) override {
    ++tensors;
  }
  void op(std::string_view, std::string_view, std::span<const std::string_view>,
          std::span<const std::string_view>, const ir::Attrs&) override {
    ++ops;
  }
  std::uint64_t tensors = 0;
  std::uint64_t ops = 0;
};

// Appends JSON text to a buffer flushed to the stream in large blocks: the
// writer's cost is then formatting, not stream calls.
class JsonStreamSink final : public GraphSink {
 public:
  enum class Pass { Tensors, Operators };

  JsonStreamSink(std::ostream& out, std::uint64_t total,
                 void (*on_progress)(std::uint64_t, std::uint64_t, void*), void* ctx)
      : out_(out), total_(total), on_progress_(on_progress), ctx_(ctx) {
    buf_.reserve(kFlush + 4096);
  }

  void set_pass(Pass p) {
    pass_ = p;
    first_ = true;
  }

  void tensor(std::string_view name, std::span<const std::int64_t> shape, ir::DType dtype,
              ir::TensorKind kind) override {
    if (pass_ != Pass::Tensors) return;
    sep();
    buf_ += "{\"name\":";
    str(name);
    buf_ += ",\"shape\":[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) buf_ += ',';
      integer(shape[i]);
    }
    buf_ += "],\"dtype\":\"";
    buf_ += ir::dtype_name(dtype);
    buf_ += '"';
    if (kind == ir::TensorKind::Parameter) buf_ += ",\"kind\":\"parameter\"";
    if (kind == ir::TensorKind::Constant) buf_ += ",\"kind\":\"constant\"";
    buf_ += '}';
    item();
  }

  void op(std::string_view name, std::string_view type, std::span<const std::string_view> inputs,
          std::span<const std::string_view> outputs, const ir::Attrs& attrs) override {
    if (pass_ != Pass::Operators) return;
    sep();
    buf_ += "{\"name\":";
    str(name);
    buf_ += ",\"type\":";
    str(type);
    buf_ += ",\"inputs\":";
    names(inputs);
    buf_ += ",\"outputs\":";
    names(outputs);
    if (!attrs.empty()) {
      buf_ += ",\"attrs\":{";
      bool first = true;
      for (const auto& [k, v] : attrs.items()) {
        if (!first) buf_ += ',';
        first = false;
        str(k);
        buf_ += ':';
        value(v);
      }
      buf_ += '}';
    }
    buf_ += '}';
    item();
  }

  void raw(std::string_view s) { buf_ += s; }
  void quoted(std::string_view s) { str(s); }

  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
    if (!out_) throw Error(Errc::kIo, "gen: writing the graph failed (disk full or closed pipe?)");
  }

 private:
  static constexpr std::size_t kFlush = 1 << 20;

  void sep() {
    if (!first_) buf_ += ",\n";
    first_ = false;
  }
  void item() {
    ++done_;
    if (buf_.size() >= kFlush) {
      flush();
      if (on_progress_ != nullptr) on_progress_(done_, total_, ctx_);
    }
  }
  void integer(std::int64_t v) {
    char tmp[24];
    const int n = std::snprintf(tmp, sizeof tmp, "%" PRId64, v);
    buf_.append(tmp, static_cast<std::size_t>(n));
  }
  void real(double v) {
    char tmp[32];
    int n = std::snprintf(tmp, sizeof tmp, "%.17g", v);
    buf_.append(tmp, static_cast<std::size_t>(n));
    // Keep it a float for the reader ("1" would read back as an integer).
    if (std::string_view(tmp, static_cast<std::size_t>(n)).find_first_of(".eEn") ==
        std::string_view::npos) {
      buf_ += ".0";
    }
  }
  void str(std::string_view s) {
    buf_ += '"';
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        buf_ += '\\';
        buf_ += c;
      } else if (u < 0x20) {
        char tmp[8];
        std::snprintf(tmp, sizeof tmp, "\\u%04x", u);
        buf_ += tmp;
      } else {
        buf_ += c;
      }
    }
    buf_ += '"';
  }
  void names(std::span<const std::string_view> ns) {
    buf_ += '[';
    for (std::size_t i = 0; i < ns.size(); ++i) {
      if (i > 0) buf_ += ',';
      str(ns[i]);
    }
    buf_ += ']';
  }
  void value(const ir::AttrValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, bool>) {
            buf_ += x ? "true" : "false";
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            integer(x);
          } else if constexpr (std::is_same_v<T, double>) {
            real(x);
          } else if constexpr (std::is_same_v<T, std::string>) {
            str(x);
          } else {
            buf_ += '[';
            for (std::size_t i = 0; i < x.size(); ++i) {
              if (i > 0) buf_ += ',';
              using E = std::decay_t<decltype(x[i])>;
              if constexpr (std::is_same_v<E, std::int64_t>) {
                integer(x[i]);
              } else if constexpr (std::is_same_v<E, double>) {
                real(x[i]);
              } else {
                str(x[i]);
              }
            }
            buf_ += ']';
          }
        },
        v);
  }

  std::ostream& out_;
  std::string buf_;
  Pass pass_ = Pass::Tensors;
  bool first_ = true;
  std::uint64_t done_ = 0;
  std::uint64_t total_;
  void (*on_progress_)(std::uint64_t, std::uint64_t, void*);
  void* ctx_;
};

std::string default_name(const ModelSpec& m) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  switch (m.family) {
    case Family::Mlp: return "mlp-" + n(m.layers) + "x" + n(m.hidden);
    case Family::Gpt: return "gpt-h" + n(m.hidden) + "-l" + n(m.layers);
    case Family::Bert: return "bert-h" + n(m.hidden) + "-l" + n(m.layers);
    case Family::Moe: return "moe-h" + n(m.hidden) + "-l" + n(m.layers) + "-e" + n(m.experts);
    case Family::ResNet:
      return (m.width > 1 ? "wide-resnet" : "resnet") + n(m.depth) +
             (m.width > 1 ? "-" + n(m.width) : "");
    case Family::Random: return "random-" + n(m.ops) + "-s" + std::to_string(m.seed);
  }
  return "graph";
}

}  // namespace

std::string_view family_name(Family f) noexcept {
  switch (f) {
    case Family::Mlp: return "mlp";
    case Family::Gpt: return "gpt";
    case Family::Bert: return "bert";
    case Family::ResNet: return "resnet";
    case Family::Moe: return "moe";
    case Family::Random: return "random";
  }
  return "gpt";
}

Family parse_family(std::string_view s) {
  if (s == "mlp") return Family::Mlp;
  if (s == "gpt") return Family::Gpt;
  if (s == "bert") return Family::Bert;
  if (s == "resnet" || s == "wide-resnet") return Family::ResNet;
  if (s == "moe") return Family::Moe;
  if (s == "random") return Family::Random;
  throw Error(Errc::kUsage, "gen: unknown model '" + std::string(s) +
                                "' (expected mlp, gpt, bert, resnet, wide-resnet, moe or random)");
}

std::string_view attention_name(AttentionLayout a) noexcept {
  switch (a) {
    case AttentionLayout::Explicit: return "explicit";
    case AttentionLayout::Megatron: return "megatron";
    case AttentionLayout::Flash: return "flash";
  }
  return "explicit";
}

AttentionLayout parse_attention(std::string_view s) {
  if (s == "explicit") return AttentionLayout::Explicit;
  if (s == "megatron") return AttentionLayout::Megatron;
  if (s == "flash") return AttentionLayout::Flash;
  throw Error(Errc::kUsage, "gen: unknown attention layout '" + std::string(s) +
                                "' (expected explicit, megatron or flash)");
}

ModelSpec preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (name == p.name) {
      ModelSpec s = p.spec;
      s.name = p.name;
      return s;
    }
  }
  std::string all;
  for (const auto& p : presets()) all += std::string(all.empty() ? "" : ", ") + p.name;
  throw Error(Errc::kUsage, "gen: unknown preset '" + std::string(name) + "' (known: " + all + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.emplace_back(p.name);
  return out;
}

namespace {

// Fills the family's defaults into the fields left 0.
void set_defaults(ModelSpec& m) {
  switch (m.family) {
    case Family::Mlp:
      set_default(m.layers, 4);
      set_default(m.hidden, 1024);
      set_default(m.batch, 64);
      set_default(m.classes, 1000);
      break;
    case Family::Gpt:
    case Family::Moe:
    case Family::Bert: {
      const bool is_bert = m.family == Family::Bert;
      set_default(m.layers, is_bert ? 24 : 12);
      set_default(m.hidden, is_bert ? 1024 : 768);
      set_default(m.heads, is_bert ? 16 : 12);
      set_default(m.seq, is_bert ? 512 : 1024);
      set_default(m.vocab, is_bert ? 30522 : (m.family == Family::Moe ? 32000 : 51200));
      set_default(m.batch, is_bert ? 32 : 8);
      if (m.family == Family::Moe) set_default(m.experts, 16);
      break;
    }
    case Family::ResNet:
      set_default(m.depth, 50);
      set_default(m.width, 1);
      set_default(m.channels, 64);
      set_default(m.image, 224);
      set_default(m.classes, 1000);
      set_default(m.batch, 32);
      break;
    case Family::Random:
      set_default(m.ops, 1000);
      set_default(m.batch, 64);
      break;
  }
}

// The family's size checks: what it needs positive, and every big tensor
// small enough to address.
void check_family_sizes(const ModelSpec& m) {
  switch (m.family) {
    case Family::Mlp:
      require_positive(m.layers, "layers");
      require_fits({m.batch, m.hidden}, "activation");
      require_fits({m.hidden, m.hidden}, "weight");
      require_fits({m.hidden, m.classes}, "head weight");
      break;
    case Family::Gpt:
    case Family::Moe:
    case Family::Bert:
      require_positive(m.layers, "layers");
      require(m.hidden % m.heads == 0, "--hidden (" + std::to_string(m.hidden) +
                                           ") must be divisible by --heads (" +
                                           std::to_string(m.heads) + ")");
      require_fits({m.batch, m.seq, m.vocab}, "logits");
      require_fits({m.batch, m.heads, m.seq, m.seq}, "attention scores");
      require_fits({m.batch, m.seq, 4, m.hidden}, "feed-forward");
      require_fits({m.hidden, 4, m.hidden}, "feed-forward weight");
      if (m.family == Family::Moe) {
        require_positive(m.experts, "experts");
        require_fits({m.experts, m.hidden, 4, m.hidden}, "expert weight");
        require_fits(
            {m.experts, m.batch, std::max<std::int64_t>(1, 2 * m.seq / m.experts), 4, m.hidden},
            "expert activation");
      }
      break;
    case Family::ResNet:
      require(m.depth == 18 || m.depth == 34 || m.depth == 50 || m.depth == 101 || m.depth == 152,
              "--depth must be 18, 34, 50, 101 or 152, got " + std::to_string(m.depth));
      require(m.image >= 32, "--image must be at least 32, got " + std::to_string(m.image));
      require_fits({m.batch, m.channels, m.width, 32, m.image, m.image}, "activation");
      break;
    case Family::Random:
      require_positive(m.ops, "ops");
      require_fits({m.batch, 4096}, "activation");
      break;
  }
}

}  // namespace

ModelSpec resolved(const ModelSpec& spec) {
  ModelSpec m = spec;
  set_defaults(m);
  for (const auto& [v, f] : {std::pair{m.layers, "layers"},
                             {m.hidden, "hidden"},
                             {m.heads, "heads"},
                             {m.seq, "seq"},
                             {m.vocab, "vocab"},
                             {m.batch, "batch"},
                             {m.experts, "experts"},
                             {m.width, "width"},
                             {m.channels, "channels"},
                             {m.image, "image"},
                             {m.classes, "classes"},
                             {m.ops, "ops"}}) {
    require(v >= 0, std::string("--") + f + " must be positive, got " + std::to_string(v));
  }
  require_positive(m.batch, "batch");
  check_family_sizes(m);
  // fused_attention is the older spelling of the Flash layout.
  require(!m.fused_attention || m.attention != AttentionLayout::Megatron,
          "--fused-attention (flash) contradicts --attention megatron");
  if (m.fused_attention) m.attention = AttentionLayout::Flash;
  m.fused_attention = m.attention == AttentionLayout::Flash;
  if (m.name.empty()) m.name = default_name(m);
  return m;
}

std::uint64_t count_operators(const ModelSpec& spec) {
  CountingSink c;
  generate(spec, c);
  return c.ops;
}

ir::Graph build_graph(const ModelSpec& spec) {
  const ModelSpec m = resolved(spec);
  ir::Graph g(m.name);
  GraphBuilderSink sink(g);
  generate(m, sink);
  g.finalize();
  return g;
}

void write_graph_json(const ModelSpec& spec, std::ostream& out,
                      void (*on_progress)(std::uint64_t, std::uint64_t, void*), void* ctx) {
  const ModelSpec m = resolved(spec);
  CountingSink count;
  generate(m, count);
  JsonStreamSink sink(out, count.tensors + count.ops, on_progress, ctx);
  sink.raw("{\"format\":\"recsearch.graph\",\"version\":1,\"name\":");
  sink.quoted(m.name);
  sink.raw(",\n\"tensors\":[\n");
  sink.set_pass(JsonStreamSink::Pass::Tensors);
  generate(m, sink);
  sink.raw("\n],\n\"operators\":[\n");
  sink.set_pass(JsonStreamSink::Pass::Operators);
  generate(m, sink);
  sink.raw("\n]}\n");
  sink.flush();
  out.flush();
  if (on_progress != nullptr)
    on_progress(count.tensors + count.ops, count.tensors + count.ops, ctx);
}

}  // namespace recsearch::gen
