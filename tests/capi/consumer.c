/* SPDX-License-Identifier: Apache-2.0 */
/* A separate C program built against an installed recsearch through
 * pkg-config alone (tests/capi/install_test.py): plans a two-layer MLP on a
 * 2x2 mesh, checks the plan evaluates to the reported step time, prints it.
 * Usage: consumer EXPECTED_VERSION */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <recsearch/recsearch.h>

#define TRY(call)                                                    \
  do {                                                               \
    if ((call) != RS_OK) {                                           \
      fprintf(stderr, "consumer: %s: %s\n", #call, rs_last_error()); \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  rs_graph* g = NULL;
  rs_cluster* c = NULL;
  rs_result *r = NULL, *e = NULL;
  rs_summary s, se;
  char* json = NULL;
  size_t len = 0, ops = 0;
  const int64_t x[] = {256, 1024}, w1[] = {1024, 4096}, h[] = {256, 4096}, w2[] = {4096, 1024};
  const int64_t mesh[] = {2, 2};
  const char* in1[] = {"x", "w1"};
  const char* out1[] = {"h"};
  const char* in2[] = {"h"};
  const char* out2[] = {"a"};
  const char* in3[] = {"a", "w2"};
  const char* out3[] = {"y"};
  if (argc < 2 || strcmp(rs_version(), argv[1]) != 0 ||
      strcmp(rs_version(), RS_VERSION_STRING) != 0) {
    fprintf(stderr, "consumer: library version %s, header %s, expected %s\n", rs_version(),
            RS_VERSION_STRING, argc > 1 ? argv[1] : "?");
    return 1;
  }
  TRY(rs_graph_create("mlp", &g));
  TRY(rs_graph_add_tensor(g, "x", x, 2, "f16", "input"));
  TRY(rs_graph_add_tensor(g, "w1", w1, 2, "f16", "parameter"));
  TRY(rs_graph_add_tensor(g, "h", h, 2, "f16", NULL));
  TRY(rs_graph_add_tensor(g, "a", h, 2, "f16", NULL));
  TRY(rs_graph_add_tensor(g, "w2", w2, 2, "f16", "parameter"));
  TRY(rs_graph_add_tensor(g, "y", x, 2, "f16", NULL));
  TRY(rs_graph_add_operator(g, "up", "MatMul", in1, 2, out1, 1));
  TRY(rs_graph_add_operator(g, "act", "GeLU", in2, 1, out2, 1));
  TRY(rs_graph_add_operator(g, "down", "MatMul", in3, 2, out3, 1));
  TRY(rs_cluster_create_mesh(mesh, 2, &c));
  TRY(rs_search(g, c, NULL, &r));
  TRY(rs_result_summary(r, &s));
  TRY(rs_result_num_operators(r, &ops));
  TRY(rs_result_plan_json(r, &json, &len));
  TRY(rs_evaluate(g, NULL, json, len, NULL, &e));
  TRY(rs_result_summary(e, &se));
  if (ops != 3 || !(s.step_time_s > 0) ||
      fabs(se.step_time_s - s.step_time_s) > 1e-12 * s.step_time_s) {
    fprintf(stderr, "consumer: inconsistent plan (%zu operators, step %g vs %g)\n", ops,
            s.step_time_s, se.step_time_s);
    return 1;
  }
  printf("consumer ok: %s, %zu operators, step %.6g s\n", rs_version(), ops, s.step_time_s);
  rs_free(json);
  rs_result_free(e);
  rs_result_free(r);
  rs_cluster_free(c);
  rs_graph_free(g);
  return 0;
}
