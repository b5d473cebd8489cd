/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the C API, compiled as C99 and linked against the shared library
 * only (what an installed user gets).
 *
 * Run as `test_capi CASE` (build, errors, threads, eval, bytes) with
 * $RECSEARCH_DATA pointing at data/. Checks are on values: a graph built by
 * calls must plan exactly as the same graph read from JSON; strategies and
 * tensor shardings are recomputed here from the cuts the result reports;
 * concurrent searches must equal sequential ones; the reported step time
 * must equal rs_evaluate of the written plan. Every failure is printed;
 * the exit status is 1 when any check failed.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recsearch/recsearch.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

/* A call that must succeed; prints the library's message otherwise. */
#define OK(call)                                                                               \
  do {                                                                                         \
    rs_status st_ = (call);                                                                    \
    if (st_ != RS_OK) {                                                                        \
      ++failures;                                                                              \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, rs_status_name(st_), \
              rs_last_error());                                                                \
    }                                                                                          \
  } while (0)

/* A call that must fail with `status`, error id `code` (0: any) and a message
 * containing `needle` (NULL: any non-empty message). */
static void expect_fail(rs_status got, rs_status status, int code, const char* needle,
                        const char* what, int line) {
  const char* msg = rs_last_error();
  if (got != status || (code != 0 && rs_last_error_code() != code) || msg == NULL ||
      msg[0] == '\0' || (needle != NULL && strstr(msg, needle) == NULL)) {
    ++failures;
    fprintf(stderr, "capi_test.c:%d: %s: expected %s [E%d] with '%s', got %s [E%d]: %s\n", line,
            what, rs_status_name(status), code, needle ? needle : "", rs_status_name(got),
            rs_last_error_code(), msg ? msg : "(null)");
  }
}
#define FAILS(call, status, code, needle) \
  expect_fail((call), (status), (code), (needle), #call, __LINE__)

static char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  char* buf;
  long n;
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(99);
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = (char*)malloc((size_t)n + 1);
  if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) exit(99);
  buf[n] = '\0';
  fclose(f);
  if (len != NULL) *len = (size_t)n;
  return buf;
}

static char* data_file(const char* rel, size_t* len) {
  const char* dir = getenv("RECSEARCH_DATA");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir != NULL ? dir : "data", rel);
  return read_file(path, len);
}

/* ---- a plan reduced to comparable numbers -------------------------------- */

/* Every operator's strategy and cuts, and every tensor's sharding, as one
 * flat sequence of integers (cut loops by their index in a name table). */
typedef struct Fingerprint {
  int64_t* v;
  size_t n, cap;
  double step_time_s;
  double memory_bytes;
} Fingerprint;

static void fp_push(Fingerprint* f, int64_t x) {
  if (f->n == f->cap) {
    f->cap = f->cap ? 2 * f->cap : 256;
    f->v = (int64_t*)realloc(f->v, f->cap * sizeof *f->v);
    if (f->v == NULL) exit(99);
  }
  f->v[f->n++] = x;
}

static int64_t name_code(const char* s) {
  /* FNV-1a: equal names give equal codes; NULL (replicated) is -1. */
  uint64_t h = 1469598103934665603ULL;
  if (s == NULL) return -1;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return (int64_t)(h >> 1);
}

static Fingerprint fingerprint(const rs_result* r) {
  Fingerprint f;
  size_t ops = 0, tensors = 0, axes = 0, o, a, t, j, d, k;
  rs_summary s;
  memset(&f, 0, sizeof f);
  OK(rs_result_num_operators(r, &ops));
  OK(rs_result_num_tensors(r, &tensors));
  OK(rs_result_num_axes(r, &axes));
  for (o = 0; o < ops; ++o) {
    size_t inputs = 0;
    OK(rs_result_strategy_num_inputs(r, o, &inputs));
    for (j = 0; j < inputs; ++j) {
      const int64_t* splits = NULL;
      size_t rank = 0;
      OK(rs_result_strategy(r, o, j, &splits, &rank));
      fp_push(&f, (int64_t)rank);
      for (d = 0; d < rank; ++d) fp_push(&f, splits[d]);
    }
    for (a = 0; a < axes; ++a) {
      const char* loop = NULL;
      OK(rs_result_cut(r, o, a, &loop));
      fp_push(&f, name_code(loop));
    }
  }
  for (t = 0; t < tensors; ++t) {
    size_t rank = 0, count = 0;
    const uint32_t* ax = NULL;
    OK(rs_result_tensor_rank(r, t, &rank));
    for (d = 0; d < rank; ++d) {
      OK(rs_result_tensor_sharding(r, t, d, &ax, &count));
      fp_push(&f, (int64_t)count);
      for (k = 0; k < count; ++k) fp_push(&f, ax[k]);
    }
    OK(rs_result_tensor_partial(r, t, &ax, &count));
    fp_push(&f, -(int64_t)count - 1);
    for (k = 0; k < count; ++k) fp_push(&f, ax[k]);
  }
  OK(rs_result_summary(r, &s));
  f.step_time_s = s.step_time_s;
  f.memory_bytes = s.memory_per_device_bytes;
  return f;
}

static int fp_equal(const Fingerprint* a, const Fingerprint* b) {
  return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof *a->v) == 0 &&
         a->step_time_s == b->step_time_s && a->memory_bytes == b->memory_bytes;
}

/* ---- the same graph two ways --------------------------------------------- */

/* MLP block with attributes, a pinned strategy and an `allowed` list. */
static const char* kGraphJson =
    "{\"format\": \"recsearch.graph\", \"version\": 1, \"name\": \"block\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"shape\": [64, 512], \"dtype\": \"bf16\", \"kind\": \"input\"},\n"
    "  {\"name\": \"w1\", \"shape\": [512, 2048], \"dtype\": \"bf16\", \"kind\": \"parameter\"},\n"
    "  {\"name\": \"b1\", \"shape\": [2048], \"dtype\": \"bf16\", \"kind\": \"parameter\"},\n"
    "  {\"name\": \"h\", \"shape\": [64, 2048], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"hb\", \"shape\": [64, 2048], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"a\", \"shape\": [64, 2048], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"w2\", \"shape\": [512, 2048], \"dtype\": \"bf16\", \"kind\": \"parameter\"},\n"
    "  {\"name\": \"y\", \"shape\": [64, 512], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"wp\", \"shape\": [512, 128], \"dtype\": \"bf16\", \"kind\": \"parameter\"},\n"
    "  {\"name\": \"z\", \"shape\": [64, 128], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"p\", \"shape\": [64, 128], \"dtype\": \"bf16\"},\n"
    "  {\"name\": \"s\", \"shape\": [64], \"dtype\": \"f32\"}\n"
    " ],\n"
    " \"operators\": [\n"
    "  {\"name\": \"dense1\", \"type\": \"MatMul\", \"inputs\": [\"x\", \"w1\"], \"outputs\": "
    "[\"h\"],\n"
    "   \"allowed\": [\"i\", \"j\"]},\n"
    "  {\"name\": \"bias1\", \"type\": \"BiasAdd\", \"inputs\": [\"h\", \"b1\"], \"outputs\": "
    "[\"hb\"]},\n"
    "  {\"name\": \"act\", \"type\": \"GeLU\", \"inputs\": [\"hb\"], \"outputs\": [\"a\"]},\n"
    "  {\"name\": \"dense2\", \"type\": \"MatMul\", \"inputs\": [\"a\", \"w2\"], \"outputs\": "
    "[\"y\"],\n"
    "   \"attrs\": {\"transpose_b\": true}},\n"
    "  {\"name\": \"proj\", \"type\": \"Einsum\", \"inputs\": [\"y\", \"wp\"], \"outputs\": "
    "[\"z\"],\n"
    "   \"attrs\": {\"equation\": \"bh,hd->bd\"}, \"strategy\": [[2, 1], [1, 1]]},\n"
    "  {\"name\": \"sm\", \"type\": \"Softmax\", \"inputs\": [\"z\"], \"outputs\": [\"p\"],\n"
    "   \"attrs\": {\"axis\": -1}},\n"
    "  {\"name\": \"sum\", \"type\": \"ReduceSum\", \"inputs\": [\"p\"], \"outputs\": [\"s\"],\n"
    "   \"attrs\": {\"axes\": [1], \"keepdims\": false}}\n"
    " ]}\n";

static rs_graph* build_block(void) {
  rs_graph* g = NULL;
  const int64_t x[] = {64, 512}, w1[] = {512, 2048}, b1[] = {2048}, h[] = {64, 2048},
                w2[] = {512, 2048}, y[] = {64, 512}, wp[] = {512, 128}, z[] = {64, 128}, s[] = {64};
  const int64_t axes[] = {1};
  const int64_t pin[] = {2, 1, 1, 1};
  const size_t pin_ranks[] = {2, 2};
  const char* allowed[] = {"i", "j"};
  const char* in1[] = {"x", "w1"};
  const char* out1[] = {"h"};
  const char* in2[] = {"h", "b1"};
  const char* out2[] = {"hb"};
  const char* in3[] = {"hb"};
  const char* out3[] = {"a"};
  const char* in4[] = {"a", "w2"};
  const char* out4[] = {"y"};
  const char* in5[] = {"y", "wp"};
  const char* out5[] = {"z"};
  const char* in6[] = {"z"};
  const char* out6[] = {"p"};
  const char* in7[] = {"p"};
  const char* out7[] = {"s"};
  OK(rs_graph_create("block", &g));
  OK(rs_graph_add_tensor(g, "x", x, 2, "bf16", "input"));
  OK(rs_graph_add_tensor(g, "w1", w1, 2, "bf16", "parameter"));
  OK(rs_graph_add_tensor(g, "b1", b1, 1, "bf16", "parameter"));
  OK(rs_graph_add_tensor(g, "h", h, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "hb", h, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "a", h, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "w2", w2, 2, "bf16", "parameter"));
  OK(rs_graph_add_tensor(g, "y", y, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "wp", wp, 2, "bf16", "parameter"));
  OK(rs_graph_add_tensor(g, "z", z, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "p", z, 2, "bf16", NULL));
  OK(rs_graph_add_tensor(g, "s", s, 1, "f32", NULL));
  OK(rs_graph_add_operator(g, "dense1", "MatMul", in1, 2, out1, 1));
  OK(rs_graph_set_allowed(g, "dense1", allowed, 2));
  OK(rs_graph_add_operator(g, "bias1", "BiasAdd", in2, 2, out2, 1));
  OK(rs_graph_add_operator(g, "act", "GeLU", in3, 1, out3, 1));
  OK(rs_graph_add_operator(g, "dense2", "MatMul", in4, 2, out4, 1));
  OK(rs_graph_set_attr_bool(g, "dense2", "transpose_b", 1));
  OK(rs_graph_add_operator(g, "proj", "Einsum", in5, 2, out5, 1));
  OK(rs_graph_set_attr_string(g, "proj", "equation", "bh,hd->bd"));
  OK(rs_graph_pin_strategy(g, "proj", pin, pin_ranks, 2));
  OK(rs_graph_add_operator(g, "sm", "Softmax", in6, 1, out6, 1));
  OK(rs_graph_set_attr_int(g, "sm", "axis", -1));
  OK(rs_graph_add_operator(g, "sum", "ReduceSum", in7, 1, out7, 1));
  OK(rs_graph_set_attr_ints(g, "sum", "axes", axes, 1));
  OK(rs_graph_set_attr_bool(g, "sum", "keepdims", 0));
  return g;
}

/* Product of the sizes of the axes on which operator `op` cuts `loop`. */
static int64_t cut_product(const rs_result* r, size_t op, const char* loop) {
  size_t axes = 0, a;
  int64_t p = 1;
  OK(rs_result_num_axes(r, &axes));
  for (a = 0; a < axes; ++a) {
    const char* l = NULL;
    int64_t size = 0;
    OK(rs_result_cut(r, op, a, &l));
    OK(rs_result_axis(r, a, NULL, &size, NULL));
    if (l != NULL && strcmp(l, loop) == 0) p *= size;
  }
  return p;
}

static void check_block_plan(const rs_result* r) {
  size_t dense1 = 0, proj = 0, h = 0, axes = 0, a, j, d;
  const int64_t* splits = NULL;
  size_t rank = 0, count = 0;
  const uint32_t* ax = NULL;
  size_t pos[2] = {0, 0};
  rs_summary s;
  OK(rs_result_find_operator(r, "dense1", &dense1));
  OK(rs_result_find_operator(r, "proj", &proj));
  OK(rs_result_find_tensor(r, "h", &h));
  OK(rs_result_num_axes(r, &axes));
  /* MatMul ik,kj->ij: the strategy follows from the cuts. */
  {
    const int64_t want[2][2] = {{cut_product(r, dense1, "i"), cut_product(r, dense1, "k")},
                                {cut_product(r, dense1, "k"), cut_product(r, dense1, "j")}};
    for (j = 0; j < 2; ++j) {
      OK(rs_result_strategy(r, dense1, j, &splits, &rank));
      CHECK(rank == 2);
      for (d = 0; d < 2 && rank == 2; ++d) CHECK(splits[d] == want[j][d]);
    }
    CHECK(cut_product(r, dense1, "k") == 1); /* allowed: i and j only */
  }
  /* dense1 produces h: h dim 0 is split by the axes cutting i, dim 1 by j. */
  for (d = 0; d < 2; ++d) {
    OK(rs_result_tensor_sharding(r, h, d, &ax, &count));
    for (j = 0; j < count; ++j) {
      const char* l = NULL;
      OK(rs_result_cut(r, dense1, ax[j], &l));
      CHECK(l != NULL && strcmp(l, d == 0 ? "i" : "j") == 0);
    }
    pos[d] = count;
  }
  for (a = 0; a < axes; ++a) {
    const char* l = NULL;
    OK(rs_result_cut(r, dense1, a, &l));
    if (l == NULL) continue;
    --pos[strcmp(l, "i") == 0 ? 0 : 1];
  }
  CHECK(pos[0] == 0 && pos[1] == 0);
  /* The pinned strategy is kept. */
  OK(rs_result_strategy(r, proj, 0, &splits, &rank));
  CHECK(rank == 2 && splits[0] == 2 && splits[1] == 1);
  OK(rs_result_strategy(r, proj, 1, &splits, &rank));
  CHECK(rank == 2 && splits[0] == 1 && splits[1] == 1);
  OK(rs_result_summary(r, &s));
  CHECK(s.step_time_s > 0);
  /* Overlap hides part of the communication, never more than all of it. */
  CHECK(s.step_time_s >= s.compute_s * (1 - 1e-12));
  CHECK(s.step_time_s <= (s.compute_s + s.communication_s) * (1 + 1e-12));
  {
    const char* recompute = NULL;
    int zero = -1;
    int64_t micro = 0;
    OK(rs_result_training(r, &recompute, &zero, &micro));
    CHECK(recompute != NULL && strcmp(recompute, "none") == 0);
    CHECK(zero >= 0 && zero <= 3 && micro >= 1);
  }
}

static void test_build(void) {
  rs_graph* built = build_block();
  rs_graph* read = NULL;
  rs_cluster* cluster = NULL;
  rs_options* opts = NULL;
  const int64_t mesh[] = {2, 4};
  size_t n = 0, len_a = 0, len_b = 0;
  char *json_a = NULL, *json_b = NULL;
  int mode;
  OK(rs_graph_from_json(kGraphJson, strlen(kGraphJson), "block.json", &read));
  OK(rs_graph_validate(built));
  OK(rs_graph_num_operators(built, &n));
  CHECK(n == 7);
  OK(rs_graph_num_tensors(built, &n));
  CHECK(n == 12);
  /* Both graphs write the same graph file. */
  OK(rs_graph_to_json(built, &json_a, &len_a));
  OK(rs_graph_to_json(read, &json_b, &len_b));
  CHECK(json_a != NULL && json_b != NULL && len_a == len_b && strcmp(json_a, json_b) == 0);
  CHECK(json_a != NULL && strlen(json_a) == len_a);
  rs_free(json_a);
  rs_free(json_b);

  OK(rs_cluster_create_mesh(mesh, 2, &cluster));
  OK(rs_options_create(&opts));
  for (mode = 0; mode < 2; ++mode) {
    rs_result *ra = NULL, *rb = NULL;
    OK(rs_options_set_mode(opts, mode == 0 ? "train" : "infer"));
    OK(rs_search(built, cluster, opts, &ra));
    OK(rs_search(read, cluster, opts, &rb));
    CHECK(ra != NULL && rb != NULL);
    if (ra != NULL && rb != NULL) {
      Fingerprint fa = fingerprint(ra), fb = fingerprint(rb);
      CHECK(fp_equal(&fa, &fb));
      check_block_plan(ra);
      free(fa.v);
      free(fb.v);
    }
    rs_result_free(ra);
    rs_result_free(rb);
  }

  /* Changing a built graph takes effect: unpinning lets proj choose, and
   * the graph stays equal to the JSON one only while unchanged. */
  {
    rs_result *ra = NULL, *rb = NULL;
    const int64_t pin[] = {1, 1, 1, 1};
    const size_t ranks[] = {2, 2};
    size_t proj = 0;
    const int64_t* splits = NULL;
    size_t rank = 0;
    OK(rs_graph_pin_strategy(built, "proj", pin, ranks, 2));
    OK(rs_search(built, cluster, opts, &ra));
    OK(rs_result_find_operator(ra, "proj", &proj));
    OK(rs_result_strategy(ra, proj, 0, &splits, &rank));
    CHECK(rank == 2 && splits[0] == 1 && splits[1] == 1);
    OK(rs_search(read, cluster, opts, &rb));
    OK(rs_result_strategy(rb, proj, 0, &splits, &rank));
    CHECK(rank == 2 && splits[0] == 2);
    rs_result_free(ra);
    rs_result_free(rb);
  }

  /* A result outlives the handles it was made from. */
  {
    rs_result* r = NULL;
    const char* name = NULL;
    rs_graph* tmp = NULL;
    OK(rs_graph_from_json(kGraphJson, strlen(kGraphJson), NULL, &tmp));
    OK(rs_search(tmp, cluster, NULL, &r));
    rs_graph_free(tmp);
    OK(rs_result_operator_name(r, 6, &name));
    CHECK(name != NULL && strcmp(name, "sum") == 0);
    OK(rs_result_tensor_name(r, 0, &name));
    CHECK(name != NULL && strcmp(name, "x") == 0);
    rs_result_free(r);
  }
  rs_options_free(opts);
  rs_cluster_free(cluster);
  rs_graph_free(built);
  rs_graph_free(read);
}

/* ---- errors -------------------------------------------------------------- */

static void test_errors(void) {
  rs_graph* g = NULL;
  rs_cluster* c = NULL;
  rs_options* o = NULL;
  rs_result* r = NULL;
  size_t n = 0;
  int64_t devices = 0;
  const int64_t shape[] = {8, 4}, bad_shape[] = {8, 0}, w[] = {4, 4}, w_bad[] = {5, 4};
  const char* in[] = {"x", "w"};
  const char* in_unknown[] = {"x", "nope"};
  const char* out[] = {"y"};
  const int64_t pin[] = {2, 1, 1};
  const size_t ranks_bad[] = {2, 1};
  const size_t ranks[] = {2, 2};
  const int64_t pin4[] = {2, 1, 1, 1};
  char* json = NULL;

  /* The version of the loaded library is the header's and the project's. */
  CHECK(strcmp(rs_version(), RS_VERSION_STRING) == 0);
  CHECK(strcmp(rs_version(), RS_TEST_PROJECT_VERSION) == 0);
  CHECK(rs_version_number() ==
        RS_VERSION_MAJOR * 10000 + RS_VERSION_MINOR * 100 + RS_VERSION_PATCH);
  CHECK(strcmp(rs_status_name(RS_NO_FIT), "no_fit") == 0);
  CHECK(strcmp(rs_status_name((rs_status)42), "unknown") == 0);

  /* NULL handles and output pointers. */
  FAILS(rs_graph_create("g", NULL), RS_USAGE, 201, "must not be NULL");
  FAILS(rs_graph_add_tensor(NULL, "x", shape, 2, "f32", NULL), RS_USAGE, 201,
        "graph must not be NULL");
  FAILS(rs_graph_validate(NULL), RS_USAGE, 201, "graph");
  FAILS(rs_graph_num_tensors(NULL, &n), RS_USAGE, 201, "graph");
  FAILS(rs_graph_to_json(NULL, &json, NULL), RS_USAGE, 201, "graph");
  FAILS(rs_cluster_num_devices(NULL, &devices), RS_USAGE, 201, "cluster");
  FAILS(rs_cluster_add_level(NULL, "l", 2, 1, 1), RS_USAGE, 201, "cluster");
  FAILS(rs_options_set_mode(NULL, "train"), RS_USAGE, 201, "options");
  FAILS(rs_search(NULL, NULL, NULL, &r), RS_USAGE, 201, "graph");
  CHECK(r == NULL);
  FAILS(rs_result_summary(NULL, NULL), RS_USAGE, 201, "result");
  FAILS(rs_result_num_operators(NULL, &n), RS_USAGE, 201, "result");
  FAILS(rs_graph_from_json(NULL, 5, NULL, &g), RS_USAGE, 201, "text");
  CHECK(g == NULL);
  FAILS(rs_graph_read_file(NULL, &g), RS_USAGE, 201, "path");
  FAILS(rs_graph_read_file("/nonexistent/graph.json", &g), RS_BAD_INPUT, 110,
        "/nonexistent/graph.json");
  /* Freeing NULL is fine. */
  rs_graph_free(NULL);
  rs_cluster_free(NULL);
  rs_options_free(NULL);
  rs_result_free(NULL);
  rs_free(NULL);

  /* Building: unknown names, bad shapes, wrong ranks. */
  OK(rs_graph_create("errors", &g));
  FAILS(rs_graph_add_tensor(g, "x", shape, 2, "f33", NULL), RS_USAGE, 201, "unknown dtype 'f33'");
  FAILS(rs_graph_add_tensor(g, "x", shape, 2, "f32", "weights"), RS_USAGE, 201,
        "unknown tensor kind 'weights'");
  FAILS(rs_graph_add_tensor(g, "x", NULL, 2, "f32", NULL), RS_USAGE, 201, "shape");
  FAILS(rs_graph_add_tensor(g, "x", bad_shape, 2, "f32", NULL), RS_BAD_INPUT, 106,
        "/tensors/0/shape/1");
  FAILS(rs_graph_add_tensor(g, NULL, shape, 2, "f32", NULL), RS_USAGE, 201, "tensor name");
  FAILS(rs_graph_add_tensor(g, "", shape, 2, "f32", NULL), RS_BAD_INPUT, 102, "empty");
  OK(rs_graph_num_tensors(g, &n));
  CHECK(n == 0); /* failed calls add nothing */
  OK(rs_graph_add_tensor(g, "x", shape, 2, "f32", "input"));
  FAILS(rs_graph_add_tensor(g, "x", shape, 2, "f32", NULL), RS_BAD_INPUT, 104, "already defined");
  OK(rs_graph_add_tensor(g, "w", w, 2, "f32", "parameter"));
  OK(rs_graph_add_tensor(g, "y", shape, 2, "f32", NULL));
  FAILS(rs_graph_add_operator(g, "mm", "MatMul", in_unknown, 2, out, 1), RS_BAD_INPUT, 103,
        "/operators/0/inputs/1");
  FAILS(rs_graph_add_operator(g, "mm", "MatMul", NULL, 2, out, 1), RS_USAGE, 201, "inputs");
  FAILS(rs_graph_add_operator(g, "mm", NULL, in, 2, out, 1), RS_USAGE, 201, "operator type");
  OK(rs_graph_num_operators(g, &n));
  CHECK(n == 0);
  OK(rs_graph_add_operator(g, "mm", "MatMul", in, 2, out, 1));
  FAILS(rs_graph_add_operator(g, "mm2", "MatMul", in, 2, out, 1), RS_BAD_INPUT, 104,
        "already produced");
  FAILS(rs_graph_set_attr_int(g, "nope", "axis", 1), RS_BAD_INPUT, 103, "unknown operator 'nope'");
  FAILS(rs_graph_set_attr_int(g, "mm", NULL, 1), RS_USAGE, 201, "attribute name");
  FAILS(rs_graph_set_attr_float(g, "mm", "alpha", NAN), RS_USAGE, 201, "finite");
  FAILS(rs_graph_pin_strategy(g, "mm", pin, ranks_bad, 2), RS_BAD_INPUT, 107, "has rank 2");
  FAILS(rs_graph_pin_strategy(g, "mm", pin, ranks, 1), RS_BAD_INPUT, 107, "2 input(s)");
  FAILS(rs_graph_pin_strategy(g, "nope", pin4, ranks, 2), RS_BAD_INPUT, 103, "nope");
  OK(rs_graph_validate(g));

  /* Bad clusters. */
  FAILS(rs_cluster_create_flat(0, &c), RS_BAD_INPUT, 108, "device count");
  CHECK(c == NULL);
  {
    const int64_t dims[] = {4, 0};
    FAILS(rs_cluster_create_mesh(dims, 2, &c), RS_BAD_INPUT, 108, "/levels/1/size");
    FAILS(rs_cluster_create_mesh(dims, 0, &c), RS_BAD_INPUT, 108, "at least one");
    FAILS(rs_cluster_create_mesh(NULL, 2, &c), RS_USAGE, 201, "dims");
  }
  OK(rs_cluster_create("custom", &c));
  OK(rs_cluster_num_devices(c, &devices));
  CHECK(devices == 1);
  FAILS(rs_search(g, c, NULL, &r), RS_BAD_INPUT, 108, "no levels");
  FAILS(rs_cluster_set_device(c, 100, -1, 3000), RS_BAD_INPUT, 108, "memory");
  OK(rs_cluster_add_level(c, "node", 2, 50, 5));
  FAILS(rs_cluster_add_level(c, "gpu", 4, -1, 2), RS_BAD_INPUT, 108, "/levels/1/bandwidth_GBps");
  FAILS(rs_cluster_add_level(c, "node", 4, 100, 2), RS_BAD_INPUT, 108, "node");
  FAILS(rs_cluster_add_level(c, "gpu", 4, 100, NAN), RS_BAD_INPUT, 108, "latency");
  FAILS(rs_cluster_set_device(c, 0, 80, 3000), RS_BAD_INPUT, 108, "peak");
  OK(rs_cluster_num_devices(c, &devices));
  CHECK(devices == 2); /* failed changes are undone */
  OK(rs_cluster_add_level(c, "gpu", 2, 450, 2));
  OK(rs_cluster_num_devices(c, &devices));
  CHECK(devices == 4);
  {
    const char* bad =
        "{\"format\": \"recsearch.cluster\", \"version\": 1, \"levels\": "
        "[{\"name\": \"n\", \"size\": \"two\"}]}";
    rs_cluster* c2 = NULL;
    FAILS(rs_cluster_from_json(bad, strlen(bad), "c.json", &c2), RS_BAD_INPUT, 0,
          "c.json: /levels/0/size");
    CHECK(c2 == NULL);
  }
  {
    /* A misspelt key: ignored by rs_cluster_from_json, an error naming its
     * path and the key meant with rs_cluster_from_json_strict. */
    const char* typo =
        "{\"format\": \"recsearch.cluster\", \"version\": 1, \"levels\": "
        "[{\"name\": \"gpu\", \"size\": 8, \"bandwidth_GBs\": 450}]}";
    rs_cluster* c2 = NULL;
    OK(rs_cluster_from_json(typo, strlen(typo), "c.json", &c2));
    CHECK(c2 != NULL);
    rs_cluster_free(c2);
    c2 = NULL;
    FAILS(rs_cluster_from_json_strict(typo, strlen(typo), "c.json", &c2), RS_BAD_INPUT, 102,
          "c.json: /levels/0/bandwidth_GBs: unknown key 'bandwidth_GBs'; did you mean "
          "`bandwidth_GBps`?");
    CHECK(c2 == NULL);
  }

  /* Bad options. */
  OK(rs_options_create(&o));
  FAILS(rs_options_set_mode(o, "training"), RS_USAGE, 201, "unknown mode 'training'");
  FAILS(rs_options_set_algorithm(o, "greedy"), RS_USAGE, 201, "unknown algorithm 'greedy'");
  /* The message lists all six algorithms, as the CLI's --algo help does. */
  FAILS(rs_options_set_algorithm(o, "greedy"), RS_USAGE, 201,
        "(rec, data-parallel, megatron, grid, ilp or exhaustive)");
  FAILS(rs_options_set_effort(o, "max"), RS_USAGE, 201, "unknown effort 'max' (fast or default)");
  FAILS(rs_options_set_effort(o, NULL), RS_USAGE, 201, "effort");
  OK(rs_options_set_effort(o, "fast"));
  OK(rs_options_set_effort(o, "default"));
  FAILS(rs_options_set_threads(o, -1), RS_USAGE, 201, "threads");
  FAILS(rs_options_set_memory_budget(o, -5), RS_USAGE, 201, "memory budget");
  FAILS(rs_options_set_cost(o, "compute_eficiency", 0.4), RS_USAGE, 201, "compute_eficiency");
  FAILS(rs_options_set_cost(o, "we\"ird", 0.4), RS_USAGE, 201, "unknown cost coefficient");
  FAILS(rs_options_set_cost_json(o, "{\"compute_efficiency\": \"x\"}", 27), RS_BAD_INPUT, 0,
        "/compute_efficiency");
  OK(rs_options_set_cost(o, "count_latency", 0));

  /* Result queries out of range. */
  OK(rs_search(g, c, o, &r));
  FAILS(rs_result_operator_name(r, 1, (const char**)&json), RS_USAGE, 201, "operator index 1");
  FAILS(rs_result_tensor_sharding(r, 0, 2, NULL, NULL), RS_USAGE, 201, "has rank 2");
  FAILS(rs_result_tensor_name(r, 3, (const char**)&json), RS_USAGE, 201, "tensor index 3");
  FAILS(rs_result_cut(r, 0, 2, (const char**)&json), RS_USAGE, 201, "axis index 2");
  FAILS(rs_result_strategy(r, 0, 2, NULL, NULL), RS_USAGE, 201, "input index 2");
  FAILS(rs_result_find_operator(r, "nope", &n), RS_USAGE, 201, "unknown operator 'nope'");
  FAILS(rs_result_find_tensor(r, "nope", &n), RS_USAGE, 201, "unknown tensor 'nope'");
  FAILS(rs_result_redistribution(r, 1000000, NULL), RS_USAGE, 201, "out of range");
  rs_result_free(r);
  r = NULL;

  /* Not enough memory: no plan fits. */
  OK(rs_options_set_memory_budget(o, 16));
  FAILS(rs_search(g, c, o, &r), RS_NO_FIT, 301, NULL);
  CHECK(r == NULL);
  rs_options_free(o);
  o = NULL;

  /* A pinned strategy the mesh cannot lay out (3 does not divide 4 devices). */
  {
    const int64_t pin_odd[] = {1, 3, 3, 1};
    OK(rs_graph_pin_strategy(g, "mm", pin_odd, ranks, 2));
    FAILS(rs_search(g, c, NULL, &r), RS_BAD_INPUT, 107, "/operators/0/strategy");
  }

  /* A graph that fails semantic checks: inner dims 4 vs 5. */
  {
    rs_graph* g2 = NULL;
    OK(rs_graph_create("bad", &g2));
    OK(rs_graph_add_tensor(g2, "x", shape, 2, "f32", "input"));
    OK(rs_graph_add_tensor(g2, "w", w_bad, 2, "f32", "parameter"));
    OK(rs_graph_add_tensor(g2, "y", shape, 2, "f32", NULL));
    OK(rs_graph_add_operator(g2, "mm", "MatMul", in, 2, out, 1));
    FAILS(rs_graph_validate(g2), RS_BAD_INPUT, 106, "/operators/0");
    FAILS(rs_search(g2, c, NULL, &r), RS_BAD_INPUT, 106, "/operators/0");
    CHECK(r == NULL);
    rs_graph_free(g2);
  }

  /* Graph JSON: every error names the source and the JSON path. */
  {
    const char* not_json = "{\"format\": \"recsearch.graph\", ";
    const char* unknown =
        "{\"format\": \"recsearch.graph\", \"version\": 1, \"tensors\": "
        "[{\"name\": \"a\", \"shape\": [2]}], \"operators\": [{\"name\": \"r\", \"type\": "
        "\"ReLU\", \"inputs\": [\"a\"], \"outputs\": [\"b\"]}]}";
    const char* bad_shape_json =
        "{\"format\": \"recsearch.graph\", \"version\": 1, \"tensors\": "
        "[{\"name\": \"a\", \"shape\": [2, 3]}, {\"name\": \"b\", \"shape\": [3, 2]}], "
        "\"operators\": [{\"name\": \"r\", \"type\": \"ReLU\", \"inputs\": [\"a\"], "
        "\"outputs\": [\"b\"]}]}";
    const char* wrong_type =
        "{\"format\": \"recsearch.graph\", \"version\": 1, \"tensors\": "
        "[{\"name\": \"a\", \"shape\": [2, -3]}], \"operators\": []}";
    rs_graph* g3 = NULL;
    char buf[512];
    FAILS(rs_graph_from_json(not_json, strlen(not_json), "m.json", &g3), RS_BAD_INPUT, 101,
          "m.json");
    FAILS(rs_graph_from_json(unknown, strlen(unknown), "m.json", &g3), RS_BAD_INPUT, 103,
          "m.json: /operators/0/outputs/0: unknown tensor 'b'");
    FAILS(rs_graph_from_json(bad_shape_json, strlen(bad_shape_json), "m.json", &g3), RS_BAD_INPUT,
          106, "m.json: /operators/0");
    FAILS(rs_graph_from_json(wrong_type, strlen(wrong_type), NULL, &g3), RS_BAD_INPUT, 106,
          "<memory>: /tensors/0/shape/1");
    FAILS(rs_graph_from_json("", 0, NULL, &g3), RS_BAD_INPUT, 101, NULL);
    CHECK(g3 == NULL);
    /* Length-delimited: bytes after `len` are never read, a NUL inside is
     * an error like any other byte. */
    {
      const char* tiny =
          "{\"format\": \"recsearch.graph\", \"version\": 1, \"tensors\": [], "
          "\"operators\": []}";
      size_t tl = strlen(tiny);
      memcpy(buf, tiny, tl);
      memset(buf + tl, 'x', 16); /* no terminator: junk follows */
      OK(rs_graph_from_json(buf, tl, "tiny", &g3));
      rs_graph_free(g3);
      g3 = NULL;
      buf[10] = '\0';
      FAILS(rs_graph_from_json(buf, tl, "tiny", &g3), RS_BAD_INPUT, 101, "tiny");
      CHECK(g3 == NULL);
    }
  }

  /* Thread-local message survives later successful calls. */
  FAILS(rs_options_set_mode(NULL, "x"), RS_USAGE, 201, "options");
  OK(rs_graph_num_tensors(g, &n));
  CHECK(strstr(rs_last_error(), "options") != NULL);
  CHECK(rs_last_error_code() == 201);

  rs_cluster_free(c);
  rs_graph_free(g);
}

/* ---- concurrency --------------------------------------------------------- */

typedef struct Job {
  const rs_graph* graph;
  const rs_cluster* cluster;
  int threads;
  const char* tag;  /* distinct per thread, for the error-message check */
  Fingerprint want; /* sequential result */
  int repeats;
  int mismatches;
  int status_failures;
  int message_mixups;
} Job;

static void run_one(const Job* job, Fingerprint* out, int* ok) {
  rs_options* o = NULL;
  rs_result* r = NULL;
  *ok = 0;
  if (rs_options_create(&o) != RS_OK) return;
  if (rs_options_set_threads(o, job->threads) == RS_OK &&
      rs_search(job->graph, job->cluster, o, &r) == RS_OK) {
    *out = fingerprint(r);
    *ok = 1;
  }
  rs_result_free(r);
  rs_options_free(o);
}

static void* job_main(void* arg) {
  Job* job = (Job*)arg;
  int i;
  for (i = 0; i < job->repeats; ++i) {
    Fingerprint f;
    int ok = 0;
    rs_options* o = NULL;
    run_one(job, &f, &ok);
    if (!ok) {
      ++job->status_failures;
      continue;
    }
    if (!fp_equal(&f, &job->want)) ++job->mismatches;
    free(f.v);
    /* Each thread sees its own last error. */
    if (rs_options_create(&o) == RS_OK) {
      if (rs_options_set_mode(o, job->tag) != RS_USAGE || strstr(rs_last_error(), job->tag) == NULL)
        ++job->message_mixups;
      rs_options_free(o);
    }
  }
  return NULL;
}

static void test_threads(void) {
  size_t len_a = 0, len_b = 0;
  char* text_a = data_file("graphs/gpt2_block.json", &len_a);
  char* text_b = data_file("graphs/bert_large.json", &len_b);
  char* text_c = data_file("clusters/dgx_h100_64x8.json", NULL);
  rs_graph *ga = NULL, *gb = NULL;
  rs_cluster *ca = NULL, *cb = NULL;
  Job jobs[2];
  pthread_t th[2];
  int i, ok;
  OK(rs_graph_from_json(text_a, len_a, "gpt2_block.json", &ga));
  OK(rs_graph_from_json(text_b, len_b, "bert_large.json", &gb));
  OK(rs_cluster_from_json(text_c, strlen(text_c), "dgx_h100_64x8.json", &ca));
  OK(rs_cluster_create_flat(12, &cb));
  memset(jobs, 0, sizeof jobs);
  jobs[0].graph = ga;
  jobs[0].cluster = ca;
  jobs[0].threads = 2;
  jobs[0].tag = "mode-of-thread-A";
  jobs[1].graph = gb;
  jobs[1].cluster = cb;
  jobs[1].threads = 1;
  jobs[1].tag = "mode-of-thread-B";
  for (i = 0; i < 2; ++i) {
    jobs[i].repeats = 20;
    run_one(&jobs[i], &jobs[i].want, &ok);
    CHECK(ok);
    if (!ok) return;
  }
  /* Different graphs give different plans: the comparison can fail. */
  CHECK(!fp_equal(&jobs[0].want, &jobs[1].want));
  for (i = 0; i < 2; ++i) CHECK(pthread_create(&th[i], NULL, job_main, &jobs[i]) == 0);
  for (i = 0; i < 2; ++i) CHECK(pthread_join(th[i], NULL) == 0);
  for (i = 0; i < 2; ++i) {
    CHECK(jobs[i].status_failures == 0);
    CHECK(jobs[i].mismatches == 0);
    CHECK(jobs[i].message_mixups == 0);
    free(jobs[i].want.v);
  }
  /* The same graph handle searched from two threads at once. */
  {
    Job same[2];
    Fingerprint f;
    memcpy(&same[0], &jobs[1], sizeof(Job));
    same[0].repeats = 2;
    same[0].mismatches = same[0].status_failures = same[0].message_mixups = 0;
    run_one(&same[0], &same[0].want, &ok);
    CHECK(ok);
    same[1] = same[0];
    same[1].tag = "mode-of-thread-D";
    f = same[0].want;
    for (i = 0; i < 2; ++i) CHECK(pthread_create(&th[i], NULL, job_main, &same[i]) == 0);
    for (i = 0; i < 2; ++i) CHECK(pthread_join(th[i], NULL) == 0);
    for (i = 0; i < 2; ++i)
      CHECK(same[i].mismatches == 0 && same[i].status_failures == 0 && same[i].message_mixups == 0);
    free(f.v);
  }
  rs_graph_free(ga);
  rs_graph_free(gb);
  rs_cluster_free(ca);
  rs_cluster_free(cb);
  free(text_a);
  free(text_b);
  free(text_c);
}

/* ---- the written plan evaluates to the reported step time ---------------- */

static void check_eval_roundtrip(rs_graph* g, rs_cluster* c, const char* mode, const char* algo) {
  rs_options* o = NULL;
  rs_result *r = NULL, *e = NULL, *e2 = NULL;
  rs_summary s, se, se2;
  char* json = NULL;
  size_t len = 0, events = 0, i;
  double comm = 0;
  OK(rs_options_create(&o));
  OK(rs_options_set_mode(o, mode));
  OK(rs_options_set_algorithm(o, algo));
  OK(rs_search(g, c, o, &r));
  if (r == NULL) {
    rs_options_free(o);
    return;
  }
  OK(rs_result_summary(r, &s));
  OK(rs_result_plan_json(r, &json, &len));
  CHECK(json != NULL && strlen(json) == len && strstr(json, "\"recsearch.plan\"") != NULL);
  /* With the cluster given, and with the cluster the plan carries. */
  OK(rs_evaluate(g, c, json, len, NULL, &e));
  OK(rs_evaluate(g, NULL, json, len, NULL, &e2));
  if (e != NULL && e2 != NULL) {
    Fingerprint fr = fingerprint(r), fe = fingerprint(e);
    OK(rs_result_summary(e, &se));
    OK(rs_result_summary(e2, &se2));
    CHECK(s.step_time_s > 0);
    CHECK(fabs(se.step_time_s - s.step_time_s) <= 1e-12 * s.step_time_s);
    CHECK(fabs(se2.step_time_s - s.step_time_s) <= 1e-12 * s.step_time_s);
    CHECK(fabs(se.memory_per_device_bytes - s.memory_per_device_bytes) <=
          1e-12 * s.memory_per_device_bytes);
    CHECK(se.search_time_s == 0 && s.search_time_s > 0);
    /* Same plan read back: same strategies, cuts and shardings. */
    fr.step_time_s = fe.step_time_s = 0;
    CHECK(fp_equal(&fr, &fe));
    free(fr.v);
    free(fe.v);
    /* The redistributions add up to the communication time. */
    OK(rs_result_num_redistributions(e, &events));
    for (i = 0; i < events; ++i) {
      rs_redistribution d;
      OK(rs_result_redistribution(e, i, &d));
      CHECK(d.tensor != NULL && d.collective != NULL && d.phase != NULL && d.reason != NULL);
      CHECK(d.bytes >= 0 && d.seconds >= 0);
      if (strcmp(mode, "infer") == 0) CHECK(strcmp(d.phase, "forward") == 0);
      comm += d.seconds;
    }
    CHECK(fabs(comm - se.communication_s) <= 1e-9 * (se.communication_s + 1e-30));
  }
  /* Evaluating in the other mode changes the estimate. */
  {
    rs_options* o2 = NULL;
    rs_result* e3 = NULL;
    rs_summary s3;
    OK(rs_options_create(&o2));
    OK(rs_options_set_mode(o2, strcmp(mode, "train") == 0 ? "infer" : "train"));
    OK(rs_evaluate(g, c, json, len, o2, &e3));
    OK(rs_result_summary(e3, &s3));
    CHECK(s3.step_time_s != s.step_time_s);
    rs_result_free(e3);
    rs_options_free(o2);
  }
  /* A broken plan names its JSON path. */
  {
    const char* bad =
        "{\"format\": \"recsearch.plan\", \"version\": 1, \"operators\": "
        "[{\"name\": \"no-such-op\", \"strategy\": [[1]]}]}";
    rs_result* e4 = NULL;
    FAILS(rs_evaluate(g, c, bad, strlen(bad), NULL, &e4), RS_BAD_INPUT, 103, "/operators/0");
    CHECK(e4 == NULL);
  }
  rs_free(json);
  rs_result_free(r);
  rs_result_free(e);
  rs_result_free(e2);
  rs_options_free(o);
}

static void test_eval(void) {
  size_t len = 0;
  char* text = data_file("graphs/gpt2_block.json", &len);
  char* tiny = data_file("graphs/tiny/convnet.json", NULL);
  rs_graph *g = NULL, *gt = NULL, *block = build_block();
  rs_cluster *c = NULL, *flat = NULL;
  const int64_t mesh[] = {4, 8};
  OK(rs_graph_from_json(text, len, "gpt2_block.json", &g));
  OK(rs_graph_from_json(tiny, strlen(tiny), "convnet.json", &gt));
  OK(rs_cluster_create_mesh(mesh, 2, &c));
  OK(rs_cluster_create_flat(6, &flat));
  check_eval_roundtrip(g, c, "train", "rec");
  check_eval_roundtrip(g, flat, "infer", "rec");
  check_eval_roundtrip(g, c, "train", "data-parallel");
  check_eval_roundtrip(gt, flat, "train", "exhaustive");
  check_eval_roundtrip(block, c, "train", "rec");
  /* Cost coefficients: the graph file's "cost" object, the cluster file's,
   * and options, each over the previous one. */
  {
    static const char* with_cost_head = "{\"cost\": {\"compute_efficiency\": 0.25}, ";
    size_t hl = strlen(with_cost_head);
    char* text2 = (char*)malloc(len + hl);
    const char* cl_json =
        "{\"format\": \"recsearch.cluster\", \"version\": 1, \"levels\": "
        "[{\"name\": \"m0\", \"size\": 4, \"bandwidth_GBps\": 50, \"latency_us\": 5}, "
        "{\"name\": \"m1\", \"size\": 8, \"bandwidth_GBps\": 450, \"latency_us\": 2}], "
        "\"cost\": {\"count_latency\": false}}";
    rs_graph* gc = NULL;
    rs_cluster* cc = NULL;
    rs_options* o = NULL;
    rs_result *r0 = NULL, *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
    rs_summary s0, s1, s2, s3, s4;
    const char* brace = strchr(text, '{');
    if (text2 == NULL || brace == NULL) exit(99);
    memcpy(text2, with_cost_head, hl);
    memcpy(text2 + hl, brace + 1, len - (size_t)(brace + 1 - text));
    OK(rs_graph_from_json(text2, hl + len - (size_t)(brace + 1 - text), "gpt2_cost.json", &gc));
    OK(rs_cluster_from_json(cl_json, strlen(cl_json), "c.json", &cc));
    OK(rs_options_create(&o));
    OK(rs_options_set_cost(o, "compute_efficiency", 0.25));
    OK(rs_search(g, c, NULL, &r0));   /* defaults */
    OK(rs_search(gc, c, NULL, &r1));  /* graph's coefficient */
    OK(rs_search(g, c, o, &r2));      /* the same through options */
    OK(rs_search(gc, cc, NULL, &r3)); /* graph's and cluster's */
    OK(rs_options_set_cost(o, "count_latency", 0));
    OK(rs_search(g, c, o, &r4)); /* both through options */
    OK(rs_result_summary(r0, &s0));
    OK(rs_result_summary(r1, &s1));
    OK(rs_result_summary(r2, &s2));
    OK(rs_result_summary(r3, &s3));
    OK(rs_result_summary(r4, &s4));
    CHECK(s1.compute_s > s0.compute_s);
    CHECK(s1.step_time_s == s2.step_time_s);
    CHECK(s3.step_time_s == s4.step_time_s);
    CHECK(s3.step_time_s != s1.step_time_s);
    rs_result_free(r0);
    rs_result_free(r1);
    rs_result_free(r2);
    rs_result_free(r3);
    rs_result_free(r4);
    rs_options_free(o);
    rs_cluster_free(cc);
    rs_graph_free(gc);
    free(text2);
  }
  /* The table is the CLI's. */
  {
    rs_result* r = NULL;
    char* table = NULL;
    size_t tl = 0;
    OK(rs_search(g, c, NULL, &r));
    OK(rs_result_plan_table(r, &table, &tl));
    CHECK(table != NULL && strstr(table, "attn") != NULL && tl == strlen(table));
    rs_free(table);
    rs_result_free(r);
  }
  rs_graph_free(g);
  rs_graph_free(gt);
  rs_graph_free(block);
  rs_cluster_free(c);
  rs_cluster_free(flat);
  free(text);
  free(tiny);
}

/* ---- arbitrary bytes ----------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rng(void) {
  /* xorshift64*: deterministic, so a failure reproduces. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

/* A copy of `text` with a few random edits, in a buffer of exactly *len
 * bytes (no terminator: reading past it is a bug a sanitizer would see). */
static char* mutate(const char* text, size_t n, size_t* len) {
  static const char* tokens[] = {"{",     "}",  "[",  "]",       "\"",   ",",
                                 ":",     "0",  "-1", "1e999",   "null", "true",
                                 "\"x\"", "[]", "{}", "\\u0000", "\xff", "9223372036854775808"};
  char* buf = (char*)malloc(2 * n + 64);
  size_t m = n, edits = 1 + rng() % 4, e;
  if (buf == NULL) exit(99);
  memcpy(buf, text, n);
  for (e = 0; e < edits && m > 0; ++e) {
    size_t at = rng() % m;
    switch (rng() % 5) {
      case 0: buf[at] = (char)(rng() & 0xff); break; /* any byte, NUL included */
      case 1: {                                      /* delete a range */
        size_t k = 1 + rng() % 16;
        if (at + k > m) k = m - at;
        memmove(buf + at, buf + at + k, m - at - k);
        m -= k;
        break;
      }
      case 2: m = at; break; /* truncate */
      case 3: {              /* insert a token */
        const char* t = tokens[rng() % (sizeof tokens / sizeof *tokens)];
        size_t k = strlen(t);
        if (m + k > 2 * n + 64) break;
        memmove(buf + at + k, buf + at, m - at);
        memcpy(buf + at, t, k);
        m += k;
        break;
      }
      default: { /* swap two bytes */
        size_t b = rng() % m;
        char t = buf[at];
        buf[at] = buf[b];
        buf[b] = t;
      }
    }
  }
  {
    char* exact = (char*)malloc(m > 0 ? m : 1);
    if (exact == NULL) exit(99);
    memcpy(exact, buf, m);
    free(buf);
    *len = m;
    return exact;
  }
}

/* A failure must be bad input with a message carrying its error id. */
static void check_rejection(rs_status st, const char* what, int i) {
  if (st == RS_OK) return;
  if (st != RS_BAD_INPUT || strstr(rs_last_error(), "[E1") == NULL) {
    ++failures;
    fprintf(stderr, "%s mutation %d: %s: %s\n", what, i, rs_status_name(st), rs_last_error());
  }
}

static void test_bytes(void) {
  size_t len_c = 0, len_p = 0, len_g = strlen(kGraphJson);
  char* cluster_text = data_file("clusters/dgx_h100_8.json", &len_c);
  rs_graph* g = NULL;
  rs_cluster* c = NULL;
  rs_result* r = NULL;
  char* plan_text = NULL;
  int i, accepted = 0, rejected = 0;
  const int64_t mesh[] = {2, 2};
  OK(rs_graph_from_json(kGraphJson, len_g, "block.json", &g));
  OK(rs_cluster_create_mesh(mesh, 2, &c));
  OK(rs_search(g, c, NULL, &r));
  OK(rs_result_plan_json(r, &plan_text, &len_p));
  rs_result_free(r);
  for (i = 0; i < 3000; ++i) {
    size_t n = 0;
    char* m = mutate(kGraphJson, len_g, &n);
    rs_graph* mg = NULL;
    rs_status st = rs_graph_from_json(m, n, "fuzz.json", &mg);
    check_rejection(st, "graph", i);
    CHECK((st == RS_OK) == (mg != NULL));
    if (st == RS_OK) {
      /* What reads must also search (or say clearly why not). */
      rs_result* mr = NULL;
      rs_status ss = rs_search(mg, c, NULL, &mr);
      if (ss != RS_OK && ss != RS_BAD_INPUT && ss != RS_NO_FIT) {
        ++failures;
        fprintf(stderr, "search after graph mutation %d: %s: %s\n", i, rs_status_name(ss),
                rs_last_error());
      }
      rs_result_free(mr);
      ++accepted;
    } else {
      ++rejected;
    }
    rs_graph_free(mg);
    free(m);
  }
  /* Both outcomes occurred: the mutations are neither all fatal nor all
   * harmless. */
  CHECK(accepted > 0 && rejected > 0);
  for (i = 0; i < 1000; ++i) {
    size_t n = 0;
    char* m = mutate(cluster_text, len_c, &n);
    rs_cluster* mc = NULL;
    rs_status st = rs_cluster_from_json(m, n, "fuzz-cluster.json", &mc);
    check_rejection(st, "cluster", i);
    CHECK((st == RS_OK) == (mc != NULL));
    rs_cluster_free(mc);
    free(m);
  }
  for (i = 0; i < 1000; ++i) {
    size_t n = 0;
    char* m = mutate(plan_text, len_p, &n);
    rs_result* mr = NULL;
    rs_status st = rs_evaluate(g, c, m, n, NULL, &mr);
    check_rejection(st, "plan", i);
    CHECK((st == RS_OK) == (mr != NULL));
    rs_result_free(mr);
    free(m);
  }
  {
    const char* cost = "{\"compute_efficiency\": 0.4, \"count_latency\": false}";
    rs_options* o = NULL;
    OK(rs_options_create(&o));
    for (i = 0; i < 500; ++i) {
      size_t n = 0;
      char* m = mutate(cost, strlen(cost), &n);
      check_rejection(rs_options_set_cost_json(o, m, n), "cost", i);
      free(m);
    }
    rs_options_free(o);
  }
  fprintf(stderr, "graph mutations: %d read, %d rejected\n", accepted, rejected);
  rs_free(plan_text);
  rs_cluster_free(c);
  rs_graph_free(g);
  free(cluster_text);
}

/* ---- a cost model of one's own ------------------------------------------ */

typedef struct Scale {
  double factor;
  long calls; /* the searches below run on one thread */
} Scale;

static double scaled_collective(const char* collective, double group_bytes, int64_t devices,
                                double bandwidth_Bps, double latency_s, double symbolic,
                                void* user) {
  Scale* s = (Scale*)user;
  (void)group_bytes;
  (void)bandwidth_Bps;
  (void)latency_s;
  if (collective != NULL && collective[0] != '\0' && devices > 1) ++s->calls;
  return s->factor * symbolic;
}

static int close_to(double a, double b) {
  return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-30;
}

static void test_costmodel(void) {
  size_t len = 0, plan_len = 0;
  char* text = data_file("graphs/gpt2_block.json", &len);
  char* plan = NULL;
  rs_graph* g = NULL;
  rs_cluster* c = NULL;
  rs_options *plain = NULL, *doubled = NULL, *dear = NULL;
  rs_result *r0 = NULL, *r_eval = NULL, *r_dear = NULL, *r_dear_eval = NULL;
  rs_summary s0, s_eval, s_dear, s_dear_eval;
  const int64_t mesh[] = {2, 4};
  Scale two = {2.0, 0}, thousand = {1000.0, 0};
  rs_cost_callbacks cb2 = {scaled_collective, NULL, &two};
  rs_cost_callbacks cb1000 = {scaled_collective, NULL, &thousand};
  CHECK(text != NULL);
  if (text == NULL) return;
  OK(rs_graph_from_json(text, len, "gpt2_block.json", &g));
  OK(rs_cluster_create_mesh(mesh, 2, &c));
  OK(rs_options_create(&plain));
  OK(rs_options_create(&doubled));
  OK(rs_options_create(&dear));
  OK(rs_options_set_threads(plain, 1));
  OK(rs_options_set_cost_callbacks(doubled, &cb2));
  OK(rs_options_set_threads(dear, 1));
  OK(rs_options_set_cost_callbacks(dear, &cb1000));
  OK(rs_search(g, c, plain, &r0));
  OK(rs_result_summary(r0, &s0));
  CHECK(s0.communication_s > 0);
  /* The same plan under doubled collectives: communication doubles, compute stays. */
  OK(rs_result_plan_json(r0, &plan, &plan_len));
  OK(rs_evaluate(g, c, plan, plan_len, doubled, &r_eval));
  OK(rs_result_summary(r_eval, &s_eval));
  CHECK(two.calls > 0);
  CHECK(close_to(s_eval.communication_s, 2 * s0.communication_s));
  CHECK(close_to(s_eval.compute_s, s0.compute_s));
  /* Collectives 1000x dearer: the search finds a plan that communicates
   * less, and at least as fast as the old plan under the same model. */
  OK(rs_search(g, c, dear, &r_dear));
  OK(rs_result_summary(r_dear, &s_dear));
  OK(rs_evaluate(g, c, plan, plan_len, dear, &r_dear_eval));
  OK(rs_result_summary(r_dear_eval, &s_dear_eval));
  CHECK(thousand.calls > 0);
  CHECK(s_dear.communication_s < s_dear_eval.communication_s);
  CHECK(s_dear.step_time_s <= s_dear_eval.step_time_s * (1 + 1e-9));
  /* NULL restores the symbolic model. */
  OK(rs_options_set_cost_callbacks(doubled, NULL));
  rs_result_free(r_eval);
  r_eval = NULL;
  OK(rs_evaluate(g, c, plan, plan_len, doubled, &r_eval));
  OK(rs_result_summary(r_eval, &s_eval));
  CHECK(close_to(s_eval.communication_s, s0.communication_s));
  expect_fail(rs_options_set_cost_callbacks(NULL, &cb2), RS_USAGE, 0, "options",
              "rs_options_set_cost_callbacks(NULL)", __LINE__);
  rs_free(plan);
  rs_result_free(r0);
  rs_result_free(r_eval);
  rs_result_free(r_dear);
  rs_result_free(r_dear_eval);
  rs_options_free(plain);
  rs_options_free(doubled);
  rs_options_free(dear);
  rs_cluster_free(c);
  rs_graph_free(g);
  free(text);
}

/* Each operator's recomputation and each parameter's ZeRO stage and axes,
 * as a plan file with per-operator and per-parameter exceptions sets them. */
static void test_training_detail(void) {
  static const char* kPlan =
      "{\"format\": \"recsearch.plan\", \"version\": 1,\n"
      " \"training\": {\"recompute\": \"selective\", \"zero_stage\": 2, \"microbatches\": 1,\n"
      "  \"recompute_ops\": {\"act\": \"full\"}, \"zero_params\": {\"w1\": 3}},\n"
      " \"operators\": []}";
  rs_graph* g = build_block();
  rs_cluster* c = NULL;
  rs_options* infer = NULL;
  rs_result *r = NULL, *ri = NULL;
  size_t n = 0, op, t;
  const char* rc = NULL;
  int zero = -1;
  int64_t micro = 0;
  const uint32_t* zaxes = NULL;
  size_t zcount = 0;
  OK(rs_cluster_create_flat(2, &c));
  OK(rs_evaluate(g, c, kPlan, strlen(kPlan), NULL, &r));
  if (r == NULL) goto done;
  OK(rs_result_training(r, &rc, &zero, &micro));
  CHECK(rc != NULL && strcmp(rc, "selective") == 0 && zero == 2 && micro == 1);
  OK(rs_result_num_operators(r, &n));
  for (op = 0; op < n; ++op) {
    const char* name = NULL;
    OK(rs_result_operator_name(r, op, &name));
    OK(rs_result_operator_recompute(r, op, &rc));
    CHECK(rc != NULL && strcmp(rc, strcmp(name, "act") == 0 ? "full" : "selective") == 0);
  }
  FAILS(rs_result_operator_recompute(r, n, &rc), RS_USAGE, 201, "out of range");
  FAILS(rs_result_operator_recompute(r, 0, NULL), RS_USAGE, 201, "output pointer");
  OK(rs_result_find_tensor(r, "w1", &t));
  OK(rs_result_parameter_zero_stage(r, t, &zero));
  CHECK(zero == 3);
  OK(rs_result_find_tensor(r, "w2", &t));
  OK(rs_result_parameter_zero_stage(r, t, &zero));
  CHECK(zero == 2);
  OK(rs_result_find_tensor(r, "x", &t));
  FAILS(rs_result_parameter_zero_stage(r, t, &zero), RS_USAGE, 201, "not a parameter");
  OK(rs_result_num_tensors(r, &n));
  FAILS(rs_result_parameter_zero_stage(r, n, &zero), RS_USAGE, 201, "out of range");
  /* ZeRO axes: proj's pin cuts its batch over the one axis and replicates
   * wp there; dense1 is replicated, so w1 shards over none. */
  OK(rs_result_find_tensor(r, "wp", &t));
  OK(rs_result_parameter_zero_axes(r, t, &zaxes, &zcount));
  CHECK(zcount == 1 && zaxes != NULL && zaxes[0] == 0);
  OK(rs_result_find_tensor(r, "w1", &t));
  OK(rs_result_parameter_zero_axes(r, t, &zaxes, &zcount));
  CHECK(zcount == 0);
  OK(rs_result_find_tensor(r, "x", &t));
  FAILS(rs_result_parameter_zero_axes(r, t, &zaxes, &zcount), RS_USAGE, 201, "not a parameter");
  FAILS(rs_result_parameter_zero_axes(r, n, &zaxes, &zcount), RS_USAGE, 201, "out of range");
  OK(rs_result_find_tensor(r, "wp", &t));
  FAILS(rs_result_parameter_zero_axes(r, t, NULL, &zcount), RS_USAGE, 201, "output pointer");
  /* An inference plan recomputes nothing and shards no state. */
  OK(rs_options_create(&infer));
  OK(rs_options_set_mode(infer, "infer"));
  OK(rs_evaluate(g, c, kPlan, strlen(kPlan), infer, &ri));
  if (ri != NULL) {
    OK(rs_result_operator_recompute(ri, 0, &rc));
    CHECK(rc != NULL && strcmp(rc, "none") == 0);
    OK(rs_result_find_tensor(ri, "w1", &t));
    OK(rs_result_parameter_zero_stage(ri, t, &zero));
    CHECK(zero == 0);
    OK(rs_result_find_tensor(ri, "wp", &t));
    OK(rs_result_parameter_zero_axes(ri, t, &zaxes, &zcount));
    CHECK(zcount == 0);
  }
done:
  rs_result_free(ri);
  rs_result_free(r);
  rs_options_free(infer);
  rs_cluster_free(c);
  rs_graph_free(g);
}

int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "all";
  int all = strcmp(which, "all") == 0;
  if (all || strcmp(which, "build") == 0) test_build();
  if (all || strcmp(which, "errors") == 0) test_errors();
  if (all || strcmp(which, "threads") == 0) test_threads();
  if (all || strcmp(which, "eval") == 0) test_eval();
  if (all || strcmp(which, "training") == 0) test_training_detail();
  if (all || strcmp(which, "bytes") == 0) test_bytes();
  if (all || strcmp(which, "costmodel") == 0) test_costmodel();
  if (failures > 0) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures == 0 ? 0 : 1;
}
