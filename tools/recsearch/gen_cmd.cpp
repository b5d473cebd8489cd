// SPDX-License-Identifier: Apache-2.0
// `recsearch gen MODEL`: synthetic graphs from recsearch::gen. MODEL is a
// family (mlp, gpt, bert, resnet, wide-resnet, moe, random) or a preset
// (gpt-175b, bert-large, resnet50, ...); size options override either. The
// graph is streamed, so ten million operators need no more memory than ten.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {

namespace {

struct GenArgs {
  std::string model;
  std::string preset;
  std::string output = "-";
  std::string dtype;
  bool no_loss = false;
  bool fused_attention = false;
  std::string attention;
  bool count = false;
  bool list = false;
  bool quiet = false;
  gen::ModelSpec spec;
};

void progress(std::uint64_t done, std::uint64_t total, void* /*ctx*/) {
  std::fprintf(stderr, "\rgen: %3.0f%% (%llu of %llu tensors and operators)",
               total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

int run_gen(GenArgs& a) {
  if (a.list) {
    for (const auto& n : gen::preset_names()) std::cout << n << '\n';
    return 0;
  }
  check_output_writable(a.output);
  if (a.model.empty() && a.preset.empty()) {
    throw Error(Errc::kUsage,
                "gen: give a MODEL (mlp, gpt, bert, resnet, wide-resnet, moe, "
                "random) or a preset (--list-presets)");
  }
  // The base spec: the preset (by --preset or as MODEL), else the family.
  gen::ModelSpec base;
  const std::string preset_name = !a.preset.empty() ? a.preset : a.model;
  bool from_preset = false;
  for (const auto& n : gen::preset_names()) from_preset |= n == preset_name;
  if (from_preset) {
    base = gen::preset(preset_name);
    if (!a.preset.empty() && !a.model.empty() && gen::parse_family(a.model) != base.family) {
      throw Error(Errc::kUsage, "gen: preset '" + a.preset + "' is not a " + a.model + " model");
    }
  } else if (!a.preset.empty()) {
    base = gen::preset(a.preset);  // throws, listing the presets
  } else {
    try {
      base.family = gen::parse_family(a.model);
    } catch (const Error&) {
      std::string known;
      for (const auto& n : gen::preset_names()) known += (known.empty() ? "" : ", ") + n;
      throw Error(Errc::kUsage, "gen: unknown model or preset '" + a.model +
                                    "' (models: mlp, gpt, bert, resnet, wide-resnet, moe, random; "
                                    "presets: " +
                                    known + ")");
    }
    if (a.model == "wide-resnet" && a.spec.width == 0) base.width = 2;
  }
  // Options given on the command line override the base.
  const gen::ModelSpec& o = a.spec;
  auto over = [](std::int64_t& field, std::int64_t v) {
    if (v != 0) field = v;
  };
  over(base.layers, o.layers);
  over(base.hidden, o.hidden);
  over(base.heads, o.heads);
  over(base.seq, o.seq);
  over(base.vocab, o.vocab);
  over(base.batch, o.batch);
  over(base.experts, o.experts);
  over(base.depth, o.depth);
  over(base.width, o.width);
  over(base.channels, o.channels);
  over(base.image, o.image);
  over(base.classes, o.classes);
  over(base.ops, o.ops);
  base.seed = o.seed;
  if (!o.name.empty()) base.name = o.name;
  if (!a.dtype.empty()) {
    const auto dt = ir::parse_dtype(a.dtype);
    if (!dt) throw Error(Errc::kUsage, "gen: unknown --dtype '" + a.dtype + "'");
    base.dtype = *dt;
  }
  base.training_loss = !a.no_loss;
  // --fused-attention is the older spelling of --attention flash.
  if (!a.attention.empty()) base.attention = gen::parse_attention(a.attention);
  base.fused_attention = a.fused_attention;
  // A preset's name describes the preset's sizes only.
  if (from_preset &&
      (o.layers | o.hidden | o.heads | o.seq | o.vocab | o.experts | o.depth | o.width |
       o.channels | o.image | o.classes) != 0 &&
      o.name.empty()) {
    base.name.clear();
  }
  const gen::ModelSpec spec = gen::resolved(base);

  if (a.count) {
    std::cout << gen::count_operators(spec) << '\n';
    return 0;
  }
  const bool show = !a.quiet && ::isatty(STDERR_FILENO) == 1;
  auto* cb = show ? &progress : nullptr;
  if (a.output == "-") {
    gen::write_graph_json(spec, std::cout, cb, nullptr);
    return 0;
  }
  // Written beside the target and renamed, so a failed run leaves no
  // half-written graph under the requested name.
  const std::string tmp = a.output + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(Errc::kIo, "cannot open for writing", {}, tmp);
    try {
      gen::write_graph_json(spec, f, cb, nullptr);
    } catch (...) {
      f.close();
      std::remove(tmp.c_str());
      throw;
    }
  }
  if (std::rename(tmp.c_str(), a.output.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(Errc::kIo, "cannot rename the finished graph into place", {}, a.output);
  }
  return 0;
}

}  // namespace

void add_gen_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gen",
      "write a synthetic graph: mlp, gpt, bert, resnet, wide-resnet, moe, random, or a preset");
  cmd->add_option("MODEL", a->model, "model family or preset name (see --list-presets)");
  cmd->add_option("--preset", a->preset, "a published size, e.g. gpt-175b, bert-large, resnet50");
  cmd->add_option("-o,--output", a->output, "graph file ('-' for stdout, the default)")
      ->type_name("GRAPH");
  gen::ModelSpec& s = a->spec;
  const auto pos = CLI::Range(std::int64_t{1}, std::int64_t{1} << 40);
  cmd->add_option("--layers", s.layers, "transformer or MLP layers")->check(pos);
  cmd->add_option("--hidden", s.hidden, "model width")->check(pos);
  cmd->add_option("--heads", s.heads, "attention heads")->check(pos);
  cmd->add_option("--seq", s.seq, "sequence length")->check(pos);
  cmd->add_option("--vocab", s.vocab, "vocabulary size")->check(pos);
  cmd->add_option("--batch", s.batch, "global batch")->check(pos);
  cmd->add_option("--experts", s.experts, "MoE experts")->check(pos);
  cmd->add_option("--depth", s.depth, "ResNet depth: 18, 34, 50, 101, 152")->check(pos);
  cmd->add_option("--width", s.width, "Wide-ResNet width factor")->check(pos);
  cmd->add_option("--channels", s.channels, "ResNet base channels (64)")->check(pos);
  cmd->add_option("--image", s.image, "ResNet input side (224)")->check(pos);
  cmd->add_option("--classes", s.classes, "classifier outputs")->check(pos);
  cmd->add_option("--ops", s.ops, "random: number of operators")->check(pos);
  cmd->add_option("--seed", s.seed, "random: seed");
  cmd->add_option("--dtype", a->dtype, "element type (f16 default)");
  cmd->add_option("--name", s.name, "graph name");
  cmd->add_flag("--no-loss", a->no_loss, "end at the logits (no loss operator)");
  cmd->add_option("--attention", a->attention,
                  "GPT, BERT attention layout: explicit (scores, scale, mask, softmax, dropout, "
                  "context as separate operators; default), megatron (scores, one fused "
                  "scale-mask-softmax, dropout, context: Megatron-LM of SC'21) or flash (one "
                  "fused Attention operator, no s^2 tensor)");
  cmd->add_flag("--fused-attention", a->fused_attention, "the same as --attention flash");
  cmd->add_flag("--count", a->count, "print the number of operators instead of the graph");
  cmd->add_flag("--list-presets", a->list, "print the preset names");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress on stderr");
  reg.push_back({cmd, [a] { return run_gen(*a); }});
}

}  // namespace recsearch::cli
