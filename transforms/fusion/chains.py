"""Walking a chain of operators that a fusion turns into one kernel: the operators
are joined by tensors written once and read only by the next one."""
import math

import dace
from dace.sdfg import nodes as nd

from transforms.graph import single_consumer, state_accesses
from workbench.ops.node import OnnxOp


def writer_of(state, access, op_type: str = None):
    """The ONNX operator that alone writes ``access`` (of ``op_type`` when given), else None."""
    edges = state.in_edges(access)
    if len(edges) == 1 and isinstance(edges[0].src, OnnxOp) and \
            op_type in (None, edges[0].src.op_type):
        return edges[0].src
    return None


def constant_scalar(node, position):
    """The finite number a one-element constant input holds (recorded at import), else None."""
    value = node.consts.get(position)
    if value is None or value.size != 1 or value.dtype.kind not in "fiu":
        return None
    number = float(value.reshape(-1)[0])
    return number if math.isfinite(number) else None


def carry_waits(state, members, fused, skip=()) -> None:
    """Ordering edges (empty memlets: RecomputeInBackward's wait for the backward pass)
    into ``members`` from outside them (and ``skip``) now order ``fused``."""
    waits = {e.src for m in members for e in state.in_edges(m) if e.data.is_empty()}
    for src in waits - set(members) - set(skip):
        state.add_nedge(src, fused, dace.Memlet())


def inputs_of(state, node) -> dict:
    """ONNX input position -> the access node feeding it."""
    return {node.onnx_inputs.index(e.dst_conn): e.src for e in state.in_edges(node)
            if e.dst_conn in node.onnx_inputs}


def between(sdfg, state, access) -> bool:
    """Whether ``access`` is a tensor between two operators of a chain: written once,
    read by one operator, with no other access node."""
    return (isinstance(access, nd.AccessNode) and state.in_degree(access) == 1
            and single_consumer(sdfg, state, access)
            and len(state_accesses(state, access.data)) == 1)


def next_op(sdfg, state, node, internal: list):
    """The ONNX operator reading ``node``'s one output when that output is between
    them (then appended to ``internal``), else None."""
    outs = state.out_edges(node)
    if len(outs) != 1 or not between(sdfg, state, outs[0].dst):
        return None
    reader = state.out_edges(outs[0].dst)[0].dst
    if not isinstance(reader, OnnxOp) or reader.domain not in ("", "ai.onnx"):
        return None
    internal.append(outs[0].dst)
    return reader


def other_input(state, node, access):
    """(position, access node) of a two-input ``node``'s input that is not ``access``."""
    others = [(p, a) for p, a in inputs_of(state, node).items() if a is not access]
    return others[0] if len(others) == 1 and len(node.onnx_inputs) == 2 else None


def reduced_axes(node, rank: int):
    """The sorted axes a ReduceSum/ReduceMean reduces when it keeps dimensions and its
    axes are known at import, else None."""
    attrs = {"keepdims": 1, **node.attrs}
    if attrs["keepdims"] != 1:
        return None
    axes_as_input = 13 if node.op_type == "ReduceSum" else 18
    if node.opset >= axes_as_input:
        axes = node.consts.get(1)
        if axes is None and len(node.onnx_inputs) > 1 and node.onnx_inputs[1]:
            return None   # axes from a tensor not known at import
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return None
    else:
        axes = attrs.get("axes")
    return sorted({a % rank for a in axes}) if axes else list(range(rank))


def replace_chain(sdfg, state, members: list, internal: list, fused, inputs: list,
                  outputs: list) -> None:
    """Put the operator ``fused`` in place of ``members``: ``inputs``/``outputs`` are
    (connector, access node) pairs, ``internal`` the access nodes that go (their arrays
    too, once no access node of them is left). An ordering edge into a member
    (RecomputeInBackward's wait for the backward pass) now orders ``fused``."""
    state.add_node(fused)
    for conn, access in inputs:
        state.add_edge(access, None, fused, conn,
                       dace.Memlet.from_array(access.data, sdfg.arrays[access.data]))
    for conn, access in outputs:
        state.add_edge(fused, conn, access, None,
                       dace.Memlet.from_array(access.data, sdfg.arrays[access.data]))
    carry_waits(state, members, fused, internal)
    sources = {e.src for m in members for e in state.in_edges(m)} - set(internal)
    for member in members:
        state.remove_node(member)
    for access in internal:
        if access in state.nodes():
            state.remove_node(access)
        if not any(isinstance(n, nd.AccessNode) and n.data == access.data
                   for st in sdfg.states() for n in st.nodes()):
            sdfg.remove_data(access.data)
    for access in sources:   # an inlined constant nothing reads any more
        if access in state.nodes() and state.degree(access) == 0:
            state.remove_node(access)
