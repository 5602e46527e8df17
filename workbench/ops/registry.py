"""Which implementations exist for which ONNX op type, and how they expand.

An implementation is registered with ``@implements("Relu")`` and receives an
``OpCall``. It returns either a ``dace.SDFG`` whose non-transient arrays are
named after the node's connectors, or a plain Python function written in
numpy style whose parameters stand for the node's inputs then outputs; the
shared code here annotates it with their shapes and dtypes and parses it
with DaCe's frontend. Shape and dtype bookkeeping is done once, here.
"""
import inspect
import re
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import dace
import numpy as np

from workbench import dace_patches
from workbench.errors import UnsupportedCaseError
from workbench.ops.symbolic_sizes import sized

# Operators are expanded into SDFGs from here on: DaCe's costs per added node
# (inspect.stack, networkx) are patched out before the first one (see dace_patches).
dace_patches.install()

# Every name an OnnxOp's ``implementation`` may take. An op type offers a subset.
IMPLEMENTATION_NAMES = ("pure", "blas", "im2col", "shifted_gemm", "direct", "onepass", "onednn")

_IMPLS: Dict[Tuple[str, str], Callable] = {}
_INTERNAL: set = set()  # workbench-internal op types (fused nodes), not ONNX operators
_DOMAIN: Dict[str, str] = {}  # op type -> its ONNX domain when not the default one


def implements(*op_types: str, impl: str = "pure", internal: bool = False, domain: str = ""):
    """Register the decorated function as ``impl`` for each of ``op_types``.

    ``internal`` marks op types that only transformations create (domain
    ``workbench``); they are left out of ``supported_op_types``. ``domain``
    names another ONNX domain the op types live in (``ai.onnx.ml``).
    """
    if impl not in IMPLEMENTATION_NAMES:
        raise ValueError(f"unknown implementation name {impl!r}")

    def register(fn):
        for op_type in op_types:
            _IMPLS[(op_type, impl)] = fn
            if domain:
                _DOMAIN[op_type] = domain
            if internal:
                _INTERNAL.add(op_type)
        return fn

    return register


# (op type, implementation) -> fn(call) -> bytes an implementation moves that no memlet
# shows (a library's own reorders); the data-movement figure adds them to the operator
_MOVED_INSIDE: Dict[Tuple[str, str], Callable] = {}


def moves_inside(*op_types: str, impl: str):
    """Register the decorated ``fn(call) -> bytes`` for ``impl`` of each of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            _MOVED_INSIDE[(op_type, impl)] = fn
        return fn
    return register


def moved_inside(node, state, sdfg):
    """Bytes the node's implementation moves inside itself beyond its edges' (0 if none):
    an int, or an expression of a symbolic program's sizes."""
    fn = _MOVED_INSIDE.get((node.op_type, node.implementation))
    if fn is None:
        return 0
    try:
        return sized(fn(make_call(node, state, sdfg)))
    except (UnsupportedCaseError, StopIteration, KeyError):
        return 0  # the build will say why it cannot expand


def expand_as(call, impl: str = "pure"):
    """Expand ``call`` with another implementation of its op type (a library's fallback)."""
    return _IMPLS[(call.op_type, impl)](call)


def supported_op_types() -> set:
    """ONNX op types with an implementation (internal fused op types excluded)."""
    return {op for op, _ in _IMPLS if op not in _INTERNAL}


def implementations_of(op_type: str) -> list:
    return [impl for impl in IMPLEMENTATION_NAMES if (op_type, impl) in _IMPLS]


def is_supported(op_type: str, domain: str = "") -> bool:
    ours = domain == "workbench" and op_type in _INTERNAL   # the importer's own (importer/half.py)
    home = _DOMAIN.get(op_type, "")
    in_home = domain == home or (domain in ("", "ai.onnx") and home == "")
    return (in_home or ours) and (op_type, "pure") in _IMPLS


@dataclass
class OpCall:
    """What an implementation sees of the node it expands."""

    node: "dace.nodes.LibraryNode"
    inputs: dict  # connector -> dace.data.Data (in ONNX input order)
    outputs: dict  # connector -> dace.data.Data (in ONNX output order)
    attrs: dict

    @property
    def name(self) -> str:
        return self.node.onnx_name or self.node.label

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def shape(self, conn) -> tuple:
        """Ints, and expressions of the program's symbols where a size is symbolic
        (``workbench.importer.symbolic``; only ops in ``SYMBOLIC_OPS`` see those)."""
        return tuple(sized(s) for s in self._desc(conn).shape)

    def dtype(self, conn):
        return self._desc(conn).dtype

    def input(self, position: int):
        """Connector of the ONNX input at ``position`` or None when absent."""
        names = self.node.onnx_inputs
        return names[position] if position < len(names) and names[position] else None

    def output(self, position: int):
        names = self.node.onnx_outputs
        return names[position] if position < len(names) and names[position] else None

    def const(self, position: int):
        """The value of input ``position`` when it is a small constant, else None."""
        return self.node.consts.get(position)

    def require_const(self, position: int, what: str):
        """The constant value of an input an implementation cannot do without."""
        value = self.const(position)
        if value is None:
            raise self.fail(f"input {position} ({what}) must be a constant known at import")
        return value

    def fail(self, why: str) -> UnsupportedCaseError:
        return UnsupportedCaseError(self.name, self.op_type, why)

    def _desc(self, conn):
        return self.inputs[conn] if conn in self.inputs else self.outputs[conn]


def make_call(node, state, sdfg) -> OpCall:
    ins, outs = {}, {}
    for conn in node.onnx_inputs:
        if conn:
            edge = next(e for e in state.in_edges(node) if e.dst_conn == conn)
            ins[conn] = sdfg.arrays[edge.data.data]
    for conn in node.onnx_outputs:
        if conn:
            edge = next(e for e in state.out_edges(node) if e.src_conn == conn)
            outs[conn] = sdfg.arrays[edge.data.data]
    return OpCall(node, ins, outs, {**schema_defaults(node.op_type, node.opset,
                                                      _DOMAIN.get(node.op_type, "")),
                                    **node.attrs})


def schema_defaults(op_type: str, opset: int, domain: str = "") -> dict:
    """Attribute defaults declared by the ONNX schema of ``op_type``."""
    import onnx
    from onnx import helper
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return {}
    out = {}
    for name, attr in schema.attributes.items():
        if attr.default_value is not None and attr.default_value.type != 0:
            value = helper.get_attribute_value(attr.default_value)
            out[name] = value.decode() if isinstance(value, bytes) else value
    return out


def expand(node, state, sdfg, impl: str):
    """Called by OnnxOp's expansions: build the node's implementation."""
    fn = _IMPLS.get((node.op_type, impl))
    call = make_call(node, state, sdfg)
    if fn is None:
        have = implementations_of(node.op_type) or ["none"]
        raise call.fail(f"no '{impl}' implementation (available: {', '.join(have)})")
    result = fn(call)
    if callable(result) and not isinstance(result, dace.SDFG):
        result = program_sdfg(call, result)
    result.name = _sdfg_name(call)
    _label_scopes(result, node.name)
    keep_strides(result, call)
    return result


def keep_strides(sdfg, call) -> None:
    """A connector bound to a strided View (a transpose or slice read in place,
    see transforms/layout) keeps the View's strides inside the implementation,
    which then indexes the real layout; one it reshapes cannot."""
    for conn, outer in {**call.inputs, **call.outputs}.items():
        inner = sdfg.arrays.get(conn)
        if inner is None or inner.transient or is_row_major(outer):
            continue
        if tuple(inner.shape) != tuple(outer.shape):
            raise call.fail(f"'{conn}' is a strided view, which this implementation reshapes")
        inner.strides, inner.total_size = outer.strides, outer.total_size


def outer_layout_sdfg(call, name: str) -> dace.SDFG:
    """A new SDFG with one non-transient array per connector, each laid out as it is
    stored outside (strides and total size kept), for implementations that index the
    real layout: library calls, strided copies, branches around nested expansions."""
    sdfg = dace.SDFG(name)
    for conn, array in {**call.inputs, **call.outputs}.items():
        sdfg.add_array(conn, array.shape, array.dtype, strides=array.strides,
                       total_size=array.total_size)
    return sdfg


def is_row_major(desc) -> bool:
    """``desc`` laid out in C order (a size-1 dimension's stride does not matter)."""
    return all(n == 1 or s == r for n, s, r in zip(desc.shape, desc.strides,
                                                  row_major_strides(desc.shape)))


def row_major_strides(shape) -> tuple:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(out[::-1])


OWNER_SEPARATOR = "__"


def _label_scopes(sdfg, owner: str) -> None:
    """Prefix map and tasklet labels with the node's name, so that profiles and
    data-movement figures still name the ONNX operator after expansion."""
    prefix = f"{owner}{OWNER_SEPARATOR}"
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.MapEntry) and not node.map.label.startswith(prefix):
            node.map.label = prefix + node.map.label
        elif isinstance(node, (dace.nodes.Tasklet, dace.nodes.LibraryNode)) \
                and not node.label.startswith(prefix):
            node.label = prefix + node.label
            if isinstance(node, dace.nodes.LibraryNode):  # its expansion is named after .name
                node.name = node.label


def _sdfg_name(call) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in call.name)
    return f"{call.op_type}_{safe}"[:60].strip("_") or call.op_type


def program_sdfg(call: OpCall, body, shapes: dict = None) -> dace.SDFG:
    """Parse a numpy-style ``body`` with DaCe's frontend.

    The body's parameters stand, in order, for the node's present inputs and
    then its outputs (ONNX order), so bodies can use the spec's short names.
    ``shapes`` may present a connector reshaped (same size, see connector_sdfg).
    """
    params = list(inspect.signature(body).parameters)
    conns = [c for c in call.node.onnx_inputs if c] + [c for c in call.node.onnx_outputs if c]
    if len(params) != len(conns):
        raise TypeError(f"{call.op_type} body takes {params}, node has connectors {conns}")
    descs = {**call.inputs, **call.outputs}
    shapes = shapes or {}
    body.__annotations__ = {p: descs[c].dtype[tuple(shapes.get(c, descs[c].shape))]
                            for p, c in zip(params, conns)}
    sdfg = dace.program(body).to_sdfg(simplify=True)
    for p in params:  # a body may ignore a parameter; the array must still exist
        if p not in sdfg.arrays:
            conn = conns[params.index(p)]
            sdfg.add_array(p, shapes.get(conn, descs[conn].shape), descs[conn].dtype)
    renames = [(p, c) for p, c in zip(params, conns) if p != c]
    for p, _ in renames:  # two phases: a param may carry another's final name
        sdfg.replace(p, f"__tmp_{p}")
    for p, c in renames:
        sdfg.replace(f"__tmp_{p}", c)
    return sdfg


def connector_sdfg(call: OpCall, name: str, shapes: dict = None, strided=()):
    """A new SDFG with one non-transient array per connector, and its state.

    ``shapes`` may give a connector another shape of the same size: the
    contiguous data is then seen reshaped inside (DaCe inlines it as a view).
    Connectors in ``strided`` are indexed by the implementation's memlets only
    (no pointer arithmetic, no reshape): they may be stored at any strides,
    which ``keep_strides`` gives them inside.
    """
    sdfg = dace.SDFG(name)
    state = sdfg.add_state()
    for conn, desc in {**call.inputs, **call.outputs}.items():
        # Inside, the array is seen row-major. A strided View keeps its strides inside
        # (keep_strides); an Array laid out otherwise (ChannelsLast, or a View made an
        # argument of a unit build) would be misread unless its reader is in ``strided``.
        if type(desc) is dace.data.Array and not is_row_major(desc) and conn not in strided:
            raise call.fail(f"'{conn}' is stored with strides {tuple(desc.strides)} (channels-"
                            "last); this implementation reads row-major data only: run the "
                            "operator on oneDNN (OnOneDNN) or undo ChannelsLast")
        shape = (shapes or {}).get(conn, desc.shape)
        sdfg.add_array(conn, shape, desc.dtype)
    return sdfg, state


def mapped_tasklet(state, label: str, ranges: dict, inputs: dict, code: str, outputs: dict,
                   **kwargs):
    """``state.add_mapped_tasklet`` with connector and map parameter names that cannot clash.

    After inlining, a tasklet connector or a map parameter named like an
    array of the program (``b``, ``y``, ``o``) would shadow it in C++; both
    get a ``__`` prefix, which importer-made array names never have.
    """
    if set(ranges) & (set(inputs) | set(outputs)):
        raise ValueError(f"map parameters {sorted(ranges)} reuse connector names")
    names = sorted(set(inputs) | set(outputs) | set(ranges), key=len, reverse=True)
    for name in names:
        code = _prefix(code, name)

    def renamed(memlet):
        # Rebuilt from text: Memlet.replace leaves the new names out of the
        # subset's free symbols, and memlet propagation then misses them.
        subset = str(memlet.subset)
        for p in sorted(ranges, key=len, reverse=True):
            subset = _prefix(subset, p)
        return dace.Memlet(f"{memlet.data}[{subset}]", wcr=memlet.wcr, dynamic=memlet.dynamic)

    return state.add_mapped_tasklet(label, {f"__{p}": r for p, r in ranges.items()},
                                    {f"__{k}": renamed(v) for k, v in inputs.items()}, code,
                                    {f"__{k}": renamed(v) for k, v in outputs.items()},
                                    external_edges=True, **kwargs)


def _prefix(text: str, name: str) -> str:
    return re.sub(rf"(?<![\w.]){name}\b", f"__{name}", text)


def np_dtype(dace_type) -> np.dtype:
    return np.dtype(dace_type.as_numpy_dtype())
