# SPDX-License-Identifier: Apache-2.0
"""PyTorch front end: a torch module in, a recsearch graph and a per-parameter
plan out, with no ONNX involved.

    import recsearch.torch as rt
    g = rt.trace(model, (x,))                       # recsearch graph JSON (a dict)
    p = rt.plan(model, (x,), mesh={"dp": 4, "tp": 2}, mode="train", memory_gib=80)
    p.placements()["layers.3.linear1.weight"]       # (Shard(0), Replicate())

trace() runs torch.fx over the module and records every value's shape by
running the traced graph once on `example_inputs` (an fx Interpreter, so
shapes are torch's own) on the meta device, where no arithmetic is done. Operators are named by the module that runs them
("layer1.0.conv1", "layers.3.self_attn.in_proj"), parameters and buffers by
their fully qualified names. Modules torch.fx cannot trace through (data-
dependent control flow) and torch.nn modules recsearch has no lowering for
raise UntraceableError naming the module; the ONNX route (torch.onnx.export,
then `recsearch import`) handles those.

nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder
are lowered here as torch computes them (torch.nn.functional's
multi_head_attention_forward: packed projection, per-head reshape, scaled
q k^T, softmax, the value product, the output projection), which is also
what torch.onnx.export writes for them; fx cannot trace their shape checks.
Values computed from no input and no parameter (masks, position indices) are
constants, as the ONNX importer folds them.

Placements use PyTorch DTensor's vocabulary, per named mesh dim: Shard(d)
when every search axis of that mesh dim cuts tensor dim d, Replicate() when
none does, Partial() when the tensor is a partial sum there, and Mixed([...])
(one entry per search axis, outermost first) when the search splits one mesh
dim between several tensor dims, which one DTensor placement cannot say.
"""

import contextlib
import copy
import dis
import inspect
import json
import math
import operator

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import recsearch as _rs

__all__ = ["UntraceableError", "Shard", "Replicate", "Partial", "Mixed", "TorchPlan", "trace",
           "plan"]


class UntraceableError(TypeError):
    """torch.fx cannot trace a module, or recsearch cannot lower it."""

    def __init__(self, module_path, module_type, why):
        where = "'%s'" % module_path if module_path else "the root module"
        super().__init__(
            "cannot build a graph for %s (%s): %s. Use the ONNX route instead: "
            "torch.onnx.export(model, example_inputs, 'model.onnx'), then "
            "`recsearch import model.onnx` or `recsearch search model.onnx`."
            % (where, module_type, why))
        self.module_path = module_path
        self.module_type = module_type


# ---- placements (PyTorch DTensor's vocabulary) ------------------------------

class Shard:
    def __init__(self, dim):
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return "Shard(%d)" % self.dim


class Replicate:
    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"


class Partial:
    def __eq__(self, other):
        return isinstance(other, Partial)

    def __hash__(self):
        return hash("Partial")

    def __repr__(self):
        return "Partial()"


class Mixed:
    """One mesh dim split by the search into several axes that place the
    tensor differently: per axis (outermost first), its placement."""

    def __init__(self, parts):
        self.parts = list(parts)

    def __eq__(self, other):
        return isinstance(other, Mixed) and other.parts == self.parts

    def __repr__(self):
        return "Mixed(%s)" % ", ".join(repr(p) for p in self.parts)


# ---- the graph being built --------------------------------------------------

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
           torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


class _Val:
    """What the tracer knows about a tensor value: its graph tensor name (None
    while it is a constant not yet used), shape and dtype, whether it is
    known before the model runs, and then its value; `base` names the
    constant tensor it becomes on first use (a buffer's FQN)."""

    def __init__(self, name, shape, dtype, static=False, value=None, base=None):
        self.name, self.shape, self.dtype, self.static, self.value = \
            name, list(shape), dtype, static, value
        self.base = base


class _Emitter:
    def __init__(self, name, strip=""):
        self.name = name
        self.strip = strip  # the prefix of a wrapped root module (see trace)
        self.tensors = {}
        self.order = []
        self.ops = []
        self.op_names = set()

    def tensor(self, name, shape, dtype, kind=None):
        if self.strip and name.startswith(self.strip):
            name = name[len(self.strip):]
        if name in self.tensors:
            return name
        t = {"name": name, "shape": [int(d) for d in shape], "dtype": _DTYPES.get(dtype, "f32")}
        if kind:
            t["kind"] = kind
        self.tensors[name] = t
        self.order.append(name)
        return name

    def fresh(self, base):
        name, k = base, 1
        while name in self.tensors:
            name, k = "%s_%d" % (base, k), k + 1
        return name

    def act(self, base, shape, dtype):
        return self.tensor(self.fresh(base), shape, dtype)

    def const(self, base, shape, dtype):
        return self.tensor(self.fresh(base), shape, dtype, "constant")

    def op(self, name, type_, inputs, outputs, attrs=None):
        if self.strip and name.startswith(self.strip):
            name = name[len(self.strip):]
        base, k = name, 1
        while name in self.op_names:
            name, k = "%s_%d" % (base, k), k + 1
        self.op_names.add(name)
        o = {"name": name, "type": type_, "inputs": list(inputs), "outputs": list(outputs)}
        if attrs:
            o["attrs"] = attrs
        self.ops.append(o)
        return outputs[0] if len(outputs) == 1 else outputs

    def shape(self, name):
        return self.tensors[name]["shape"]

    def to_json(self):
        return {"format": "recsearch.graph", "version": 1, "name": self.name,
                "tensors": [self.tensors[n] for n in self.order], "operators": self.ops}


# ---- tracing ----------------------------------------------------------------

class _SizedProxy(torch.fx.Proxy):
    """A proxy that knows the value it stands for on the example inputs (a
    meta tensor, _Tracer.values; None where it could not be computed). Sizes,
    rank, dtype and device read from it are Python values, as if the model
    ran on those inputs: code that builds positions or masks from sizes
    (`torch.arange(x.shape[1], device=x.device)`, `torch.triu(torch.ones(t,
    t))`) then runs eagerly, and what it yields enters the graph as a tensor
    constant. The graph is specialised to the example's shapes, which the
    plan is for anyway. Values a shape cannot give (x.sum() > 0) stay
    symbolic, so data-dependent control flow is still refused."""

    def _value(self):
        v = self.tracer.values.get(self.node)
        return v if isinstance(v, torch.Tensor) else None

    def _symbolic(self, attr):
        return torch.fx.proxy.Attribute(self, attr)

    @property
    def shape(self):
        v = self._value()
        return v.shape if v is not None else self._symbolic("shape")

    @property
    def ndim(self):
        v = self._value()
        return v.dim() if v is not None else self._symbolic("ndim")

    @property
    def dtype(self):
        v = self._value()
        return v.dtype if v is not None else self._symbolic("dtype")

    @property
    def device(self):
        # The device the model runs on, not the meta device of the value.
        return self.tracer.device if self._value() is not None else self._symbolic("device")

    def size(self, dim=None):
        v = self._value()
        if v is None:
            return self.tracer.create_proxy("call_method", "size",
                                            (self,) if dim is None else (self, dim), {})
        return v.size() if dim is None else v.size(dim)

    def dim(self):
        v = self._value()
        return v.dim() if v is not None else self.tracer.create_proxy("call_method", "dim",
                                                                      (self,), {})

    def numel(self):
        v = self._value()
        return v.numel() if v is not None else self.tracer.create_proxy("call_method", "numel",
                                                                        (self,), {})

    def __len__(self):
        v = self._value()
        if v is None:
            return super().__len__()
        return len(v)

    # `x.new_zeros(size)` and its kin build a tensor from sizes alone (Swin's
    # shifted-window mask, then filled by slice assignment): made eagerly on
    # the model's device, so that what the code computes from it (setitem,
    # view, masked_fill) runs eagerly too and enters the graph as a constant.
    def _new(self, fill, size, kwargs):
        v = self._value()
        if v is None:
            return None
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        kwargs = dict(kwargs)
        kwargs.setdefault("dtype", v.dtype)
        kwargs.setdefault("device", self.tracer.device)
        return torch.full(size, fill, **kwargs)

    def new_zeros(self, *size, **kwargs):
        t = self._new(0, size, kwargs)
        return t if t is not None else self.tracer.create_proxy(
            "call_method", "new_zeros", (self,) + size, kwargs)

    def new_ones(self, *size, **kwargs):
        t = self._new(1, size, kwargs)
        return t if t is not None else self.tracer.create_proxy(
            "call_method", "new_ones", (self,) + size, kwargs)

    def new_full(self, size, fill_value, **kwargs):
        t = self._new(fill_value, (size,), kwargs)
        return t if t is not None else self.tracer.create_proxy(
            "call_method", "new_full", (self, size, fill_value), kwargs)

    def __iter__(self):
        # `x, _ = self.self_attention(...)` (torchvision's ViT) unpacks a
        # leaf's tuple. torch 1.13 finds the UNPACK_SEQUENCE at f_lasti // 2
        # in the caller's instructions, which is wrong from Python 3.11 on
        # (inline caches) and raises IndexError; the instruction is looked
        # up by its offset instead.
        frame = inspect.currentframe().f_back
        inst = next((i for i in dis.get_instructions(frame.f_code)
                     if i.offset == frame.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return (self[i] for i in range(inst.argval))
        return self.tracer.iter(self)


class _Tracer(torch.fx.Tracer):
    """Keeps the modules recsearch lowers whole as leaves, remembers in
    which module each node was created (its operator's name), and computes
    every node's value on the example inputs as it goes, on the meta device
    (_SizedProxy reads sizes from it). Tensors the traced code computes
    without the inputs become get_attr constants: a buffer under its FQN,
    anything else as fx's `_tensor_constant<i>`, kept on the GraphModule and
    not left on the user's module."""

    def __init__(self, example_inputs=()):
        super().__init__()
        self.path = []
        self.failed = None  # (qualified name, type) of the innermost module that raised
        self.example_inputs = list(example_inputs)
        self.values = {}  # fx Node -> its value on the example inputs (meta), or None
        self.inputs = {}  # placeholder name -> example input (meta)
        self.meta_root = None
        self.buffer_names = {}  # id(buffer) -> FQN
        self.lifted = []  # names of the `_tensor_constant`s set on the root
        self.device = next((x.device for x in self.example_inputs
                            if isinstance(x, torch.Tensor)), torch.device("cpu"))

    def trace(self, root, concrete_args=None):
        with _inline_wrapped():
            return self._trace(root, concrete_args)

    def _trace(self, root, concrete_args):
        self.meta_root = _meta_copy(root)
        self.buffer_names = {id(b): n for n, b in root.named_buffers()}
        try:
            names = list(inspect.signature(type(root).forward).parameters)[1:]
        except (TypeError, ValueError):
            names = []
        self.inputs = {n: _to_meta(x) for n, x in zip(names, self.example_inputs)}
        return super().trace(root, concrete_args)

    def proxy(self, node):
        return _SizedProxy(node, self)

    def is_leaf_module(self, m, qualname):
        if type(m) in _TRACED_THROUGH:
            return False
        return type(m) in _MODULES or super().is_leaf_module(m, qualname)

    def call_module(self, m, forward, args, kwargs):
        self.path.append((self.path_of_module(m), type(m).__name__))
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed is None:
                self.failed = self.path[-1]
            raise
        finally:
            self.path.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["rs_scope"] = self.path[-1][0] if self.path else ""
        return node

    def create_arg(self, a):
        if not isinstance(a, torch.Tensor):
            return super().create_arg(a)  # containers come back here per tensor
        # A buffer the code reads as a plain tensor (fx proxies parameters
        # only) is fetched under its own name rather than lifted as a copy.
        if not isinstance(a, nn.Parameter) and id(a) in self.buffer_names and \
                a not in self.tensor_attrs:
            self.tensor_attrs[a] = self.buffer_names[id(a)]
        known = a in self.tensor_attrs
        out = super().create_arg(a)
        name = self.tensor_attrs.get(a)
        if not known and name is not None and name.startswith("_tensor_constant"):
            self.lifted.append(name)
        return out

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None):
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if isinstance(p, torch.fx.Proxy):
            self.values[p.node] = self.evaluate(p.node)
        return p

    def value_of(self, node):
        if node not in self.values:
            self.values[node] = self.evaluate(node)
        return self.values[node]

    def evaluate(self, node):
        """node's value on the example inputs, computed on the meta device
        from its arguments' values; None where one is unknown or the
        operator has no meta kernel (sizes read from it stay symbolic)."""
        if node.op == "placeholder":
            return self.inputs.get(node.target)
        if node.op == "get_attr":
            return _to_meta(_fetch(self.root, node.target))
        unknown = []

        def val(n):
            v = self.value_of(n)
            if v is None:
                unknown.append(n)
            return v

        args = torch.fx.node.map_arg(node.args, val)
        kwargs = dict(torch.fx.node.map_arg(node.kwargs, val))
        if unknown:
            return None
        if "device" in kwargs:
            kwargs["device"] = "meta"
        try:
            with torch.no_grad():
                if node.op == "call_function":
                    return node.target(*args, **kwargs)
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)
                if node.op == "call_module":
                    return _call_unpatched(self.meta_root.get_submodule(node.target), args,
                                           kwargs)
        except Exception:  # noqa: BLE001  (no meta kernel, or not a tensor operation)
            return None
        return None


# Functions torchvision marks with torch.fx.wrap, so that plain fx records
# each as one call (their bodies read sizes and build masks from them, which
# plain fx cannot); the lowering would keep such a call as one opaque,
# replicated operator. This tracer knows sizes (_SizedProxy), so it traces
# through them, as torch.onnx.export does: Swin's window attention, its
# relative-position bias (a Gather of the table), its patch merging, and
# stochastic depth (the input itself in eval mode).
_INLINED = {
    ("torchvision.models.swin_transformer", "shifted_window_attention"),
    ("torchvision.models.swin_transformer", "_get_relative_position_bias"),
    ("torchvision.models.swin_transformer", "_patch_merging_pad"),
    ("torchvision.ops.stochastic_depth", "stochastic_depth"),
}


@contextlib.contextmanager
def _inline_wrapped():
    """While tracing, leaves the _INLINED functions out of the list of
    wrapped functions torch.fx patches (a global list: restored after, with
    anything registered meanwhile)."""
    from torch.fx import _symbolic_trace as st
    table = getattr(st, "_wrapped_fns_to_patch", None)
    if table is None:  # another torch: trace as plain fx does
        yield
        return
    saved = list(table)
    table[:] = [e for e in saved if (e[0].get("__name__"), e[1]) not in _INLINED]
    kept = {id(e) for e in table}
    try:
        yield
    finally:
        table[:] = saved + [e for e in table if id(e) not in kept]


def _call_unpatched(m, args, kwargs):
    """m(*args, **kwargs) while fx traces: fx patches nn.Module's __call__
    and __getattr__ for the trace, and through the patch a call of the meta
    copy's module would be traced (and fail, the copy not being the root's
    submodule) instead of run; they are set back to torch's own for the
    call."""
    st = torch.fx._symbolic_trace
    orig_call = getattr(st, "_orig_module_call", None)
    orig_getattr = getattr(st, "_orig_module_getattr", None)
    if orig_call is None or orig_getattr is None:
        return m(*args, **kwargs)
    patched = nn.Module.__call__, nn.Module.__getattr__
    nn.Module.__call__, nn.Module.__getattr__ = orig_call, orig_getattr
    try:
        return m(*args, **kwargs)
    finally:
        nn.Module.__call__, nn.Module.__getattr__ = patched


def _fetch(root, target):
    """The attribute `target` (dotted) of root, read without
    nn.Module.__getattr__, which fx patches while it traces."""
    v = root
    for atom in target.split("."):
        if isinstance(v, nn.Module):
            for store in (v._parameters, v._buffers, v._modules, vars(v)):
                if atom in store:
                    v = store[atom]
                    break
            else:
                raise AttributeError(target)
        else:
            v = getattr(v, atom)
    return v


def _to_meta(v):
    return v.to("meta") if isinstance(v, torch.Tensor) else v


class _Recorder(torch.fx.Interpreter):
    """Runs the traced graph once, keeping per node its result's shape and
    dtype (tensors) or its value (everything else)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.results = {}

    def run_node(self, n):
        r = super().run_node(n)
        self.results[n] = r
        return r


def _meta_copy(module):
    """The module with every parameter, buffer and plain tensor attribute
    (fx's lifted constants) on the meta device (no data is copied:
    deepcopy's memo hands it the meta tensors)."""
    memo = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    for m in module.modules():
        for v in vars(m).values():
            if isinstance(v, torch.Tensor) and id(v) not in memo:
                memo[id(v)] = torch.empty_like(v, device="meta")
    return copy.deepcopy(module, memo)


def _record(module, gm, example_inputs):
    """Per node of gm's graph, its result when run on example_inputs: on the
    meta device (shapes only, no arithmetic: a large batch costs nothing),
    or for real where an operator has no meta kernel."""
    try:
        # A meta copy of the module (not of gm: GraphModule's deepcopy takes
        # no memo and would copy every weight for real), with the constants
        # fx lifted onto gm.
        root = _meta_copy(module)
        for n in gm.graph.nodes:
            if n.op == "get_attr" and n.target.startswith("_tensor_constant"):
                setattr(root, n.target, _to_meta(_fetch(gm, n.target)))
        meta = torch.fx.GraphModule(root, gm.graph)
        rec = _Recorder(meta)
        with torch.no_grad():
            rec.run(*[x.to("meta") if isinstance(x, torch.Tensor) else x
                      for x in example_inputs])
        return rec.results
    except Exception:  # noqa: BLE001  (a missing meta kernel: run for real)
        rec = _Recorder(gm)
        with torch.no_grad():
            rec.run(*example_inputs)
        return rec.results


class _Lowering:
    """Turns the traced graph into recsearch operators."""

    def __init__(self, module, gm, results, name, strip=""):
        self.root = module
        self.gm = gm
        self.results = results
        self.em = _Emitter(name, strip)
        self.env = {}
        self.modules = dict(module.named_modules())
        self.params = {n: p for n, p in module.named_parameters()}
        self.buffers = {n: b for n, b in module.named_buffers()}
        self.training = module.training
        self.folded = {}      # batch norm FQN -> the conv it is folded into
        self.aliases = {}     # folded parameter FQN -> the graph tensor holding it
        self.parts = set()    # graph parameters that are rows of a module's parameter
        if not self.training:
            self.fold_batch_norms()

    def fold_batch_norms(self):
        """In eval mode a BatchNorm2d that only normalizes a Conv2d's output
        is folded into that convolution, as torch.onnx.export does: the conv
        gets the norm's shift as its bias (the tensor named <norm>.bias, or
        the conv's own bias) and its weight absorbs the scale, so the norm's
        weight is held by that bias tensor too."""
        for n in self.gm.graph.nodes:
            if n.op != "call_module" or not isinstance(self.modules.get(n.target), nn.BatchNorm2d):
                continue
            src = n.args[0]
            if (isinstance(src, torch.fx.Node) and src.op == "call_module"
                    and isinstance(self.modules.get(src.target), nn.Conv2d)
                    and len(src.users) == 1 and self.modules[n.target].affine):
                self.folded[n.target] = src.target
    # -- values --

    def weight(self, fqn):
        """The graph tensor of a parameter or buffer, by its FQN."""
        if fqn in self.params:
            p = self.params[fqn]
            return self.em.tensor(fqn, list(p.shape), p.dtype, "parameter")
        b = self.buffers[fqn]
        return self.em.tensor(fqn, list(b.shape), b.dtype, "constant")

    def weight_rows(self, fqn, lo, hi, tag):
        """Rows lo:hi of parameter `fqn` as a parameter of their own, named
        "<fqn>.<tag>": what torch.onnx.export's constant folding makes of a
        slice of a weight, so that both routes price the same tensors (a
        slice of a parameter would be an activation, its gradient a
        collective of its own). placements() reports `fqn` as its first
        part."""
        p = self.params[fqn]
        name = "%s.%s" % (fqn, tag)
        t = self.em.tensor(name, [hi - lo] + list(p.shape[1:]), p.dtype, "parameter")
        self.parts.add(t)
        self.aliases.setdefault(fqn, t)
        return t

    def name_of(self, v, base="const"):
        """The graph tensor of a value; a constant becomes a constant tensor
        on first use."""
        if isinstance(v, _Val):
            if v.name is None and v.base in self.buffers:  # one tensor however often read
                v.name = self.em.tensor(v.base, v.shape, v.dtype, "constant")
            elif v.name is None:
                v.name = self.em.const(v.base or base, v.shape, v.dtype)
            return v.name
        raise TypeError("not a tensor: %r" % (v,))

    def scalar(self, x, dtype, base="scalar"):
        return self.em.tensor(self.em.fresh(base), [], dtype, "constant")

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    # -- the graph --

    def run(self):
        for node in self.gm.graph.nodes:
            try:
                self.env[node] = self.lower_node(node)
            except UntraceableError:
                raise
            except Exception as e:  # noqa: BLE001  (named with its module below)
                scope = node.meta.get("rs_scope", "")
                mod = self.modules.get(node.target) if node.op == "call_module" else None
                path = node.target if mod is not None else scope
                kind = type(mod or self.modules.get(scope, self.root)).__name__
                raise UntraceableError(path, kind, "lowering %s %s failed: %s"
                                       % (node.op, _target_name(node.target), e)) from e
        return self.em.to_json()

    def lower_node(self, node):
        r = self.results.get(node)
        if node.op == "placeholder":
            if not isinstance(r, torch.Tensor):
                return r
            return _Val(self.em.tensor(node.name, list(r.shape), r.dtype, "input"), r.shape,
                        r.dtype)
        if node.op == "get_attr":
            if not isinstance(r, torch.Tensor):
                return r
            if node.target in self.params:
                return _Val(self.weight(node.target), r.shape, r.dtype)
            # A buffer read in forward (a registered causal mask) or a tensor
            # the code computed from sizes and constants alone, which fx lifts
            # as `_tensor_constant<i>`: known before the model runs, folded
            # with what is computed from it, as the ONNX importer does.
            base = (node.target if node.target in self.buffers else
                    _op_name(node).replace("_tensor_constant", "const"))
            value = _fetch(self.gm, node.target)  # real, where r may be its meta shadow
            return _Val(None, r.shape, r.dtype, static=True, value=value, base=base)
        if node.op == "output":
            return None
        args = self.arg(node.args)
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        tensors_in = [a for a in _flat(args) + _flat(list(kwargs.values())) if isinstance(a, _Val)]
        if not isinstance(r, (torch.Tensor, tuple, list)) or \
                (isinstance(r, (tuple, list)) and not any(isinstance(x, torch.Tensor) for x in r)):
            return r  # sizes, shapes, Python numbers
        if node.op == "call_module":
            m = self.modules[node.target]
            low = _MODULES.get(type(m))
            if low is None:
                raise UntraceableError(node.target, type(m).__name__,
                                       "recsearch has no lowering for torch.nn.%s"
                                       % type(m).__name__)
            return low(self, node.target, m, args, kwargs, r)
        if all(t.static for t in tensors_in) and isinstance(r, torch.Tensor) and \
                not self.depends_on_input(node):
            return _Val(None, r.shape, r.dtype, static=True, value=r)
        name = _op_name(node)
        fn = _FUNCTIONS.get(_target_key(node))
        if fn is None:
            return self.opaque(name, node, tensors_in, r)
        return fn(self, name, args, kwargs, r)

    def depends_on_input(self, node):
        for a in node.all_input_nodes:
            v = self.env.get(a)
            if isinstance(v, _Val) and not v.static:
                return True
        return False

    def out(self, name, r):
        return _Val(self.em.act(name, list(r.shape), r.dtype), r.shape, r.dtype)

    def opaque(self, name, node, tensors_in, r):
        outs = r if isinstance(r, (tuple, list)) else [r]
        vals = [self.out(name if i == 0 else "%s:%d" % (name, i), t) for i, t in enumerate(outs)
                if isinstance(t, torch.Tensor)]
        self.em.op(name, _target_name(node.target), [self.name_of(t) for t in tensors_in],
                   [v.name for v in vals])
        return vals[0] if not isinstance(r, (tuple, list)) else tuple(vals)

    # -- small builders --

    def emit(self, name, type_, inputs, shape, dtype, attrs=None):
        out = self.em.act(name, shape, dtype)
        self.em.op(name, type_, [self.name_of(i) if isinstance(i, _Val) else i for i in inputs],
                   [out], attrs)
        return _Val(out, shape, dtype)

    def linear(self, name, x, weight_fqn, bias_fqn, out_features):
        shape = x.shape[:-1] + [out_features]
        y = self.emit(name + ".matmul" if bias_fqn else name, "MatMul",
                      [x, self.weight(weight_fqn)], shape, x.dtype,
                      {"transpose_a": False, "transpose_b": True})
        if bias_fqn:
            y = self.emit(name, "Add", [y, self.weight(bias_fqn)], shape, x.dtype)
        return y


# ---- helpers ----------------------------------------------------------------

def _flat(xs):
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        else:
            out.append(x)
    return out


def _target_name(t):
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", str(t))


def _target_key(node):
    if node.op == "call_method":
        return "method:" + node.target
    return node.target


def _op_name(node):
    scope = node.meta.get("rs_scope", "")
    return "%s.%s" % (scope, node.name) if scope else node.name


def _pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def _norm_axis(a, rank):
    return a + rank if a < 0 else a


# ---- module lowerings -------------------------------------------------------

def _conv2d(low, fqn, m, args, kwargs, r):
    if isinstance(m.padding, str) or m.padding_mode != "zeros":
        raise UntraceableError(fqn, "Conv2d", "padding '%s' (mode %s) is not lowered"
                               % (m.padding, m.padding_mode))
    ph, pw = _pair(m.padding)
    ins = [args[0], low.weight(fqn + ".weight")]
    norm = next((bn for bn, conv in low.folded.items() if conv == fqn), None)
    if m.bias is not None:
        ins.append(low.weight(fqn + ".bias"))
    elif norm is not None:
        ins.append(low.weight(norm + ".bias"))
    if norm is not None:
        for p in ("weight", "bias"):
            low.aliases["%s.%s" % (norm, p)] = ins[2]
    return low.emit(fqn, "Conv2D", ins, list(r.shape), r.dtype,
                    {"strides": _pair(m.stride), "pads": [ph, pw, ph, pw],
                     "dilations": _pair(m.dilation), "group": m.groups})


def _batch_norm(low, fqn, m, args, kwargs, r):
    if fqn in low.folded:
        return args[0]  # folded into its convolution (see fold_batch_norms)
    if not m.affine or m.running_mean is None:
        raise UntraceableError(fqn, type(m).__name__, "only affine norms with running statistics")
    ins = [args[0]] + [low.weight("%s.%s" % (fqn, n))
                       for n in ("weight", "bias", "running_mean", "running_var")]
    return low.emit(fqn, "BatchNorm", ins, list(r.shape), r.dtype, {"epsilon": m.eps})


def _linear(low, fqn, m, args, kwargs, r):
    return low.linear(fqn, args[0], fqn + ".weight", fqn + ".bias" if m.bias is not None else None,
                      m.out_features)


def _layer_norm(low, fqn, m, args, kwargs, r):
    ins = [args[0]]
    if m.elementwise_affine:
        ins += [low.weight(fqn + ".weight"), low.weight(fqn + ".bias")]
    else:
        ins.append(low.em.const(fqn + ".scale", list(m.normalized_shape), r.dtype))
    return low.emit(fqn, "LayerNorm", ins, list(r.shape), r.dtype,
                    {"axis": -len(m.normalized_shape), "epsilon": m.eps})


def _unary(kind):
    def lower(low, fqn, m, args, kwargs, r):
        return low.emit(fqn, kind, [args[0]], list(r.shape), r.dtype)
    return lower


def _dropout(low, fqn, m, args, kwargs, r):
    # Eval mode runs no dropout (torch.onnx.export drops the node too).
    if not low.training or m.p == 0:
        return args[0]
    return low.emit(fqn, "Dropout", [args[0]], list(r.shape), r.dtype, {"ratio": m.p})


def _identity(low, fqn, m, args, kwargs, r):
    return args[0]


def _pool(kind):
    def lower(low, fqn, m, args, kwargs, r):
        k = _pair(m.kernel_size)
        s = _pair(m.stride if m.stride is not None else m.kernel_size)
        ph, pw = _pair(m.padding)
        attrs = {"kernel_shape": k, "strides": s, "pads": [ph, pw, ph, pw],
                 "ceil_mode": int(bool(m.ceil_mode))}
        if kind == "MaxPool":
            attrs["dilations"] = _pair(m.dilation)
        return low.emit(fqn, kind, [args[0]], list(r.shape), r.dtype, attrs)
    return lower


def _adaptive_avg_pool(low, fqn, m, args, kwargs, r):
    if _pair(m.output_size) != [1, 1]:
        raise UntraceableError(fqn, "AdaptiveAvgPool2d", "only output size 1x1 is lowered")
    return low.emit(fqn, "GlobalAvgPool", [args[0]], list(r.shape), r.dtype)


def _flatten_module(low, fqn, m, args, kwargs, r):
    return _flatten(low, fqn, args[0], m.start_dim, m.end_dim, r)


def _flatten(low, name, x, start, end, r):
    rank = len(x.shape)
    if _norm_axis(end, rank) == rank - 1:
        return low.emit(name, "Flatten", [x], list(r.shape), r.dtype,
                        {"axis": _norm_axis(start, rank)})
    return low.emit(name, "Reshape", [x], list(r.shape), r.dtype)


def _embedding(low, fqn, m, args, kwargs, r):
    idx = args[0]
    if idx.static and _is_every_row(idx.value, m.num_embeddings):
        # Every row in order (a GPT's positions at full length) is the table
        # itself, as torch.onnx.export folds it: the parameter, whose
        # gradient is bucketed with the others, not a gathered activation
        # whose gradient would be reduced on its own.
        return _Val(low.weight(fqn + ".weight"), r.shape, r.dtype)
    return low.emit(fqn, "Gather", [low.weight(fqn + ".weight"), args[0]], list(r.shape),
                    r.dtype, {"axis": 0})


def _is_every_row(index, rows):
    """Whether a constant index tensor is 0, 1, ..., rows - 1 (1-D)."""
    return (isinstance(index, torch.Tensor) and index.device.type != "meta" and
            index.dim() == 1 and index.numel() == rows and
            bool(torch.equal(index.cpu(), torch.arange(rows, dtype=index.dtype))))


def _mha_lower(low, fqn, m, q, k, v, attn_mask=None, key_padding_mask=None):
    """torch's multi_head_attention_forward; returns the attention output
    value. Self-attention (query is key is value) projects once with the
    packed weight and slices q, k and v from the result; cross-attention
    (key is value, as nn.TransformerDecoderLayer's memory) projects the query
    with the first third of the weight and key and value together with the
    rest; three distinct inputs get one projection each, as torch computes
    (and exports) them."""
    if key_padding_mask is not None or m.bias_k is not None or m.add_zero_attn:
        raise UntraceableError(fqn, "MultiheadAttention",
                               "key_padding_mask, bias_k/bias_v and add_zero_attn are not lowered")
    dt = q.dtype
    if m.batch_first:  # to torch's internal [seq, batch, embed]
        seen = {}
        for name, x in (("q", q), ("k", k), ("v", v)):
            if id(x) not in seen:
                b_, s_, e_ = x.shape
                tag = "in" if q is k and k is v else name
                seen[id(x)] = low.emit("%s.transpose_%s" % (fqn, tag), "Transpose", [x],
                                       [s_, b_, e_], dt, {"perm": [1, 0, 2]})
        q, k, v = seen[id(q)], seen[id(k)], seen[id(v)]
    t, b, d = q.shape
    s = k.shape[0]
    h = m.num_heads
    hd = d // h
    q, k, v = _mha_projections(low, fqn, m, q, k, v)
    heads = [low.emit("%s.%s_heads" % (fqn, n), "Reshape", [x], [x.shape[0], b * h, hd], dt)
             for n, x in (("q", q), ("k", k), ("v", v))]
    qh = low.emit(fqn + ".q_t", "Transpose", [heads[0]], [b * h, t, hd], dt, {"perm": [1, 0, 2]})
    qh = low.emit(fqn + ".scale", "Div", [qh, low.scalar(math.sqrt(hd), dt, fqn + ".sqrt_d")],
                  [b * h, t, hd], dt)
    kt = low.emit(fqn + ".k_t", "Transpose", [heads[1]], [b * h, hd, s], dt, {"perm": [1, 2, 0]})
    vh = low.emit(fqn + ".v_t", "Transpose", [heads[2]], [b * h, s, hd], dt, {"perm": [1, 0, 2]})
    scores = low.emit(fqn + ".scores", "MatMul", [qh, kt], [b * h, t, s], dt)
    if attn_mask is not None:
        mask = attn_mask
        if mask.static and mask.dtype == torch.bool:
            mask = _Val(None, mask.shape, dt, static=True,  # masked_fill(-inf) of zeros
                        base=fqn + ".attn_mask")
        scores = low.emit(fqn + ".mask", "Add", [scores, mask], [b * h, t, s], dt)
    attn = low.emit(fqn + ".softmax", "Softmax", [scores], [b * h, t, s], dt, {"axis": -1})
    if low.training and m.dropout > 0:
        attn = low.emit(fqn + ".dropout", "Dropout", [attn], [b * h, t, s], dt,
                        {"ratio": m.dropout})
    ctx = low.emit(fqn + ".context", "MatMul", [attn, vh], [b * h, t, hd], dt)
    ctx = low.emit(fqn + ".context_t", "Transpose", [ctx], [t, b * h, hd], dt, {"perm": [1, 0, 2]})
    # torch views the heads as [t * b, d] for the output projection and back
    # as [t, b, d] after it; the same rows as [t, b, d] throughout keep the
    # batch a dim of its own, so that a batch cut survives the merge (a cut
    # survives a reshape only on the outer factor of a merged dim, and b is
    # the inner factor of t * b).
    ctx = low.emit(fqn + ".merge_heads", "Reshape", [ctx], [t, b, d], dt)
    out = low.linear(fqn + ".out_proj", ctx, fqn + ".out_proj.weight",
                     fqn + ".out_proj.bias" if m.out_proj.bias is not None else None, d)
    if m.batch_first:
        out = low.emit(fqn + ".transpose_out", "Transpose", [out], [b, t, d], dt,
                       {"perm": [1, 0, 2]})
    return out


def _mha_projections(low, fqn, m, q, k, v):
    """The q, k and v projections of multi_head_attention_forward (inputs in
    [seq, batch, embed]): one MatMul per distinct input, with its rows of the
    packed in_proj_weight and in_proj_bias (a parameter of their own where
    it takes part of them, _Lowering.weight_rows) or its own
    q/k/v_proj_weight, and the result sliced where one projection yields
    several of q, k and v."""
    dt = q.dtype
    d = m.embed_dim
    if q is k and k is v:
        groups = [(q, ["q", "k", "v"])]
    elif k is v:
        groups = [(q, ["q"]), (k, ["k", "v"])]
    else:
        groups = [(q, ["q"]), (k, ["k"]), (v, ["v"])]
    if not m._qkv_same_embed_dim:  # separate weights: one projection each
        groups = [(x, [n]) for x, names in groups for n in names]
    index = {"q": 0, "k": 1, "v": 2}
    out = {}
    for x, names in groups:
        lo, hi = index[names[0]] * d, (index[names[-1]] + 1) * d
        tag = "".join(names)
        if m._qkv_same_embed_dim:
            w = (low.weight(fqn + ".in_proj_weight") if hi - lo == 3 * d else
                 low.weight_rows(fqn + ".in_proj_weight", lo, hi, tag))
        else:
            w = low.weight("%s.%s_proj_weight" % (fqn, names[0]))
        shape = x.shape[:-1] + [hi - lo]
        name = fqn + (".in_proj" if len(groups) == 1 else ".%s_proj" % tag)
        y = low.emit(name + ".matmul" if m.in_proj_bias is not None else name, "MatMul", [x, w],
                     shape, dt, {"transpose_a": False, "transpose_b": True})
        if m.in_proj_bias is not None:
            bias = (low.weight(fqn + ".in_proj_bias") if hi - lo == 3 * d else
                    low.weight_rows(fqn + ".in_proj_bias", lo, hi, tag))
            y = low.emit(name, "Add", [y, bias], shape, dt)
        if len(names) == 1:
            out[names[0]] = y
            continue
        for i, n in enumerate(names):
            out[n] = low.emit("%s.%s" % (fqn, n), "Slice", [y], x.shape[:-1] + [d], dt,
                              {"starts": [i * d], "ends": [(i + 1) * d], "axes": [2]})
    return out["q"], out["k"], out["v"]


def _mha(low, fqn, m, args, kwargs, r):
    names = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask"]
    a = dict(zip(names, args))
    a.update(kwargs)
    out = _mha_lower(low, fqn, m, a["query"], a["key"], a["value"], a.get("attn_mask"),
                     a.get("key_padding_mask"))
    # The averaged attention weights (need_weights=True) are not lowered:
    # reading them is an error when the tuple's second item is used.
    return (out, None)


def _activation(low, name, act, x):
    if act is F.relu or isinstance(act, nn.ReLU):
        return low.emit(name, "ReLU", [x], x.shape, x.dtype)
    if act is F.gelu or isinstance(act, nn.GELU):
        return low.emit(name, "GeLU", [x], x.shape, x.dtype)
    raise UntraceableError(name, type(act).__name__, "activation is not lowered")


def _encoder_layer_lower(low, fqn, m, x, mask):
    def sa(t):
        y = _mha_lower(low, fqn + ".self_attn", m.self_attn, t, t, t, mask)
        return _dropout_fn(low, fqn + ".dropout1", m.dropout1.p, y)

    def ff(t):
        y = low.linear(fqn + ".linear1", t, fqn + ".linear1.weight", fqn + ".linear1.bias",
                       m.linear1.out_features)
        y = _activation(low, fqn + ".activation", m.activation, y)
        y = _dropout_fn(low, fqn + ".dropout", m.dropout.p, y)
        y = low.linear(fqn + ".linear2", y, fqn + ".linear2.weight", fqn + ".linear2.bias",
                       m.linear2.out_features)
        return _dropout_fn(low, fqn + ".dropout2", m.dropout2.p, y)

    def norm(name, t):
        return low.emit(fqn + "." + name, "LayerNorm",
                        [t, low.weight(fqn + "." + name + ".weight"),
                         low.weight(fqn + "." + name + ".bias")],
                        t.shape, t.dtype, {"axis": -1, "epsilon": getattr(m, name).eps})

    def add(name, a, b):
        return low.emit(fqn + "." + name, "Add", [a, b], a.shape, a.dtype)

    if m.norm_first:
        x = add("add1", x, sa(norm("norm1", x)))
        return add("add2", x, ff(norm("norm2", x)))
    x = norm("norm1", add("add1", x, sa(x)))
    return norm("norm2", add("add2", x, ff(x)))


def _dropout_fn(low, name, p, x):
    if not low.training or p == 0:
        return x
    return low.emit(name, "Dropout", [x], x.shape, x.dtype, {"ratio": p})


def _encoder_layer(low, fqn, m, args, kwargs, r):
    mask = kwargs.get("src_mask", args[1] if len(args) > 1 else None)
    return _encoder_layer_lower(low, fqn, m, args[0], mask)


def _encoder(low, fqn, m, args, kwargs, r):
    mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
    x = args[0]
    for i, layer in enumerate(m.layers):
        x = _encoder_layer_lower(low, "%s.layers.%d" % (fqn, i), layer, x, mask)
    if m.norm is not None:
        x = _layer_norm(low, fqn + ".norm", m.norm, [x], {}, _Shape(x))
    return x


class _Shape:
    """Stands for a torch result where a lowering only reads shape and dtype."""

    def __init__(self, v):
        self.shape, self.dtype = v.shape, v.dtype


_MODULES = {
    nn.Conv2d: _conv2d,
    nn.BatchNorm2d: _batch_norm,
    nn.Linear: _linear,
    nn.LayerNorm: _layer_norm,
    nn.ReLU: _unary("ReLU"),
    nn.GELU: _unary("GeLU"),
    nn.SiLU: _unary("SiLU"),
    nn.Sigmoid: _unary("Sigmoid"),
    nn.Tanh: _unary("Tanh"),
    nn.Dropout: _dropout,
    nn.Identity: _identity,
    nn.MaxPool2d: _pool("MaxPool"),
    nn.AvgPool2d: _pool("AvgPool"),
    nn.AdaptiveAvgPool2d: _adaptive_avg_pool,
    nn.Flatten: _flatten_module,
    nn.Embedding: _embedding,
    nn.MultiheadAttention: _mha,
    nn.TransformerEncoderLayer: _encoder_layer,
    nn.TransformerEncoder: _encoder,
}

# torch.nn modules whose forward torch.fx traces as it stands (no checks on
# tensor values), down to the modules above: the decoder's self- and
# cross-attention are nn.MultiheadAttention leaves.
_TRACED_THROUGH = {nn.TransformerDecoderLayer, nn.TransformerDecoder}


# ---- function and method lowerings ------------------------------------------

def _binary(kind):
    def lower(low, name, args, kwargs, r):
        a, b = args[0], args[1]
        ins = []
        for x in (a, b):
            ins.append(x if isinstance(x, _Val) else low.scalar(x, r.dtype, name + ".scalar"))
        return low.emit(name, kind, ins, list(r.shape), r.dtype)
    return lower


def _fn_unary(kind):
    def lower(low, name, args, kwargs, r):
        return low.emit(name, kind, [args[0]], list(r.shape), r.dtype)
    return lower


def _fn_flatten(low, name, args, kwargs, r):
    start = args[1] if len(args) > 1 else kwargs.get("start_dim", 0)
    end = args[2] if len(args) > 2 else kwargs.get("end_dim", -1)
    return _flatten(low, name, args[0], start, end, r)


def _fn_adaptive_avg_pool(low, name, args, kwargs, r):
    # DenseNet pools with F.adaptive_avg_pool2d(x, (1, 1)), not a module.
    size = args[1] if len(args) > 1 else kwargs.get("output_size")
    if _pair(size) != [1, 1]:
        raise UntraceableError(name, "adaptive_avg_pool2d", "only output size 1x1 is lowered")
    return low.emit(name, "GlobalAvgPool", [args[0]], list(r.shape), r.dtype)


def _fn_reshape(low, name, args, kwargs, r):
    return low.emit(name, "Reshape", [args[0]], list(r.shape), r.dtype)


def _fn_permute(low, name, args, kwargs, r):
    x = args[0]
    dims = args[1:] if len(args) > 2 or not isinstance(args[1], (list, tuple)) else args[1]
    return low.emit(name, "Transpose", [x], list(r.shape), r.dtype,
                    {"perm": [_norm_axis(d, len(x.shape)) for d in dims]})


def _fn_transpose(low, name, args, kwargs, r):
    x = args[0]
    rank = len(x.shape)
    perm = list(range(rank))
    a, b = _norm_axis(args[1], rank), _norm_axis(args[2], rank)
    perm[a], perm[b] = perm[b], perm[a]
    return low.emit(name, "Transpose", [x], list(r.shape), r.dtype, {"perm": perm})


def _fn_cat(low, name, args, kwargs, r):
    xs = args[0]
    axis = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    return low.emit(name, "Concat", list(xs), list(r.shape), r.dtype,
                    {"axis": _norm_axis(axis, len(r.shape))})


def _fn_softmax(low, name, args, kwargs, r):
    axis = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    return low.emit(name, "Softmax", [args[0]], list(r.shape), r.dtype, {"axis": axis})


def _fn_matmul(low, name, args, kwargs, r):
    return low.emit(name, "MatMul", [args[0], args[1]], list(r.shape), r.dtype)


def _fn_getitem(low, name, args, kwargs, r):
    seq, idx = args[0], args[1]
    if isinstance(seq, (tuple, list)):
        v = seq[idx]
        if v is None:
            raise ValueError("item %r of this tuple is not lowered (e.g. attention weights)" % idx)
        return v
    return _index(low, name, seq, idx if isinstance(idx, tuple) else (idx,), r)


def _index(low, name, x, idx, r):
    """x[idx] for basic indexing (slices, integers, None, Ellipsis): a Slice
    of the axes it narrows, then a Reshape where integers drop axes or None
    adds them; one tensor index on one axis is a Gather there."""
    rank = len(x.shape)
    named = sum(1 for i in idx if i is not None and i is not Ellipsis)
    starts, ends, axes, steps = [], [], [], []
    gather = None
    axis = 0
    for i in idx:
        if i is Ellipsis:
            axis += rank - named
        elif i is None:
            continue
        elif isinstance(i, int):
            start = _norm_axis(i, x.shape[axis])
            starts, ends, axes, steps = starts + [start], ends + [start + 1], axes + [axis], \
                steps + [1]
            axis += 1
        elif isinstance(i, slice):
            lo, hi, step = i.indices(x.shape[axis])
            if step < 1:
                raise ValueError("slicing with step %d is not lowered" % step)
            if (lo, hi, step) != (0, x.shape[axis], 1):
                starts, ends, axes, steps = starts + [lo], ends + [hi], axes + [axis], \
                    steps + [step]
            axis += 1
        elif isinstance(i, _Val) and gather is None:
            gather = (axis, i)
            axis += 1
        else:
            raise ValueError("indexing with %r is not lowered" % (i,))
    ints = [k for k, i in enumerate(idx) if isinstance(i, int)]
    if gather is None and len(ints) == 1 and len(starts) == 1 and None not in idx:
        # One integer index, every other axis whole (`qkv[0]`, a class token
        # `x[:, 0]`): a Gather of that row, as torch.onnx.export writes it,
        # not a Slice and a Reshape.
        index = low.em.const(name + ".index", [], torch.int64)
        return low.emit(name, "Gather", [x, index], list(r.shape), r.dtype, {"axis": axes[0]})
    if gather is not None:
        if starts or len([i for i in idx if i is not Ellipsis]) != 1:
            raise ValueError("a tensor index with other indices is not lowered")
        return low.emit(name, "Gather", [x, gather[1]], list(r.shape), r.dtype,
                        {"axis": gather[0]})
    y = x
    if starts:
        shape = list(x.shape)
        for a, lo, hi, step in zip(axes, starts, ends, steps):
            shape[a] = len(range(lo, hi, step))
        attrs = {"starts": starts, "ends": ends, "axes": axes}
        if any(st != 1 for st in steps):
            attrs["steps"] = steps
        y = low.emit(name if list(shape) == list(r.shape) else name + ".slice", "Slice", [x],
                     shape, r.dtype, attrs)
    if list(y.shape) != list(r.shape):
        y = low.emit(name, "Reshape", [y], list(r.shape), r.dtype)
    return y


def _fn_expand(low, name, args, kwargs, r):
    x = args[0]
    wide = [d if (i < len(r.shape) - len(x.shape) or
                  x.shape[i - (len(r.shape) - len(x.shape))] != d) else 1
            for i, d in enumerate(r.shape)]
    c = low.em.const(name + ".broadcast", wide, r.dtype)
    return low.emit(name, "Expand", [x, c], list(r.shape), r.dtype, {"einsum": "...,...->..."})


def _fn_dropout(low, name, args, kwargs, r):
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    training = args[2] if len(args) > 2 else kwargs.get("training", True)
    return _dropout_fn(low, name, p if training else 0, args[0])


def _fn_contiguous(low, name, args, kwargs, r):
    return args[0]


def _fn_linear(low, name, args, kwargs, r):
    """F.linear(x, weight, bias), as nn.Linear (Swin's attention calls it
    with its modules' weights): a MatMul against the weight, then the bias."""
    x = args[0]
    w = args[1] if len(args) > 1 else kwargs["weight"]
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    y = low.emit(name + ".matmul" if b is not None else name, "MatMul", [x, w], list(r.shape),
                 r.dtype, {"transpose_a": False, "transpose_b": True})
    if b is not None:
        y = low.emit(name, "Add", [y, b], list(r.shape), r.dtype)
    return y


def _fn_pad(low, name, args, kwargs, r):
    """F.pad in constant mode, as the ONNX importer maps Pad: pads of zero
    are a copy (torch's constant_pad_nd clones its input), zero borders on
    the two spatial dims of an NCHW tensor a 1x1 AvgPool window with those
    pads; any other pad stays one replicated operator, as there."""
    x = args[0]
    pad = list(args[1] if len(args) > 1 else kwargs["pad"])
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    value = args[3] if len(args) > 3 else kwargs.get("value", None)
    if mode != "constant":
        raise ValueError("F.pad mode '%s' is not lowered" % mode)
    if not any(pad):
        return low.emit(name, "Identity", [x], list(r.shape), r.dtype)
    rank = len(x.shape)
    # F.pad lists (begin, end) from the last dim backwards.
    per_dim = {rank - 1 - i // 2: (pad[i], pad[i + 1]) for i in range(0, len(pad), 2)}
    if rank == 4 and not value and min(pad) >= 0 and set(per_dim) <= {2, 3}:
        (t, b), (left, right) = per_dim.get(2, (0, 0)), per_dim.get(3, (0, 0))
        return low.emit(name, "AvgPool", [x], list(r.shape), r.dtype,
                        {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [t, left, b, right]})
    return low.emit(name, "Pad", [x], list(r.shape), r.dtype)


def _fn_roll(low, name, args, kwargs, r):
    """torch.roll along given dims, as torch.onnx.export writes it: per dim,
    the two slices of the input swapped by a Concat."""
    x = args[0]
    shifts = args[1] if len(args) > 1 else kwargs["shifts"]
    dims = args[2] if len(args) > 2 else kwargs.get("dims")
    if dims is None:
        raise ValueError("torch.roll without dims (a flattened roll) is not lowered")
    shifts = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    dims = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    y = x
    for shift, dim in zip(shifts, dims):
        dim = _norm_axis(dim, len(x.shape))
        n = x.shape[dim]
        k = shift % n
        if k == 0:
            continue
        parts = []
        for tag, lo, hi in (("tail", n - k, n), ("head", 0, n - k)):
            shape = list(y.shape)
            shape[dim] = hi - lo
            parts.append(low.emit("%s.%s%d" % (name, tag, dim), "Slice", [y], shape, r.dtype,
                                  {"starts": [lo], "ends": [hi], "axes": [dim]}))
        y = low.emit(name, "Concat", parts, list(y.shape), r.dtype, {"axis": dim})
    return y


def _fn_unsqueeze(low, name, args, kwargs, r):
    d = args[1] if len(args) > 1 else kwargs["dim"]
    return low.emit(name, "Unsqueeze", [args[0]], list(r.shape), r.dtype,
                    {"axes": [_norm_axis(d, len(r.shape))]})


_FUNCTIONS = {}
for _f, _k in ((operator.add, "Add"), (operator.iadd, "Add"), (torch.add, "Add"),
               ("method:add", "Add"),
               (operator.sub, "Sub"), (torch.sub, "Sub"), (operator.mul, "Mul"),
               (torch.mul, "Mul"), ("method:mul", "Mul"), (operator.truediv, "Div"),
               (torch.div, "Div")):
    _FUNCTIONS[_f] = _binary(_k)
for _f, _k in ((F.relu, "ReLU"), (torch.relu, "ReLU"), ("method:relu", "ReLU"),
               (F.gelu, "GeLU"), (torch.sigmoid, "Sigmoid"), (torch.tanh, "Tanh"),
               (F.silu, "SiLU"), (torch.exp, "Exp"), (torch.sqrt, "Sqrt")):
    _FUNCTIONS[_f] = _fn_unary(_k)
_FUNCTIONS.update({
    torch.flatten: _fn_flatten, "method:flatten": _fn_flatten,
    "method:view": _fn_reshape, "method:reshape": _fn_reshape, torch.reshape: _fn_reshape,
    "method:permute": _fn_permute, torch.permute: _fn_permute,
    "method:transpose": _fn_transpose, torch.transpose: _fn_transpose,
    torch.cat: _fn_cat, torch.concat: _fn_cat,
    F.softmax: _fn_softmax, torch.softmax: _fn_softmax, "method:softmax": _fn_softmax,
    torch.matmul: _fn_matmul, operator.matmul: _fn_matmul, torch.bmm: _fn_matmul,
    operator.getitem: _fn_getitem,
    "method:expand": _fn_expand,
    F.dropout: _fn_dropout,
    F.adaptive_avg_pool2d: _fn_adaptive_avg_pool,
    "method:contiguous": _fn_contiguous,
    F.linear: _fn_linear, F.pad: _fn_pad, torch.roll: _fn_roll, "method:roll": _fn_roll,
    "method:matmul": _fn_matmul,
    "method:unsqueeze": _fn_unsqueeze, torch.unsqueeze: _fn_unsqueeze,
})


# ---- entry points -----------------------------------------------------------

def _trace_fx(module, example_inputs, concrete_args=None):
    tracer = _Tracer(example_inputs)
    try:
        try:
            graph = tracer.trace(module, concrete_args)
        except Exception as e:  # noqa: BLE001  (torch.fx raises many types)
            path, kind = tracer.failed or ("", type(module).__name__)
            raise UntraceableError(path, kind, "torch.fx cannot trace it (%s: %s)"
                                   % (type(e).__name__, e)) from e
        return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)
    finally:
        # fx stores the constants it lifts on the traced module; the
        # GraphModule holds its own reference, the user's module gets none.
        for n in tracer.lifted:
            if hasattr(module, n):
                delattr(module, n)


def trace(module, example_inputs, name=None):
    """The recsearch graph (a dict in the graph JSON format) of `module`
    called on `example_inputs` (a tuple, or one tensor). A module in eval
    mode has each BatchNorm2d that follows a Conv2d folded into it, as
    torch.onnx.export does."""
    return _trace(module, example_inputs, name)[0]


def _trace(module, example_inputs, name=None):
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__
    strip = ""
    if type(module) in _MODULES:
        # fx always traces the root's own forward; a root recsearch lowers
        # whole is wrapped so that it is a leaf, and the wrapper's attribute
        # name is cut from every name again.
        module, strip = _Wrapped(module), "root."
    concrete = None
    if strip:
        concrete = {n: None for n in ("a1", "a2")[len(example_inputs) - 1:]}
    gm = _trace_fx(module, example_inputs, concrete)
    low = _Lowering(module, gm, _record(module, gm, example_inputs), name, strip)
    graph = low.run()
    aliases = {k[len(strip):] if strip and k.startswith(strip) else k: v
               for k, v in low.aliases.items()}
    return graph, aliases, low.parts


class _Wrapped(nn.Module):
    def __init__(self, root):
        super().__init__()
        self.root = root
        self.train(root.training)

    # Explicit arguments: torch.fx cannot trace *args. Those the example
    # inputs leave out are fixed to None (concrete_args).
    def forward(self, x, a1=None, a2=None):
        if a1 is None:
            return self.root(x)
        if a2 is None:
            return self.root(x, a1)
        return self.root(x, a1, a2)


def _mesh(mesh):
    if isinstance(mesh, dict):
        return list(mesh.values()), list(mesh.keys())
    if isinstance(mesh, int):
        mesh = [mesh]
    sizes = list(mesh)
    return sizes, ["dim%d" % i for i in range(len(sizes))]


class TorchPlan:
    """A recsearch plan for a torch module: the plan itself (`.plan`, a
    recsearch.Plan), its summary, and placements per parameter."""

    def __init__(self, plan_, graph, mesh_names, aliases=None, parts=()):
        self.plan = plan_
        self.graph = graph
        self.mesh_names = mesh_names
        self.aliases = aliases or {}
        self.parts = set(parts)

    @property
    def summary(self):
        return self.plan.summary

    @property
    def step_time_s(self):
        return self.plan.summary["step_time_s"]

    def _placement(self, tensor):
        dims, partial = self.plan.sharding(tensor)
        axes = self.plan.axes
        out = []
        for i in range(len(self.mesh_names)):
            parts = []
            for a, (_, _, level) in enumerate(axes):
                if level != "m%d" % i:
                    continue
                d = next((d for d, ax in enumerate(dims) if a in ax), None)
                parts.append(Shard(d) if d is not None else
                             Partial() if a in partial else Replicate())
            if not parts or all(p == parts[0] for p in parts):
                out.append(parts[0] if parts else Replicate())
            else:
                out.append(Mixed(parts))
        return tuple(out)

    def placements(self, parameters_only=True):
        """{FQN: (placement per mesh dim)} for every parameter (and buffer,
        with parameters_only=False) of the module."""
        kinds = ("parameter",) if parameters_only else ("parameter", "constant")
        names = [t["name"] for t in self.graph["tensors"] if t.get("kind") in kinds]
        out = {n: self._placement(n) for n in names}
        # Parameters folded into another tensor (a batch norm folded into
        # its convolution in eval mode) are placed as that tensor.
        for fqn, holder in self.aliases.items():
            out.setdefault(fqn, out[holder])
        for part in self.parts:  # rows of a parameter, reported as that parameter
            out.pop(part, None)
        return out


def plan(module, example_inputs, mesh=8, mode="train", memory_gib=None, algorithm=None,
         cluster=None):
    """Searches a plan for `module`. mesh: a device count, a list of mesh
    dim sizes, or {name: size} (names label the placements); mode "train" or
    "infer"; memory_gib: the per-device memory budget; cluster: a
    recsearch.Cluster to use instead of a plain mesh."""
    graph, aliases, parts = _trace(module, example_inputs)
    sizes, names = _mesh(mesh)
    g = _rs.Graph.from_json(json.dumps(graph), source=type(module).__name__)
    c = cluster or _rs.Cluster.mesh(sizes)
    opts = {"mode": mode}
    if memory_gib is not None:
        opts["memory_budget_gib"] = float(memory_gib)
    if algorithm is not None:
        opts["algorithm"] = algorithm
    return TorchPlan(_rs.search(g, c, **opts), graph, names, aliases, parts)
