/* SPDX-License-Identifier: Apache-2.0 */
/* The minimal C program of the README: the same search as minimal.cpp
   through the C API. Compiled and run as a test (tests/api/meson.build). */
#include <recsearch/recsearch.h>
#include <stdio.h>

int main(void) {
  rs_graph* g = NULL;
  rs_cluster* c = NULL;
  rs_result* r = NULL;
  const int64_t mesh[] = {2, 4};
  rs_summary s;
  int ok = rs_graph_read_file("data/graphs/gpt2_block.json", &g) == RS_OK &&
           rs_cluster_create_mesh(mesh, 2, &c) == RS_OK && rs_search(g, c, NULL, &r) == RS_OK &&
           rs_result_summary(r, &s) == RS_OK;
  if (ok)
    printf("step %g s, %g GiB per device\n", s.step_time_s, s.memory_per_device_bytes / (1 << 30));
  else fprintf(stderr, "%s\n", rs_last_error()); /* file, JSON path, problem, [E...] id */
  rs_result_free(r);
  rs_cluster_free(c);
  rs_graph_free(g); /* each accepts NULL */
  return ok ? 0 : 1;
}
