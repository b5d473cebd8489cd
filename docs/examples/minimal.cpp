// SPDX-License-Identifier: Apache-2.0
// The minimal C++ program of the README: read a graph, search a plan for a
// 2x4 mesh, write it, print its summary. Compiled and run as a test from the
// repository root (tests/api/meson.build).
#include <cstdio>
#include <recsearch/recsearch.hpp>

int main() {
  const auto problem = recsearch::Problem::read("data/graphs/gpt2_block.json");
  const auto solution = recsearch::solve(problem, recsearch::Cluster::mesh({2, 4}));
  solution.write("plan.json");
  std::puts(solution.summary().c_str());
}
