// SPDX-License-Identifier: Apache-2.0
// The bundled sample graphs (data/graphs, found through $RECSEARCH_DATA) for
// the tests that run every one of them. The model zoo's manifest, a list of
// gen commands in the same folder, is not a graph and is left out.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/io/json_io.hpp"

namespace recsearch::testing {

// Every graph file below DATA_DIR/graphs, sorted so that a failure names the
// same file on every run whatever order the directory lists them in.
inline std::vector<std::string> sample_graph_files(const std::filesystem::path& data_dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(data_dir / "graphs")) {
    if (entry.path().extension() != ".json") continue;
    if (entry.path().filename() == "zoo.json") continue;
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// fn(file, graph, spaces) for every sample graph of $RECSEARCH_DATA, in
// file order; nothing when it is not set.
template <class Fn>
void for_each_sample_graph(Fn&& fn) {
  const char* dir = std::getenv("RECSEARCH_DATA");
  if (dir == nullptr) return;
  for (const std::string& file : sample_graph_files(dir)) {
    const ir::Graph g = io::read_graph_file(file);
    const std::vector<algebra::OpSpace> spaces = algebra::build_op_spaces(g);
    fn(file, g, spaces);
  }
}

}  // namespace recsearch::testing
