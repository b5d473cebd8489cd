// SPDX-License-Identifier: Apache-2.0
// The bundled sample graphs (data/graphs, found through $RECSEARCH_DATA) for
// the tests that run every one of them. The model zoo's manifest, a list of
// gen commands in the same folder, is not a graph and is left out.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

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

}  // namespace recsearch::testing
