// SPDX-License-Identifier: Apache-2.0
// Synthetic graphs at realistic operator granularity: `recsearch gen`, the
// scaling experiments and the model zoo all come from here.
//
// A generator is a deterministic function of a ModelSpec that emits tensors
// and operators into a GraphSink, in an order where every tensor is emitted
// before the first operator that names it. Because it is deterministic, a
// writer can run it twice (tensors, then operators) and stream a graph of
// ten million operators to disk without holding it in memory at all.
//
//   auto spec = gen::preset("gpt-1.3b");
//   spec.layers = 4;
//   ir::Graph g = gen::build_graph(spec);            // in memory
//   gen::write_graph_json(spec, std::cout);          // streamed
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/ir/attrs.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/ir/tensor.hpp"

namespace recsearch::gen {

// The model families.
enum class Family { Mlp, Gpt, Bert, ResNet, Moe, Random };

// How GPT and BERT layers compute attention (docs/cli.md, `--attention`).
enum class AttentionLayout {
  // The scores BatchMatMul, a scale Mul, a causal-mask Add (GPT), Softmax,
  // Dropout and the context BatchMatMul: one memory pass per operator.
  Explicit,
  // Megatron-LM of SC'21: the scores BatchMatMul, one fused scale-mask-softmax
  // (a Softmax with `scale` and `causal` attributes), Dropout, the context
  // BatchMatMul; the s^2 scores are materialised.
  Megatron,
  // FlashAttention: one fused `Attention` operator, no s^2 tensor.
  Flash,
};

// What to generate. Fields a family does not use are ignored; 0 means "the
// family's default" (docs/cli.md, the `recsearch gen` table).
struct ModelSpec {
  Family family = Family::Gpt;
  std::string name;          // graph name; default: derived from the family and sizes
  std::int64_t layers = 0;   // transformer / MLP layers
  std::int64_t hidden = 0;   // model width
  std::int64_t heads = 0;    // attention heads
  std::int64_t seq = 0;      // sequence length
  std::int64_t vocab = 0;    // vocabulary
  std::int64_t batch = 0;    // global batch
  std::int64_t experts = 0;  // MoE experts (every other layer is an MoE layer)
  std::int64_t depth = 0;    // ResNet depth: 18, 34, 50, 101 or 152
  std::int64_t width =
      0;  // ResNet width factor (Wide-ResNet: 2, 4, ...); base channels for bottlenecks x width
  std::int64_t channels = 0;  // ResNet base channels (64)
  std::int64_t image = 0;     // ResNet input side (224)
  std::int64_t classes = 0;   // classifier outputs
  std::int64_t ops = 0;       // Random: number of operators
  std::uint64_t seed = 1;     // Random: the seed
  ir::DType dtype = ir::DType::F16;
  bool training_loss = true;  // end in a loss operator
  // GPT and BERT: the attention layout.
  AttentionLayout attention = AttentionLayout::Explicit;
  // The older spelling of attention = Flash, kept for existing callers;
  // resolved() makes the two agree (true with Megatron is a usage error).
  bool fused_attention = false;
};

// Family name as spelt on the command line ("gpt", "resnet", ...).
[[nodiscard]] std::string_view family_name(Family f) noexcept;
// Inverse of family_name; also accepts "wide-resnet". Throws Error(kUsage).
[[nodiscard]] Family parse_family(std::string_view s);

// Layout name as spelt on the command line ("explicit", "megatron", "flash").
[[nodiscard]] std::string_view attention_name(AttentionLayout a) noexcept;
// Inverse of attention_name. Throws Error(kUsage) listing the names.
[[nodiscard]] AttentionLayout parse_attention(std::string_view s);

// A published model size, e.g. "gpt-175b", "bert-large", "resnet50",
// "wide-resnet50-2", "moe-1.3b". Throws Error(kUsage) listing the names.
[[nodiscard]] ModelSpec preset(std::string_view name);
// Every preset name, in a stable order.
[[nodiscard]] std::vector<std::string> preset_names();

// The spec with every 0 replaced by the family default, and checked (e.g.
// hidden divisible by heads). Throws Error(kUsage) naming the field.
[[nodiscard]] ModelSpec resolved(const ModelSpec& spec);

// Receives a generated graph. Names are valid only during the call.
class GraphSink {
 public:
  virtual ~GraphSink() = default;
  virtual void tensor(std::string_view name, std::span<const std::int64_t> shape, ir::DType dtype,
                      ir::TensorKind kind) = 0;
  virtual void op(std::string_view name, std::string_view type,
                  std::span<const std::string_view> inputs,
                  std::span<const std::string_view> outputs, const ir::Attrs& attrs) = 0;
};

// Runs the generator of spec.family (after resolved()) into sink.
void generate(const ModelSpec& spec, GraphSink& sink);

// How many operators generate() emits, without emitting them.
[[nodiscard]] std::uint64_t count_operators(const ModelSpec& spec);

// The generated graph, finalized.
[[nodiscard]] ir::Graph build_graph(const ModelSpec& spec);

// Streams the graph JSON (docs/design.md, Graph file) to out, one tensor or
// operator per line, in constant memory. on_progress, when set, is called
// with (items written, items in all) now and then.
void write_graph_json(const ModelSpec& spec, std::ostream& out,
                      void (*on_progress)(std::uint64_t done, std::uint64_t total,
                                          void* ctx) = nullptr,
                      void* ctx = nullptr);

}  // namespace recsearch::gen
