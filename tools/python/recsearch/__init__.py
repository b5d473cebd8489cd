# SPDX-License-Identifier: Apache-2.0
"""Python binding of the recsearch C API (include/recsearch/recsearch.h),
standard library only (ctypes): an example of a foreign-language client.

    import recsearch
    g = recsearch.Graph.read_file("data/graphs/gpt2_block.json")
    plan = recsearch.search(g, recsearch.Cluster.mesh([64, 8]), mode="train")
    print(plan.summary["step_time_s"], plan.strategy("attn.c_attn.matmul"))

The shared library is found through $RECSEARCH_LIBRARY (a path), else
ctypes.util.find_library("recsearch"), else "librecsearch.so.0" on the
loader's path. Failures raise RecsearchError with the library's status,
stable error id and message.

recsearch.torch (tools/python/recsearch/torch.py, needs PyTorch) builds
graphs from torch modules with torch.fx and answers per parameter in
DTensor's terms; it is imported on first use of `recsearch.torch`.
"""

import ctypes
import ctypes.util
import os

__all__ = ["RecsearchError", "Graph", "Cluster", "Plan", "search", "evaluate", "version"]

_STATUS = {0: "ok", 1: "bad_input", 2: "usage", 3: "no_fit", 4: "runtime", 5: "internal"}

_c_char_p_p = ctypes.POINTER(ctypes.c_char_p)
_size_p = ctypes.POINTER(ctypes.c_size_t)


class RecsearchError(Exception):
    """A failed call: status name ("bad_input", "usage", ...), error id, message."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = _STATUS.get(status, "unknown")
        self.exit_code = status
        self.code = code
        self.message = message


class _Summary(ctypes.Structure):
    _fields_ = [(n, ctypes.c_double) for n in (
        "step_time_s", "compute_s", "communication_s", "memory_per_device_bytes",
        "parameter_bytes", "activation_bytes", "search_time_s")]


class _Redistribution(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_char_p), ("from_", ctypes.c_char_p),
                ("to", ctypes.c_char_p), ("axis", ctypes.c_uint32),
                ("collective", ctypes.c_char_p), ("phase", ctypes.c_char_p),
                ("reason", ctypes.c_char_p), ("bytes", ctypes.c_double),
                ("seconds", ctypes.c_double)]


def _load():
    path = os.environ.get("RECSEARCH_LIBRARY") or ctypes.util.find_library("recsearch") \
        or "librecsearch.so.0"
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    S = ctypes.c_size_t
    I64 = ctypes.c_int64
    D = ctypes.c_double
    C = ctypes.c_char_p
    PP = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "rs_version": ([], C),
        "rs_version_number": ([], ctypes.c_int),
        "rs_last_error": ([], C),
        "rs_last_error_code": ([], ctypes.c_int),
        "rs_free": ([P], None),
        "rs_graph_create": ([C, PP], ctypes.c_int),
        "rs_graph_from_json": ([C, S, C, PP], ctypes.c_int),
        "rs_graph_read_file": ([C, PP], ctypes.c_int),
        "rs_graph_free": ([P], None),
        "rs_graph_add_tensor": ([P, C, ctypes.POINTER(I64), S, C, C], ctypes.c_int),
        "rs_graph_add_operator": ([P, C, C, _c_char_p_p, S, _c_char_p_p, S], ctypes.c_int),
        "rs_graph_set_attr_int": ([P, C, C, I64], ctypes.c_int),
        "rs_graph_set_attr_float": ([P, C, C, D], ctypes.c_int),
        "rs_graph_set_attr_bool": ([P, C, C, ctypes.c_int], ctypes.c_int),
        "rs_graph_set_attr_string": ([P, C, C, C], ctypes.c_int),
        "rs_graph_set_attr_ints": ([P, C, C, ctypes.POINTER(I64), S], ctypes.c_int),
        "rs_graph_set_attr_floats": ([P, C, C, ctypes.POINTER(D), S], ctypes.c_int),
        "rs_graph_set_attr_strings": ([P, C, C, _c_char_p_p, S], ctypes.c_int),
        "rs_graph_pin_strategy": ([P, C, ctypes.POINTER(I64), _size_p, S], ctypes.c_int),
        "rs_graph_set_allowed": ([P, C, _c_char_p_p, S], ctypes.c_int),
        "rs_graph_validate": ([P], ctypes.c_int),
        "rs_graph_num_tensors": ([P, _size_p], ctypes.c_int),
        "rs_graph_num_operators": ([P, _size_p], ctypes.c_int),
        "rs_graph_to_json": ([P, PP, _size_p], ctypes.c_int),
        "rs_cluster_create_flat": ([I64, PP], ctypes.c_int),
        "rs_cluster_create_mesh": ([ctypes.POINTER(I64), S, PP], ctypes.c_int),
        "rs_cluster_create": ([C, PP], ctypes.c_int),
        "rs_cluster_from_json": ([C, S, C, PP], ctypes.c_int),
        "rs_cluster_free": ([P], None),
        "rs_cluster_add_level": ([P, C, I64, D, D], ctypes.c_int),
        "rs_cluster_set_device": ([P, D, D, D], ctypes.c_int),
        "rs_cluster_num_devices": ([P, ctypes.POINTER(I64)], ctypes.c_int),
        "rs_options_create": ([PP], ctypes.c_int),
        "rs_options_free": ([P], None),
        "rs_options_set_mode": ([P, C], ctypes.c_int),
        "rs_options_set_algorithm": ([P, C], ctypes.c_int),
        "rs_options_set_effort": ([P, C], ctypes.c_int),
        "rs_options_set_threads": ([P, ctypes.c_int], ctypes.c_int),
        "rs_options_set_memory_budget": ([P, D], ctypes.c_int),
        "rs_options_set_cost": ([P, C, D], ctypes.c_int),
        "rs_search": ([P, P, P, PP], ctypes.c_int),
        "rs_evaluate": ([P, P, C, S, P, PP], ctypes.c_int),
        "rs_result_free": ([P], None),
        "rs_result_summary": ([P, ctypes.POINTER(_Summary)], ctypes.c_int),
        "rs_result_num_axes": ([P, _size_p], ctypes.c_int),
        "rs_result_axis": ([P, S, _c_char_p_p, ctypes.POINTER(I64), _c_char_p_p], ctypes.c_int),
        "rs_result_num_operators": ([P, _size_p], ctypes.c_int),
        "rs_result_operator_name": ([P, S, _c_char_p_p], ctypes.c_int),
        "rs_result_find_operator": ([P, C, _size_p], ctypes.c_int),
        "rs_result_strategy_num_inputs": ([P, S, _size_p], ctypes.c_int),
        "rs_result_strategy": ([P, S, S, ctypes.POINTER(ctypes.POINTER(I64)), _size_p],
                               ctypes.c_int),
        "rs_result_cut": ([P, S, S, _c_char_p_p], ctypes.c_int),
        "rs_result_training": ([P, _c_char_p_p, ctypes.POINTER(ctypes.c_int),
                                ctypes.POINTER(I64)], ctypes.c_int),
        "rs_result_operator_recompute": ([P, S, _c_char_p_p], ctypes.c_int),
        "rs_result_parameter_zero_stage": ([P, S, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "rs_result_parameter_zero_axes": ([P, S, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint32)),
                                           _size_p], ctypes.c_int),
        "rs_result_num_tensors": ([P, _size_p], ctypes.c_int),
        "rs_result_tensor_name": ([P, S, _c_char_p_p], ctypes.c_int),
        "rs_result_find_tensor": ([P, C, _size_p], ctypes.c_int),
        "rs_result_tensor_rank": ([P, S, _size_p], ctypes.c_int),
        "rs_result_tensor_sharding": ([P, S, S, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint32)),
                                       _size_p], ctypes.c_int),
        "rs_result_tensor_partial": ([P, S, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint32)),
                                      _size_p], ctypes.c_int),
        "rs_result_num_redistributions": ([P, _size_p], ctypes.c_int),
        "rs_result_redistribution": ([P, S, ctypes.POINTER(_Redistribution)], ctypes.c_int),
        "rs_result_plan_json": ([P, PP, _size_p], ctypes.c_int),
        "rs_result_plan_table": ([P, PP, _size_p], ctypes.c_int),
    }
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = res
    return lib


_lib = _load()


def _enc(s):
    return None if s is None else str(s).encode("utf-8")


def _dec(b):
    # Names and messages may quote arbitrary input bytes.
    return None if b is None else b.decode("utf-8", errors="replace")


def _check(status):
    if status != 0:
        raise RecsearchError(status, _lib.rs_last_error_code(), _dec(_lib.rs_last_error()))


def _strings(values):
    arr = (ctypes.c_char_p * max(1, len(values)))(*[_enc(v) for v in values])
    return arr, len(values)


def _ints(values):
    return (ctypes.c_int64 * max(1, len(values)))(*[int(v) for v in values]), len(values)


def _size():
    return ctypes.c_size_t(0)


def _take_string(fn, handle):
    ptr = ctypes.c_void_p()
    n = ctypes.c_size_t(0)
    _check(fn(handle, ctypes.byref(ptr), ctypes.byref(n)))
    try:
        return ctypes.string_at(ptr.value, n.value).decode("utf-8")
    finally:
        _lib.rs_free(ptr)


def version():
    """Version of the loaded library, "major.minor.patch"."""
    return _dec(_lib.rs_version())


class _Handle:
    _free = None

    def __init__(self, ptr):
        self._ptr = ptr

    def __del__(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        # At interpreter exit the module's globals may already be gone.
        if ptr and self._free is not None and _lib is not None:
            getattr(_lib, self._free)(ptr)

    @property
    def _as_parameter_(self):
        return self._ptr


class Graph(_Handle):
    """A computation graph, built by calls or read from recsearch.graph JSON."""
    _free = "rs_graph_free"

    def __init__(self, name=None, _ptr=None):
        if _ptr is None:
            out = ctypes.c_void_p()
            _check(_lib.rs_graph_create(_enc(name), ctypes.byref(out)))
            _ptr = out.value
        super().__init__(_ptr)

    @classmethod
    def from_json(cls, text, source=None):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = ctypes.c_void_p()
        _check(_lib.rs_graph_from_json(data, len(data), _enc(source), ctypes.byref(out)))
        return cls(_ptr=out.value)

    @classmethod
    def read_file(cls, path):
        out = ctypes.c_void_p()
        _check(_lib.rs_graph_read_file(_enc(os.fspath(path)), ctypes.byref(out)))
        return cls(_ptr=out.value)

    def add_tensor(self, name, shape, dtype="f32", kind=None):
        arr, n = _ints(shape)
        _check(_lib.rs_graph_add_tensor(self, _enc(name), arr, n, _enc(dtype), _enc(kind)))

    def add_operator(self, name, type, inputs, outputs, attrs=None, strategy=None,
                     allowed=None):
        ins, n_in = _strings(inputs)
        outs, n_out = _strings(outputs)
        _check(_lib.rs_graph_add_operator(self, _enc(name), _enc(type), ins, n_in, outs, n_out))
        for key, value in (attrs or {}).items():
            self.set_attr(name, key, value)
        if strategy is not None:
            self.pin_strategy(name, strategy)
        if allowed is not None:
            loops, n = _strings(allowed)
            _check(_lib.rs_graph_set_allowed(self, _enc(name), loops, n))

    def set_attr(self, op, key, value):
        """Sets an attribute; the Python type picks the attribute type, as
        the JSON reader does (a list with any float is a float list)."""
        o, k = _enc(op), _enc(key)
        if isinstance(value, bool):
            _check(_lib.rs_graph_set_attr_bool(self, o, k, int(value)))
        elif isinstance(value, int):
            _check(_lib.rs_graph_set_attr_int(self, o, k, value))
        elif isinstance(value, float):
            _check(_lib.rs_graph_set_attr_float(self, o, k, value))
        elif isinstance(value, str):
            _check(_lib.rs_graph_set_attr_string(self, o, k, _enc(value)))
        elif isinstance(value, (list, tuple)):
            if value and all(isinstance(v, str) for v in value):
                arr, n = _strings(value)
                _check(_lib.rs_graph_set_attr_strings(self, o, k, arr, n))
            elif any(isinstance(v, float) for v in value):
                arr = (ctypes.c_double * max(1, len(value)))(*[float(v) for v in value])
                _check(_lib.rs_graph_set_attr_floats(self, o, k, arr, len(value)))
            else:
                arr, n = _ints(value)
                _check(_lib.rs_graph_set_attr_ints(self, o, k, arr, n))
        else:
            raise TypeError("unsupported attribute type %s for %s" % (type(value).__name__, key))

    def pin_strategy(self, op, strategy):
        flat = [int(s) for per_input in strategy for s in per_input]
        ranks = (ctypes.c_size_t * max(1, len(strategy)))(*[len(s) for s in strategy])
        arr, _ = _ints(flat)
        _check(_lib.rs_graph_pin_strategy(self, _enc(op), arr, ranks, len(strategy)))

    def validate(self):
        _check(_lib.rs_graph_validate(self))

    @property
    def num_tensors(self):
        n = _size()
        _check(_lib.rs_graph_num_tensors(self, ctypes.byref(n)))
        return n.value

    @property
    def num_operators(self):
        n = _size()
        _check(_lib.rs_graph_num_operators(self, ctypes.byref(n)))
        return n.value

    def to_json(self):
        return _take_string(_lib.rs_graph_to_json, self)


class Cluster(_Handle):
    """Devices: flat, a mesh, levels with bandwidths, or recsearch.cluster JSON."""
    _free = "rs_cluster_free"

    @classmethod
    def flat(cls, devices):
        out = ctypes.c_void_p()
        _check(_lib.rs_cluster_create_flat(int(devices), ctypes.byref(out)))
        return cls(out.value)

    @classmethod
    def mesh(cls, dims):
        arr, n = _ints(dims)
        out = ctypes.c_void_p()
        _check(_lib.rs_cluster_create_mesh(arr, n, ctypes.byref(out)))
        return cls(out.value)

    @classmethod
    def from_json(cls, text, source=None):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = ctypes.c_void_p()
        _check(_lib.rs_cluster_from_json(data, len(data), _enc(source), ctypes.byref(out)))
        return cls(out.value)

    @classmethod
    def levels(cls, name, levels, device=None):
        """levels: (name, size, bandwidth_GBps, latency_us), outermost first;
        device: (peak_TFLOPs, memory_GiB, memory_bandwidth_GBps)."""
        out = ctypes.c_void_p()
        _check(_lib.rs_cluster_create(_enc(name), ctypes.byref(out)))
        c = cls(out.value)
        for lname, size, bw, lat in levels:
            _check(_lib.rs_cluster_add_level(c, _enc(lname), int(size), float(bw), float(lat)))
        if device is not None:
            _check(_lib.rs_cluster_set_device(c, *[float(v) for v in device]))
        return c

    @property
    def num_devices(self):
        n = ctypes.c_int64(0)
        _check(_lib.rs_cluster_num_devices(self, ctypes.byref(n)))
        return n.value


# A per-device budget under this many bytes is taken for a figure in GiB.
_SMALLEST_BUDGET_BYTES = 2**20


def _budget_bytes(memory_budget, memory_budget_gib):
    """The memory budget in bytes from memory_budget_gib (GiB) or
    memory_budget (bytes), None for the device's capacity. A byte count
    under 1 MiB is refused: memory_budget=40 meant 40 GiB."""
    if memory_budget is not None and memory_budget_gib is not None:
        raise ValueError("give memory_budget (bytes) or memory_budget_gib (GiB), not both")
    if memory_budget_gib is not None:
        return float(memory_budget_gib) * 2**30
    if memory_budget is None:
        return None
    if 0 < float(memory_budget) < _SMALLEST_BUDGET_BYTES:
        raise ValueError("memory_budget is in bytes, and %g bytes is under 1 MiB per device; "
                         "for GiB say memory_budget_gib=%g" % (memory_budget, memory_budget))
    return float(memory_budget)


class _Options(_Handle):
    _free = "rs_options_free"

    def __init__(self, mode=None, algorithm=None, threads=None, memory_budget=None, cost=None,
                 memory_budget_gib=None, effort=None):
        budget = _budget_bytes(memory_budget, memory_budget_gib)
        out = ctypes.c_void_p()
        _check(_lib.rs_options_create(ctypes.byref(out)))
        super().__init__(out.value)
        if mode is not None:
            _check(_lib.rs_options_set_mode(self, _enc(mode)))
        if algorithm is not None:
            _check(_lib.rs_options_set_algorithm(self, _enc(algorithm)))
        if effort is not None:
            _check(_lib.rs_options_set_effort(self, _enc(effort)))
        if threads is not None:
            _check(_lib.rs_options_set_threads(self, int(threads)))
        if budget is not None:
            _check(_lib.rs_options_set_memory_budget(self, budget))
        for key, value in (cost or {}).items():
            _check(_lib.rs_options_set_cost(self, _enc(key), float(value)))


class Plan(_Handle):
    """A search or evaluation result: strategies, cuts, shardings, costs."""
    _free = "rs_result_free"

    @property
    def summary(self):
        s = _Summary()
        _check(_lib.rs_result_summary(self, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in _Summary._fields_}

    @property
    def axes(self):
        """Mesh axes as (name, size, level), outermost first."""
        n = _size()
        _check(_lib.rs_result_num_axes(self, ctypes.byref(n)))
        out = []
        for a in range(n.value):
            name, level, size = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_int64()
            _check(_lib.rs_result_axis(self, a, ctypes.byref(name), ctypes.byref(size),
                                       ctypes.byref(level)))
            out.append((_dec(name.value), size.value, _dec(level.value)))
        return out

    @property
    def operators(self):
        n = _size()
        _check(_lib.rs_result_num_operators(self, ctypes.byref(n)))
        names = []
        for o in range(n.value):
            s = ctypes.c_char_p()
            _check(_lib.rs_result_operator_name(self, o, ctypes.byref(s)))
            names.append(_dec(s.value))
        return names

    @property
    def tensors(self):
        n = _size()
        _check(_lib.rs_result_num_tensors(self, ctypes.byref(n)))
        names = []
        for t in range(n.value):
            s = ctypes.c_char_p()
            _check(_lib.rs_result_tensor_name(self, t, ctypes.byref(s)))
            names.append(_dec(s.value))
        return names

    def _op(self, op):
        if isinstance(op, int):
            return op
        i = _size()
        _check(_lib.rs_result_find_operator(self, _enc(op), ctypes.byref(i)))
        return i.value

    def _tensor(self, t):
        if isinstance(t, int):
            return t
        i = _size()
        _check(_lib.rs_result_find_tensor(self, _enc(t), ctypes.byref(i)))
        return i.value

    def strategy(self, op):
        """MindSpore-style strategy: per input, the split count of each dim."""
        o = self._op(op)
        n = _size()
        _check(_lib.rs_result_strategy_num_inputs(self, o, ctypes.byref(n)))
        out = []
        for j in range(n.value):
            ptr, rank = ctypes.POINTER(ctypes.c_int64)(), _size()
            _check(_lib.rs_result_strategy(self, o, j, ctypes.byref(ptr), ctypes.byref(rank)))
            out.append([ptr[d] for d in range(rank.value)])
        return out

    def cuts(self, op):
        """Per mesh axis, the loop the operator cuts there, or None."""
        o = self._op(op)
        out = []
        for a in range(len(self.axes)):
            loop = ctypes.c_char_p()
            _check(_lib.rs_result_cut(self, o, a, ctypes.byref(loop)))
            out.append(_dec(loop.value))
        return out

    @property
    def training(self):
        """Plan-wide training settings: {"recompute", "zero_stage", "microbatches"}."""
        rc, z, m = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int64()
        _check(_lib.rs_result_training(self, ctypes.byref(rc), ctypes.byref(z), ctypes.byref(m)))
        return {"recompute": _dec(rc.value), "zero_stage": z.value, "microbatches": m.value}

    def recompute(self, op):
        """The operator's own recomputation: "none", "selective" or "full"."""
        rc = ctypes.c_char_p()
        _check(_lib.rs_result_operator_recompute(self, self._op(op), ctypes.byref(rc)))
        return _dec(rc.value)

    def zero_stage(self, tensor):
        """The parameter's own ZeRO stage (0 to 3)."""
        z = ctypes.c_int()
        _check(_lib.rs_result_parameter_zero_stage(self, self._tensor(tensor), ctypes.byref(z)))
        return z.value

    def zero_axes(self, tensor):
        """Names of the mesh axes the parameter's ZeRO stage shards its state
        over (the plan file's "zero_axes"); empty at stage 0 and in inference."""
        ptr, n = ctypes.POINTER(ctypes.c_uint32)(), _size()
        _check(_lib.rs_result_parameter_zero_axes(self, self._tensor(tensor), ctypes.byref(ptr),
                                                  ctypes.byref(n)))
        names = [a[0] for a in self.axes]
        return [names[ptr[i]] for i in range(n.value)]

    def sharding(self, tensor):
        """(per dim the splitting axis indices, partial axis indices)."""
        t = self._tensor(tensor)
        rank = _size()
        _check(_lib.rs_result_tensor_rank(self, t, ctypes.byref(rank)))
        dims = []
        for d in range(rank.value):
            ptr, n = ctypes.POINTER(ctypes.c_uint32)(), _size()
            _check(_lib.rs_result_tensor_sharding(self, t, d, ctypes.byref(ptr), ctypes.byref(n)))
            dims.append([ptr[i] for i in range(n.value)])
        ptr, n = ctypes.POINTER(ctypes.c_uint32)(), _size()
        _check(_lib.rs_result_tensor_partial(self, t, ctypes.byref(ptr), ctypes.byref(n)))
        return dims, [ptr[i] for i in range(n.value)]

    def redistributions(self):
        n = _size()
        _check(_lib.rs_result_num_redistributions(self, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            r = _Redistribution()
            _check(_lib.rs_result_redistribution(self, i, ctypes.byref(r)))
            out.append({"tensor": _dec(r.tensor), "from": _dec(r.from_), "to": _dec(r.to),
                        "axis": r.axis, "collective": _dec(r.collective),
                        "phase": _dec(r.phase), "reason": _dec(r.reason),
                        "bytes": r.bytes, "seconds": r.seconds})
        return out

    def to_json(self):
        return _take_string(_lib.rs_result_plan_json, self)

    def to_table(self):
        return _take_string(_lib.rs_result_plan_table, self)


def search(graph, cluster, **options):
    """Searches a plan; options: mode, algorithm, effort ("default" or
    "fast"), threads, memory_budget_gib (GiB per device) or memory_budget
    (bytes, at least 1 MiB), cost (dict of coefficients)."""
    o = _Options(**options)
    out = ctypes.c_void_p()
    _check(_lib.rs_search(graph, cluster, o, ctypes.byref(out)))
    return Plan(out.value)


def evaluate(graph, plan_json, cluster=None, **options):
    """Evaluates a recsearch.plan JSON text; cluster None: the plan's own."""
    data = plan_json.encode("utf-8") if isinstance(plan_json, str) else bytes(plan_json)
    o = _Options(**options)
    out = ctypes.c_void_p()
    _check(_lib.rs_evaluate(graph, cluster, data, len(data), o, ctypes.byref(out)))
    return Plan(out.value)



def __getattr__(name):
    # recsearch.torch (the PyTorch front end) loads on first use, so that
    # `import recsearch` never needs torch.
    if name == "torch":
        import importlib
        return importlib.import_module(__name__ + ".torch")
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
