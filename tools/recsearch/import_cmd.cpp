// SPDX-License-Identifier: Apache-2.0
// `recsearch import MODEL.onnx [-o GRAPH] [--dim NAME=N]...`: an ONNX model
// as a recsearch graph file. The work is io::read_onnx_file; this file only
// parses `--dim` bindings, prints the importer's warnings and writes JSON.
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

struct ImportArgs {
  std::string model;
  std::string output = "-";
  std::vector<std::string> dims;
  std::string name;
  bool quiet = false;
};

int run_import(const ImportArgs& a) {
  check_output_writable(a.output);
  io::OnnxImportOptions opts;
  opts.dims = parse_dims(a.dims);
  opts.name = a.name;
  const io::OnnxImport r = io::read_onnx_file(a.model, opts);
  if (!a.quiet) {
    for (const auto& w : r.warnings)
      std::cerr << "recsearch: warning: " << a.model << ": " << w << '\n';
  }
  std::string text = io::graph_to_json(r.graph);
  if (text.empty() || text.back() != '\n') text.push_back('\n');
  if (a.output == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
    return 0;
  }
  std::ofstream out(a.output, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(Errc::kIo, "cannot open for writing", {}, a.output);
  out << text;
  out.close();
  if (!out) throw Error(Errc::kIo, "cannot write", {}, a.output);
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand("import", "convert an ONNX model into a recsearch graph");
  cmd->add_option("MODEL", a->model, "ONNX model file ('-' for stdin)")->required();
  cmd->add_option("-o,--output", a->output, "graph file ('-' for stdout, the default)")
      ->type_name("GRAPH");
  cmd->add_option("--dim", a->dims,
                  "value of a symbolic dimension, e.g. --dim batch=32 (repeatable)")
      ->type_name("NAME=N");
  cmd->add_option("--name", a->name, "graph name (default: the model's graph name)");
  cmd->add_flag("-q,--quiet", a->quiet, "no warnings about operators imported as replicated");
  reg.push_back({cmd, [a] { return run_import(*a); }});
}

}  // namespace recsearch::cli
