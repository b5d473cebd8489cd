/* SPDX-License-Identifier: Apache-2.0 */
/* The recsearch C API: plan operator-level parallel strategies from C, or
 * from any language that can call C (ctypes, Rust FFI, JNI, ...).
 *
 * Pure C (C99 and C++), every name prefixed rs_. Objects are opaque handles
 * made by rs_*_create (or rs_*_from_json / rs_search / rs_evaluate) and
 * released by the matching rs_*_free, which accepts NULL. Every function that
 * can fail returns an rs_status; on failure rs_last_error() gives a one-line
 * message (naming the JSON path for bad graphs, e.g.
 * "graph.json: /operators/3/inputs/1: unknown tensor 'h9' [E103]") and
 * rs_last_error_code() the stable error id. No C++ exception ever leaves the
 * library; out-of-memory is reported as RS_RUNTIME.
 *
 *   rs_graph* g = NULL;  rs_cluster* c = NULL;  rs_result* r = NULL;
 *   rs_graph_create("mlp", &g);
 *   int64_t xs[] = {32, 784}, ws[] = {784, 512}, hs[] = {32, 512};
 *   rs_graph_add_tensor(g, "x", xs, 2, "f32", "input");
 *   rs_graph_add_tensor(g, "w", ws, 2, "f32", "parameter");
 *   rs_graph_add_tensor(g, "h", hs, 2, "f32", NULL);
 *   const char* in[] = {"x", "w"};  const char* out[] = {"h"};
 *   rs_graph_add_operator(g, "dense", "MatMul", in, 2, out, 1);
 *   rs_cluster_create_mesh((const int64_t[]){2, 4}, 2, &c);
 *   if (rs_search(g, c, NULL, &r) != RS_OK) fprintf(stderr, "%s\n", rs_last_error());
 *
 * Threads: the library keeps no global state except the per-thread error
 * message. Different handles may be used from different threads at once;
 * one handle may be read (searched, evaluated, queried) from several
 * threads at once but must not be modified while another thread uses it.
 *
 * Strings returned through `const char**` belong to the handle they came
 * from and live as long as it does; strings returned through `char**` are
 * the caller's and are released with rs_free. Text inputs given with a
 * length may hold any bytes (no NUL terminator is needed or assumed).
 */
#ifndef RECSEARCH_RECSEARCH_H
#define RECSEARCH_RECSEARCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported functions: the library is built with hidden symbols
 * by default, so that only the C API is visible. */
#if defined(__GNUC__) || defined(__clang__)
#define RS_API __attribute__((visibility("default")))
#else
#define RS_API
#endif

/* Version of the library this header belongs to: RS_VERSION_MAJOR, _MINOR,
 * _PATCH and RS_VERSION_STRING, written by the build (version.h.in). */
#include "recsearch/version.h"

/* Outcome of a call. The values equal the recsearch CLI's exit codes, and
 * group the stable error ids (rs_last_error_code) by their hundreds digit. */
typedef enum rs_status {
  RS_OK = 0, /* success */
  /* Invalid graph, cluster or plan: what a file with the same content would
   * be rejected for, references to unknown tensors or operators while
   * building included (ids 101-110). */
  RS_BAD_INPUT = 1,
  /* Bad argument: NULL pointer, unknown dtype, kind, mode, algorithm or
   * coefficient name, index or name not in a result (201). */
  RS_USAGE = 2,
  RS_NO_FIT = 3,  /* no plan fits the memory budget (301) */
  RS_RUNTIME = 4, /* runtime failure, out of memory (401) */
  RS_INTERNAL = 5 /* a broken invariant inside the library: please report (501) */
} rs_status;

typedef struct rs_graph rs_graph;     /* a computation graph */
typedef struct rs_cluster rs_cluster; /* devices: hierarchy levels and device model */
typedef struct rs_options rs_options; /* search and evaluation options */
typedef struct rs_result rs_result;   /* a plan with its evaluation */

/* ---- library ----------------------------------------------------------- */

/* "major.minor.patch" of the loaded library (compare with RS_VERSION_STRING). */
RS_API const char* rs_version(void);
/* major * 10000 + minor * 100 + patch of the loaded library. */
RS_API int rs_version_number(void);
/* Message of the most recent failed call on this thread ("" if none yet).
 * Successful calls leave it unchanged. Valid until the next failing call on
 * this thread. */
RS_API const char* rs_last_error(void);
/* Stable error id of that failure (e.g. 103 unknown name, 201 usage), 0 if
 * none yet. */
RS_API int rs_last_error_code(void);
/* Name of a status, e.g. "bad_input"; "unknown" for other values. */
RS_API const char* rs_status_name(rs_status status);
/* Releases a string the library returned through a char** (NULL is fine). */
RS_API void rs_free(char* p);

/* ---- graphs ------------------------------------------------------------ */

/* An empty graph (name may be NULL). */
RS_API rs_status rs_graph_create(const char* name, rs_graph** out);
/* A graph from recsearch.graph JSON text of `len` bytes; `source` names it in
 * messages (NULL: "<memory>"). Checks structure, shapes and attributes. */
RS_API rs_status rs_graph_from_json(const char* text, size_t len, const char* source,
                                    rs_graph** out);
/* A graph from a recsearch.graph JSON file. */
RS_API rs_status rs_graph_read_file(const char* path, rs_graph** out);
RS_API void rs_graph_free(rs_graph* g);

/* Adds a tensor. dtype: f64 f32 f16 bf16 f8 i64 i32 i16 i8 u8 bool; kind:
 * "input" (also for NULL), "parameter" or "constant" (a tensor an operator
 * produces becomes an activation). `shape` may be NULL when rank is 0. */
RS_API rs_status rs_graph_add_tensor(rs_graph* g, const char* name, const int64_t* shape,
                                     size_t rank, const char* dtype, const char* kind);
/* Adds an operator of `type` (an operator kind such as "MatMul", or any
 * other name, which runs replicated) over tensors already added. */
RS_API rs_status rs_graph_add_operator(rs_graph* g, const char* name, const char* type,
                                       const char* const* inputs, size_t num_inputs,
                                       const char* const* outputs, size_t num_outputs);
/* Attributes of operator `op` (ONNX names; docs/formats.md, Operator kinds). */
RS_API rs_status rs_graph_set_attr_int(rs_graph* g, const char* op, const char* attr,
                                       int64_t value);
RS_API rs_status rs_graph_set_attr_float(rs_graph* g, const char* op, const char* attr,
                                         double value);
RS_API rs_status rs_graph_set_attr_bool(rs_graph* g, const char* op, const char* attr, int value);
RS_API rs_status rs_graph_set_attr_string(rs_graph* g, const char* op, const char* attr,
                                          const char* value);
RS_API rs_status rs_graph_set_attr_ints(rs_graph* g, const char* op, const char* attr,
                                        const int64_t* values, size_t count);
RS_API rs_status rs_graph_set_attr_floats(rs_graph* g, const char* op, const char* attr,
                                          const double* values, size_t count);
RS_API rs_status rs_graph_set_attr_strings(rs_graph* g, const char* op, const char* attr,
                                           const char* const* values, size_t count);
/* Pins the strategy of operator `op` (MindSpore convention): for input j,
 * ranks[j] split counts, concatenated in `splits`. num_inputs must equal the
 * operator's input count and ranks[j] the rank of input j. */
RS_API rs_status rs_graph_pin_strategy(rs_graph* g, const char* op, const int64_t* splits,
                                       const size_t* ranks, size_t num_inputs);
/* Restricts the loop dimensions the search may cut for `op` (e.g. "i", "j"). */
RS_API rs_status rs_graph_set_allowed(rs_graph* g, const char* op, const char* const* loops,
                                      size_t count);
/* Checks the graph as the search will (structure, cycles, shapes against
 * operator kinds); errors name the JSON path the graph file would have. */
RS_API rs_status rs_graph_validate(rs_graph* g);
/* Counts of what was added so far. */
RS_API rs_status rs_graph_num_tensors(const rs_graph* g, size_t* out);
RS_API rs_status rs_graph_num_operators(const rs_graph* g, size_t* out);
/* The graph as recsearch.graph JSON (release with rs_free). */
RS_API rs_status rs_graph_to_json(const rs_graph* g, char** out, size_t* len);

/* ---- clusters ---------------------------------------------------------- */

/* `devices` devices in one flat level (100 GB/s, 5 us). */
RS_API rs_status rs_cluster_create_flat(int64_t devices, rs_cluster** out);
/* A mesh, outermost level first (as the CLI's --mesh 64x8): the innermost
 * level gets 450 GB/s and 2 us, outer ones 50 GB/s and 5 us. */
RS_API rs_status rs_cluster_create_mesh(const int64_t* dims, size_t count, rs_cluster** out);
/* A cluster without levels yet (counted as one device; searching with it
 * fails until a level is added), to add levels to. */
RS_API rs_status rs_cluster_create(const char* name, rs_cluster** out);
/* A cluster from recsearch.cluster JSON text of `len` bytes. */
RS_API rs_status rs_cluster_from_json(const char* text, size_t len, const char* source,
                                      rs_cluster** out);
/* The same, except that a key the format does not define (a misspelt
 * "bandwidth_GBs") is an error (RS_BAD_INPUT, id 102) naming its JSON path
 * and the nearest defined key, where rs_cluster_from_json ignores it. */
RS_API rs_status rs_cluster_from_json_strict(const char* text, size_t len, const char* source,
                                             rs_cluster** out);
RS_API void rs_cluster_free(rs_cluster* c);
/* Appends an inner level: `size` devices per part of the level above, each
 * with a link of bandwidth_GBps (1 GB = 1e9 bytes) and latency_us. */
RS_API rs_status rs_cluster_add_level(rs_cluster* c, const char* name, int64_t size,
                                      double bandwidth_GBps, double latency_us);
/* The device model: dense peak TFLOP/s, memory capacity in GiB (the default
 * budget) and HBM bandwidth in GB/s. */
RS_API rs_status rs_cluster_set_device(rs_cluster* c, double peak_TFLOPs, double memory_GiB,
                                       double memory_bandwidth_GBps);
RS_API rs_status rs_cluster_num_devices(const rs_cluster* c, int64_t* out);

/* ---- options ----------------------------------------------------------- */

RS_API rs_status rs_options_create(rs_options** out);
RS_API void rs_options_free(rs_options* o);
/* "train" (default) or "infer". For rs_evaluate: the plan's mode unless set. */
RS_API rs_status rs_options_set_mode(rs_options* o, const char* mode);
/* "rec" (default), "data-parallel", "megatron", "grid", "ilp" (when built
 * with COIN-OR CBC) or "exhaustive". */
RS_API rs_status rs_options_set_algorithm(rs_options* o, const char* algorithm);
/* How much time rec spends on plan quality: "default" (polish graphs of
 * at most 2*10^4 operators x mesh axes) or "fast" (its passes alone). See
 * docs/search.md, Effort. */
RS_API rs_status rs_options_set_effort(rs_options* o, const char* effort);
/* Worker threads, 0 = all (default); the plan is the same for every value. */
RS_API rs_status rs_options_set_threads(rs_options* o, int threads);
/* Memory budget per device in bytes (> 0); default: the device's capacity. */
RS_API rs_status rs_options_set_memory_budget(rs_options* o, double bytes);
/* Training settings to pin; the search chooses those left to it: recompute
 * "none", "selective", "full", or "auto" / NULL (searched); zero_stage 0..3,
 * or -1 (searched); microbatches >= 1 dividing the batch, or 0 (searched).
 * See docs/cost-model.md, Training. */
RS_API rs_status rs_options_set_training(rs_options* o, const char* recompute, int zero_stage,
                                         int64_t microbatches);
/* One cost coefficient by name (backward_flops_factor, compute_efficiency,
 * gradient_bytes_factor, optimizer_bytes_factor, memory_budget_bytes; 0 or 1
 * for count_latency, bucket_gradients, overlap and tf32). */
RS_API rs_status rs_options_set_cost(rs_options* o, const char* name, double value);
/* Cost coefficients as a JSON object of `len` bytes. Coefficients apply over
 * those of the graph and cluster JSON, in the order they were set. */
RS_API rs_status rs_options_set_cost_json(rs_options* o, const char* text, size_t len);

/* A cost model of one's own (measured collectives, a kernel library's
 * speed), the C form of recsearch::cost::CostModel. Each callback receives
 * the symbolic model's price and returns the price to use; a NULL callback
 * keeps the symbolic one. Gradient synchronisation is priced through the
 * collective callback. The search calls them from several threads at once:
 * they must be thread-safe, must not fail, and return seconds >= 0.
 * `collective` is "all_gather", "reduce_scatter", "all_reduce",
 * "all_to_all" or "halo"; `devices` is the size of the cut, `bandwidth_Bps`
 * and `latency_s` those of its link. `user` is passed through. */
typedef struct rs_cost_callbacks {
  double (*collective_seconds)(const char* collective, double group_bytes, int64_t devices,
                               double bandwidth_Bps, double latency_s, double symbolic_seconds,
                               void* user);
  double (*compute_seconds)(double flops, double bytes, double symbolic_seconds, void* user);
  void* user;
} rs_cost_callbacks;
/* Copies *callbacks into the options; NULL restores the symbolic model. */
RS_API rs_status rs_options_set_cost_callbacks(rs_options* o, const rs_cost_callbacks* callbacks);

/* ---- search and evaluation --------------------------------------------- */

/* Searches a plan for `g` on `c`; `o` may be NULL (defaults). The result is
 * independent of the handles it was made from (they may be freed). */
RS_API rs_status rs_search(const rs_graph* g, const rs_cluster* c, const rs_options* o,
                           rs_result** out);
/* Evaluates a plan given as recsearch.plan JSON text of `len` bytes. `c` may
 * be NULL: the plan's own cluster (or its mesh). `o` may be NULL. */
RS_API rs_status rs_evaluate(const rs_graph* g, const rs_cluster* c, const char* plan_json,
                             size_t len, const rs_options* o, rs_result** out);
RS_API void rs_result_free(rs_result* r);

/* Step time, compute, communication (seconds) and memory per device (bytes). */
typedef struct rs_summary {
  double step_time_s;
  double compute_s;
  double communication_s;
  double memory_per_device_bytes;
  double parameter_bytes;  /* of memory_per_device_bytes: parameter state */
  double activation_bytes; /* of memory_per_device_bytes: activations */
  double search_time_s;    /* 0 for rs_evaluate */
} rs_summary;
RS_API rs_status rs_result_summary(const rs_result* r, rs_summary* out);
/* The plan's training settings (docs/cost-model.md, Training): recompute
 * ("none", "selective", "full"; valid while r lives), ZeRO stage and
 * microbatches. An inference plan reports "none", 0 and 1. */
RS_API rs_status rs_result_training(const rs_result* r, const char** recompute, int* zero_stage,
                                    int64_t* microbatches);
/* The recomputation of one operator (its pin, else the plan's per-operator
 * value, else the plan-wide one): "none", "selective" or "full", valid for
 * the program; "none" in inference. A plan that recomputes some blocks
 * fully and the rest selectively reports "selective" in rs_result_training
 * and each operator's own here. */
RS_API rs_status rs_result_operator_recompute(const rs_result* r, size_t op,
                                              const char** recompute);
/* The ZeRO stage of one parameter (its own where the plan names one, else
 * the plan-wide one; 0 in inference). RS_USAGE for a tensor that is not a
 * parameter. */
RS_API rs_status rs_result_parameter_zero_stage(const rs_result* r, size_t tensor, int* zero_stage);
/* The ZeRO axes of one parameter: the mesh axes (indices as in
 * rs_result_axis, ascending) over which its stage shards its state, those
 * of more than one device on which the operator holding it is cut while it
 * is replicated (the plan file's "zero_axes"). None at stage 0 and in
 * inference. Valid while r lives. RS_USAGE for a tensor that is not a
 * parameter. */
RS_API rs_status rs_result_parameter_zero_axes(const rs_result* r, size_t tensor,
                                               const uint32_t** axes, size_t* count);

/* Mesh axes of the plan (the cut schedule): name ("c0", ...), size (a prime)
 * and the cluster level it belongs to. */
RS_API rs_status rs_result_num_axes(const rs_result* r, size_t* out);
RS_API rs_status rs_result_axis(const rs_result* r, size_t axis, const char** name, int64_t* size,
                                const char** level);

/* Operators, in the order they were added (or appear in the graph file). */
RS_API rs_status rs_result_num_operators(const rs_result* r, size_t* out);
RS_API rs_status rs_result_operator_name(const rs_result* r, size_t op, const char** out);
/* Index of the operator called `name` (RS_USAGE when there is none). */
RS_API rs_status rs_result_find_operator(const rs_result* r, const char* name, size_t* out);
/* Strategy of an operator: its number of inputs, and for input j the split
 * count of each dimension (`rank` entries at *splits). */
RS_API rs_status rs_result_strategy_num_inputs(const rs_result* r, size_t op, size_t* out);
RS_API rs_status rs_result_strategy(const rs_result* r, size_t op, size_t input,
                                    const int64_t** splits, size_t* rank);
/* The loop an operator cuts on `axis`, or NULL when it is replicated there. */
RS_API rs_status rs_result_cut(const rs_result* r, size_t op, size_t axis, const char** loop);

/* Tensors, in the order they were added. */
RS_API rs_status rs_result_num_tensors(const rs_result* r, size_t* out);
RS_API rs_status rs_result_tensor_name(const rs_result* r, size_t tensor, const char** out);
RS_API rs_status rs_result_find_tensor(const rs_result* r, const char* name, size_t* out);
RS_API rs_status rs_result_tensor_rank(const rs_result* r, size_t tensor, size_t* out);
/* The mesh axes splitting dimension `dim` of a tensor, outermost first. */
RS_API rs_status rs_result_tensor_sharding(const rs_result* r, size_t tensor, size_t dim,
                                           const uint32_t** axes, size_t* count);
/* The mesh axes on which a tensor is a partial sum. */
RS_API rs_status rs_result_tensor_partial(const rs_result* r, size_t tensor, const uint32_t** axes,
                                          size_t* count);

/* One collective the plan implies. Names point into the result. */
typedef struct rs_redistribution {
  const char* tensor;     /* tensor moved */
  const char* from;       /* holder (or the operator itself); NULL if none */
  const char* to;         /* consumer for layout changes; NULL otherwise */
  uint32_t axis;          /* mesh axis index */
  const char* collective; /* all_gather, reduce_scatter, all_reduce, all_to_all, halo */
  const char* phase;      /* forward, backward */
  const char* reason;     /* layout, gradient, halo, output */
  double bytes;           /* sent per device */
  double seconds;
} rs_redistribution;
RS_API rs_status rs_result_num_redistributions(const rs_result* r, size_t* out);
RS_API rs_status rs_result_redistribution(const rs_result* r, size_t index, rs_redistribution* out);

/* The plan as recsearch.plan JSON (what `recsearch search` writes), or as
 * the CLI's table; release with rs_free. */
RS_API rs_status rs_result_plan_json(const rs_result* r, char** out, size_t* len);
RS_API rs_status rs_result_plan_table(const rs_result* r, char** out, size_t* len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RECSEARCH_RECSEARCH_H */
