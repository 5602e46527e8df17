"""Data movement: bytes read and written to non-register memory.

Rules:
1. Every memlet edge with an access node at one end counts once, with the
   number of distinct elements its subset covers times the element size
   (what an operator reads or writes, not how often it re-reads it).
2. Edges between an access node and a top-level nested SDFG are not
   counted: the nested SDFG's own edges count instead (no double counting).
   A nested SDFG inside a map counts at its boundary (propagated memlets).
   A subset whose size depends on symbols counts as the whole array.
3. The edge through which a View aliases its data, and arrays in
   registers, move nothing (operators reading or writing a View do move).
4. An implementation that moves data inside itself beyond its edges (a
   library's reorders between layouts) adds those bytes to its operator
   (``workbench.ops.registry.moves_inside``).
5. Each counted edge belongs to the top-level node it feeds or leaves in
   the program's main state; that node names the ONNX operator: an
   ``OnnxOp`` its ``onnx_name``; an expanded operator's maps, tasklets and
   library nodes carry the OnnxOp's name as a label prefix (see
   ``workbench.ops.registry``), which ``names`` maps back to the ONNX name.
The compulsory figure is every graph input, weight and output moved once.
"""
import copy
from collections import defaultdict
from dataclasses import dataclass, field

import dace
from dace.sdfg import nodes
from dace.sdfg.propagation import propagate_memlets_sdfg

from workbench.ops.cache_append import OP_TYPE as CACHE_APPEND, cache_connectors
from workbench.ops.node import OnnxOp
from workbench.ops.registry import OWNER_SEPARATOR, moved_inside
from workbench.analysis.sizes import number


@dataclass
class DataMovement:
    moved_bytes: int
    compulsory_bytes: int
    per_operator: dict = field(default_factory=dict)  # name -> bytes moved

    @property
    def ratio(self) -> float:
        return self.moved_bytes / self.compulsory_bytes if self.compulsory_bytes else 0.0

    def to_dict(self) -> dict:
        return {"moved_bytes": self.moved_bytes, "compulsory_bytes": self.compulsory_bytes,
                "ratio": round(self.ratio, 4)}


def operator_name(node, names: dict = None) -> str:
    """The ONNX operator a node belongs to (its label when unknown)."""
    if isinstance(node, OnnxOp):
        return node.onnx_name
    label = node.map.label if isinstance(node, nodes.MapEntry) else getattr(node, "label", str(node))
    return owner_name(label, names) or label


def owner_name(label: str, names: dict = None) -> str:
    """The ONNX name of the operator whose prefix ``label`` carries (None if none).

    The longest known node name the label starts with, followed by the separator:
    a fused node's own name may hold the separator (``conv_pw_Conv_act1__Sigmoid_Mul``
    from ``/{conv_pw/Conv,act1/{Sigmoid,Mul}}``), so cutting at the first one
    names no operator. Kernel labels of a profile name their node the same way.
    """
    names = names or {}
    if label in names:
        return names[label]
    cut = label.rfind(OWNER_SEPARATOR)
    while cut > 0:
        if label[:cut] in names:
            return names[label[:cut]]
        cut = label.rfind(OWNER_SEPARATOR, 0, cut + len(OWNER_SEPARATOR) - 1)
    return None


def data_movement(sdfg: dace.SDFG, names: dict = None, scratch: bool = False) -> DataMovement:
    """The figure for ``sdfg`` (read-only: memlets are propagated on a copy).

    ``names`` maps OnnxOp node names to ONNX names for expanded operators.
    ``scratch``: ``sdfg`` is a throwaway copy (a prediction's trial), whose memlets
    may be propagated in place; the copy would be half the prediction's cost.
    """
    program = sdfg if scratch else copy.deepcopy(sdfg)
    propagate_memlets_sdfg(program)
    return _movement(program, names or {})


def _movement(sdfg: dace.SDFG, names: dict) -> DataMovement:
    per_op = defaultdict(int)
    for state in sdfg.states():
        owners = _top_level_owners(state, names)
        for edge in state.edges():
            for node, name in _counted_edges(edge, state, sdfg, names):
                per_op[owners.get(node, name)] += _edge_bytes(edge, sdfg)
        for node in state.nodes():
            if isinstance(node, OnnxOp):
                inside = number(moved_inside(node, state, sdfg))
                if inside:
                    per_op[owners.get(node, operator_name(node, names))] += inside
            if isinstance(node, nodes.NestedSDFG) and state.entry_node(node) is None:
                inner = _movement(node.sdfg, names)
                per_op[owners.get(node, operator_name(node, names))] += inner.moved_bytes
    return DataMovement(int(sum(per_op.values())), compulsory_bytes(sdfg),
                        {k: int(v) for k, v in per_op.items()})


def compulsory_bytes(sdfg: dace.SDFG) -> int:
    return sum(number(desc.total_size) * desc.dtype.bytes for desc in sdfg.arrays.values()
               if not desc.transient and not isinstance(desc, dace.data.View)
               and _static(desc.total_size))


def _counted_edges(edge, state, sdfg, names):
    """(endpoint that owns the traffic, fallback name) for an edge that moves data."""
    src, dst = edge.src, edge.dst
    if edge.data.data is None or edge.data.is_empty():
        return []
    ends = [n for n in (src, dst) if isinstance(n, nodes.AccessNode)]
    if not ends or any(_in_registers(n, sdfg) for n in ends) or _aliases(edge, state, sdfg) \
            or _shared_cache(edge):
        return []
    other = dst if isinstance(src, nodes.AccessNode) else src
    if isinstance(other, nodes.NestedSDFG) and state.entry_node(other) is None:
        return []  # counted inside (a nested SDFG within a map counts at its boundary)
    if isinstance(other, nodes.AccessNode):  # a copy: read + write
        return [(src, src.data), (dst, dst.data)]
    return [(other, operator_name(other, names))]


def _in_registers(access, sdfg) -> bool:
    return sdfg.arrays[access.data].storage == dace.StorageType.Register


def _aliases(edge, state, sdfg) -> bool:
    """The edge that makes a View alias its data moves nothing; reads and
    writes through the View by operators still do."""
    from dace.sdfg.utils import get_view_edge
    return any(isinstance(n, nodes.AccessNode) and isinstance(sdfg.arrays[n.data], dace.data.View)
               and get_view_edge(state, n) is edge for n in (edge.src, edge.dst))


def _shared_cache(edge) -> bool:
    """A CacheAppend's past and present edges: one buffer, grown in place; the op
    counts the rows it writes itself (``ops/cache_append``)."""
    for node, conn in ((edge.dst, edge.dst_conn), (edge.src, edge.src_conn)):
        if isinstance(node, OnnxOp) and node.op_type == CACHE_APPEND:
            return conn in cache_connectors(node)
    return False


def _edge_bytes(edge, sdfg) -> int:
    desc = sdfg.arrays[edge.data.data]
    n = _elements(edge.data.subset) if edge.data.subset is not None else desc.total_size
    if not _static(n):  # depends on a scope's symbols: the whole array bounds it
        n = desc.total_size
    return number(n) * desc.dtype.bytes if _static(n) else 0


def _elements(subset):
    """``subset.num_elements()``; a range with integer bounds is counted in Python
    integers (DaCe's formula, per dimension ``tile * ceil((end + 1 - begin) / step)``,
    ``end - 1`` for a negative step): sympy's version was half of a prediction's
    analysis on a ViT-tiny export."""
    if not isinstance(subset, dace.subsets.Range):
        return subset.num_elements()
    n = 1
    try:
        for (begin, end, step), tile in zip(subset.ranges, subset.tile_sizes):
            begin, end, step, tile = int(begin), int(end), int(step), int(tile)
            span = end + (-1 if step < 0 else 1) - begin
            n *= tile * -(-span // step)
    except TypeError:   # a symbol in a bound
        return subset.num_elements()
    return n


def _static(value) -> bool:
    try:
        number(value)
        return True
    except TypeError:
        return False


def _top_level_owners(state, names) -> dict:
    """Node -> name of the outermost scope (map) or node it sits in."""
    owners = {}
    scopes = state.scope_dict()
    for node in state.nodes():
        outer = node
        while scopes.get(outer) is not None:
            outer = scopes[outer]
        if isinstance(node, nodes.ExitNode):
            outer = state.entry_node(node)
            while scopes.get(outer) is not None:
                outer = scopes[outer]
        owners[node] = operator_name(outer, names)
    return owners


def with_region_change(whole: DataMovement, region_before: DataMovement,
                       region_after: DataMovement, compulsory: int) -> DataMovement:
    """``whole`` after a step that changed only a region measured before and after.

    Exact: every figure is a sum over edges and nodes, and those outside the
    region are unchanged (``workbench.analysis.prediction``). Operators whose
    traffic falls to zero are left out, as an operator that moves nothing is."""
    per_op = dict(whole.per_operator)
    for name, moved in region_before.per_operator.items():
        per_op[name] = per_op.get(name, 0) - moved
    for name, moved in region_after.per_operator.items():
        per_op[name] = per_op.get(name, 0) + moved
    per_op = {name: moved for name, moved in per_op.items() if moved}
    return DataMovement(int(sum(per_op.values())), compulsory, per_op)


def same_figure(a: DataMovement, b: DataMovement) -> bool:
    """Equal totals and per-operator bytes (an operator at zero counts as absent)."""
    def nonzero(m):
        return {k: v for k, v in m.per_operator.items() if v}
    return (a.moved_bytes, a.compulsory_bytes, nonzero(a)) == \
        (b.moved_bytes, b.compulsory_bytes, nonzero(b))
