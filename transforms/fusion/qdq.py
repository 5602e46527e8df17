"""What the quantized-model transformations share: reading a DequantizeLinear's or
QuantizeLinear's scale and zero point, finding the operator that writes an input, and
taking the replaced nodes and the float tensors between them out of the graph."""
import dace
from dace.sdfg import nodes

from transforms.graph import in_array
from workbench.ops.node import OnnxOp

EIGHT_BITS = (dace.int8, dace.uint8)


def writer(state, node, conn):
    """The one operator writing what ``node`` reads at ``conn``, or None."""
    if not conn:
        return None
    edges = state.in_edges(in_array(state, node, conn))
    return edges[0].src if len(edges) == 1 and isinstance(edges[0].src, OnnxOp) else None


def known(node, position: int):
    """(value, present): the recorded constant at ``position``; None when unknown."""
    if position >= len(node.onnx_inputs) or not node.onnx_inputs[position]:
        return None, False
    return node.consts.get(position), True


def quantization(sdfg, state, node, dtypes, axis_size=None, axis=None):
    """(scale, zero point) of a DequantizeLinear/QuantizeLinear ``node`` whose integer
    side is of ``dtypes``: one value, or one per index of ``axis`` (of ``axis_size``);
    None when it is not such a node (QLinearFusion rule 1, 2)."""
    if node.domain not in ("", "ai.onnx") or int(node.attrs.get("block_size", 0) or 0):
        return None
    integer_conn = node.onnx_inputs[0] if node.op_type == "DequantizeLinear" \
        else node.onnx_outputs[0]
    float_conn = node.onnx_outputs[0] if node.op_type == "DequantizeLinear" \
        else node.onnx_inputs[0]
    arrays = {e.dst_conn: e.src.data for e in state.in_edges(node)}
    arrays.update({e.src_conn: e.dst.data for e in state.out_edges(node)})
    if (sdfg.arrays[arrays[integer_conn]].dtype not in dtypes
            or sdfg.arrays[arrays[float_conn]].dtype != dace.float32):
        return None
    scale, _ = known(node, 1)
    zero, has_zero = known(node, 2)
    if scale is None or (has_zero and zero is None):
        return None
    if scale.size != 1:
        rank = len(sdfg.arrays[arrays[integer_conn]].shape)
        at = int(node.attrs.get("axis", 1))
        if axis is None or scale.size != axis_size or (at + rank) % rank != axis:
            return None
    if zero is not None and zero.size != scale.size:
        return None
    return scale.ravel(), (zero.ravel() if zero is not None else None)


def source(state, node, position: int):
    """The access node ``node`` reads at ONNX input ``position``, or None when absent."""
    conns = node.onnx_inputs
    if position >= len(conns) or not conns[position]:
        return None
    return in_array(state, node, conns[position])


def remove_nodes(sdfg, state, members) -> None:
    """Remove ``members``, then the access nodes left unconnected and their transients."""
    neighbours = {e.src for m in members for e in state.in_edges(m)}
    for member in members:
        state.remove_node(member)
    for access in neighbours - set(members):
        if access in state.nodes() and state.degree(access) == 0:
            state.remove_node(access)
            still = any(n.data == access.data for s in sdfg.states() for n in s.data_nodes())
            if not still and sdfg.arrays[access.data].transient:
                sdfg.remove_data(access.data, validate=False)
    for member in members:
        if isinstance(member, nodes.AccessNode) and sdfg.arrays[member.data].transient and not any(
                n.data == member.data for s in sdfg.states() for n in s.data_nodes()):
            sdfg.remove_data(member.data, validate=False)
