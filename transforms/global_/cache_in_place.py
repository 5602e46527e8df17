"""CacheInPlace: a decoder's KV cache grows in one buffer instead of being copied.

A decode step exported with its cache computes ``present = Concat(past, new)`` along
the past length: every token copies the whole cache, and the caller then passes that
copy back as the next ``past``. Rules:
1. Matches a two-input Concat whose first input is a graph input read by nothing else,
   whose output is a graph output, and whose length along the axis is a symbol of the
   program (the past length); the new part has a fixed length, and the dims after the
   axis are row-major.
2. ``past`` and ``present`` take the strides of a buffer with room for ``capacity``
   positions along the axis (may-alias arrays, so passing one buffer for both is legal
   C), and a CacheAppend (``workbench/ops/cache_append.py``) writes the new rows after
   the past ones, copying the past rows only when the two are different memory.
3. Readers of ``present`` see its strides: Views of it that only add or drop unit
   dims take them on; an operator reading it directly reads a strided View. Any other
   View (one that merges the length with another dim), and an operator whose
   implementation reads row-major data only (``READS_STRIDED``: element-wise ops, Tile,
   Expand), refuses the match by name.
4. The runtime passes inputs and outputs of such arrays in a capacity-sized buffer
   (``Session.run``) and refuses a past length that leaves no room; ``generate``
   passes one buffer for both, so a decode step moves only the new rows of the cache.
"""
import dace
from dace.sdfg import nodes
from dace.symbolic import issymbolic

from transforms.graph import access_nodes
from transforms.layout.views import data_input, data_output, is_row_major, row_major
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.cache_append import OP_TYPE
from workbench.ops.elementwise import ELEMENTWISE
from workbench.ops.index_maps import size_of
from workbench.ops.node import OnnxOp
from workbench.transformation_api import Refusal, register

# positions the buffer holds unless a match says otherwise (options {"capacity": N})
DEFAULT_CAPACITY = 2048
# operators whose implementations index their inputs by their own shapes, so that a
# strided View reads right (registry.keep_strides refuses one that reshapes it)
READS_STRIDED = ELEMENTWISE | {"Tile", "Expand"}
RESHAPES = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}


def _unit_view_strides(view_shape, shape, strides):
    """Strides for a View of an array (``shape``, ``strides``) that only adds or drops
    unit dims; None for any other View."""
    kept = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if [n for n in view_shape if n != 1] != [n for n, _ in kept]:
        return None
    out, it, inner = [], len(kept), 1
    for n in reversed(view_shape):
        if n == 1:
            out.append(inner)
        else:
            it -= 1
            out.append(kept[it][1])
            inner = kept[it][1] * n
    return tuple(reversed(out))


def _views_of(state, access):
    """Views read from ``access`` (directly), and the operators reading it directly."""
    views, readers = [], []
    for e in state.out_edges(access):
        dst = e.dst
        if isinstance(dst, nodes.AccessNode):
            views.append(dst)
        else:
            readers.append(e)
    return views, readers


def _plan_views(sdfg, state, access, shape, strides, out):
    """[(view access, its new strides)] for every View under ``access``, or a Refusal."""
    views, readers = _views_of(state, access)
    for edge in readers:
        op = edge.dst
        if not isinstance(op, OnnxOp) or op.op_type not in READS_STRIDED:
            kind = getattr(op, "op_type", type(op).__name__)
            hint = (" (ReshapeAsView makes it a view first)" if kind in RESHAPES else "")
            return Refusal(f"the cache is read by {getattr(op, 'onnx_name', '') or op.label} "
                           f"({kind}), whose implementation reads row-major data only{hint}")
    for view in views:
        desc = sdfg.arrays[view.data]
        if not isinstance(desc, dace.data.View):
            return Refusal(f"'{view.data}' copies the cache")
        new = _unit_view_strides(desc.shape, shape, strides)
        if new is None:
            return Refusal(f"the cache is read through '{view.data}', a view that merges "
                           f"its length with another dim")
        out.append((view, new))
        deeper = _plan_views(sdfg, state, view, desc.shape, new, out)
        if isinstance(deeper, Refusal):
            return deeper
    return out


@register
class CacheInPlace(OperatorTransformation):
    level = "global"
    name = "CacheInPlace"
    description = ("Grow a decoder's KV cache in one buffer: the past rows stay, the new "
                   "ones are written after them (no copy of the cache per token)")
    op_types = {"Concat"}
    option_names = ("capacity",)
    symbolic = True   # only symbolic: the past length must be a symbol
    refusal = "{node.onnx_name} no longer appends to a cache"

    def choices(self, node):
        return [{"capacity": DEFAULT_CAPACITY}]

    def plan(self, sdfg, state, node, weights=None, capacity=DEFAULT_CAPACITY):
        if len([c for c in node.onnx_inputs if c]) != 2:
            return None
        past, new, out = data_input(state, node, 0), data_input(state, node, 1), \
            data_output(state, node)
        if past is None or new is None or out is None:
            return None
        p, x, y = sdfg.arrays[past.data], sdfg.arrays[new.data], sdfg.arrays[out.data]
        if p.transient or y.transient or isinstance(p, dace.data.View):
            return None   # no cache passed from step to step: nothing to say
        axis = int(node.attrs.get("axis", 0)) % len(p.shape)
        length = p.shape[axis]
        if not issymbolic(length):
            return Refusal(f"the past length along axis {axis} is fixed ({length}): open the "
                           f"model with its past length symbolic (--symbolic NAME)")
        if issymbolic(x.shape[axis]) or any(issymbolic(n) for k, n in enumerate(p.shape)
                                            if k != axis):
            return Refusal("only the past length may be symbolic")
        if len(access_nodes(sdfg, past.data)) != 1 or state.out_degree(past) != 1 \
                or len(access_nodes(sdfg, out.data)) != 1 or state.in_degree(out) != 1:
            return Refusal("the cache is read or written elsewhere too")
        if not (is_row_major(p) and is_row_major(y) and is_row_major(x)):
            return Refusal("the cache is not stored row-major")
        if p.dtype != y.dtype or x.dtype != y.dtype:
            return Refusal("the cache and the new rows have different types")
        if not isinstance(capacity, int) or capacity <= int(x.shape[axis]):
            return Refusal(f"capacity {capacity!r} holds no past position")
        full = list(y.shape)
        full[axis] = capacity
        strides = row_major(full)
        views = _plan_views(sdfg, state, out, y.shape, strides, [])
        if isinstance(views, Refusal):
            return views
        return past, new, out, axis, capacity, strides, views

    def describe(self, node, plan):
        past, _, out, axis, capacity, _, _ = plan
        return (f"{node.onnx_name}: '{out.data}' grows in place after '{past.data}' "
                f"(room for {capacity} positions)")

    def rewrite(self, sdfg, state, node, plan, weights=None):
        past, new, out, axis, capacity, strides, views = plan
        full = list(sdfg.arrays[out.data].shape)
        full[axis] = capacity
        total = size_of(full)
        for name in (past.data, out.data):
            desc = sdfg.arrays[name]
            desc.strides, desc.total_size, desc.may_alias = strides, total, True
        for view, view_strides in views:
            desc = sdfg.arrays[view.data]
            desc.strides = view_strides
            desc.total_size = 1 + sum((n - 1) * s for n, s in zip(desc.shape, view_strides))
        _, readers = _views_of(state, out)
        for edge in readers:   # an operator reads a strided View, never a strided Array
            _read_through_view(sdfg, state, out, edge)
        append = OnnxOp(f"{node.label}_append", op_type=OP_TYPE, domain="workbench",
                        onnx_name=node.onnx_name, attrs={"axis": axis, "capacity": capacity},
                        onnx_inputs=["cache_in", "rows"], onnx_outputs=["cache_out"])
        append.implementation = "pure"
        state.add_node(append)
        state.add_edge(past, None, append, "cache_in", dace.Memlet.from_array(
            past.data, sdfg.arrays[past.data]))
        state.add_edge(new, None, append, "rows", dace.Memlet.from_array(
            new.data, sdfg.arrays[new.data]))
        state.add_edge(append, "cache_out", out, None, dace.Memlet.from_array(
            out.data, sdfg.arrays[out.data]))
        state.remove_node(node)


def _read_through_view(sdfg, state, access, edge) -> None:
    desc = sdfg.arrays[access.data]
    name = sdfg.add_view(f"{access.data}_read", desc.shape, desc.dtype, strides=desc.strides,
                         total_size=desc.total_size, find_new_name=True)[0]
    view = state.add_access(name)
    state.add_edge(access, None, view, "views", dace.Memlet.from_array(access.data, desc))
    state.remove_edge(edge)
    memlet = dace.Memlet(data=name, subset=edge.data.subset)
    state.add_edge(view, None, edge.dst, edge.dst_conn, memlet)
