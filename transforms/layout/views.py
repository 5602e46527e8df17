"""Views: how the layout level lets one array alias another instead of copying it.

A DaCe ``View`` is an access node whose data is another array's memory seen
with its own shape and strides; the edge joining it to the viewed access
node (connector ``views``) moves nothing. An array read through a View is
a *read view* (viewed -> view -> readers); one that an operator writes
into is a *write view* (writer -> view -> viewed).
"""
import dace
from dace import subsets
from dace.sdfg import nodes

from transforms.graph import access_nodes, readers_elsewhere
from workbench.ops.node import OnnxOp
from workbench.ops.registry import is_row_major
from workbench.ops.registry import row_major_strides as row_major


def plain_array(sdfg, access) -> bool:
    """A row-major array or a row-major View (what a reshape may alias)."""
    desc = sdfg.arrays[access.data]
    return isinstance(desc, dace.data.Array) and is_row_major(desc)


def owned_here(sdfg, state, access) -> bool:
    """A transient Array (not yet a View) with no access node but this one."""
    desc = sdfg.arrays[access.data]
    return (desc.transient and not isinstance(desc, dace.data.View)
            and readers_elsewhere(sdfg, state, access.data) == 0
            and len(access_nodes(sdfg, access.data)) == 1)


def producer(state, access):
    """The single operator writing ``access``, or None."""
    edges = state.in_edges(access)
    if len(edges) != 1 or not isinstance(edges[0].src, OnnxOp):
        return None
    return edges[0].src


def data_input(state, node, position: int = 0):
    """The access node feeding ONNX input ``position`` of ``node``."""
    conn = node.onnx_inputs[position] if position < len(node.onnx_inputs) else ""
    return next((e.src for e in state.in_edges(node) if e.dst_conn == conn), None) if conn else None


def data_output(state, node, position: int = 0):
    conn = node.onnx_outputs[position] if position < len(node.onnx_outputs) else ""
    return next((e.dst for e in state.out_edges(node) if e.src_conn == conn), None) if conn else None


def make_view(sdfg, state, access, viewed, subset=None, strides=None) -> None:
    """``access``'s array becomes a View of ``viewed`` (all of it, or ``subset``).

    ``strides`` default to row-major; ``subset`` gives where the View starts
    (and what it spans) in the viewed array. A read view when ``access`` has
    no writer, else a write view.
    """
    old = sdfg.arrays[access.data]
    target = sdfg.arrays[viewed.data]
    strides = tuple(strides or row_major(old.shape))
    span = 1 + sum((n - 1) * s for n, s in zip(old.shape, strides))
    sdfg.remove_data(access.data, validate=False)
    sdfg.add_view(access.data, old.shape, old.dtype, storage=target.storage, strides=strides,
                  total_size=span)
    where = subset if subset is not None else subsets.Range.from_array(target)
    memlet = dace.Memlet(data=viewed.data, subset=where,
                         other_subset=subsets.Range.from_array(sdfg.arrays[access.data]))
    if state.in_degree(access) == 0:
        state.add_edge(viewed, None, access, "views", memlet)
    else:
        state.add_edge(access, "views", viewed, None, memlet)


def drop_node(sdfg, state, node, keep=()) -> None:
    """Remove an operator and the access nodes only it used (shape tensors)
    but those in ``keep``; their arrays go too when transient and unused."""
    around = [e.src for e in state.in_edges(node)] + [e.dst for e in state.out_edges(node)]
    state.remove_node(node)
    for access in around:
        if access in keep or access not in state.nodes():
            continue
        if isinstance(access, nodes.AccessNode) and state.degree(access) == 0:
            state.remove_node(access)
            drop_array_if_unused(sdfg, access.data)


def drop_array_if_unused(sdfg, name: str) -> None:
    if sdfg.arrays[name].transient and not any(
            isinstance(n, nodes.AccessNode) and n.data == name
            for s in sdfg.states() for n in s.nodes()):
        sdfg.remove_data(name, validate=False)


def full(sdfg, name: str) -> dace.Memlet:
    return dace.Memlet.from_array(name, sdfg.arrays[name])
