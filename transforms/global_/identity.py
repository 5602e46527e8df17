"""RemoveIdentity: Identity, inference-time Dropout and a Cast to the type its input
already has copy data for nothing.

Rules:
1. Matches an Identity; a Dropout whose mask output is absent and which
   has no ``ratio``/``training_mode`` input that could turn it on; a Cast
   whose input and output arrays have the same element type (exporters write
   ``x.to(torch.float32)`` on float32 tensors: T5's RMS norm and softmax,
   Llama-style decoders), which ONNX defines as a copy.
2. If the output is a transient, its readers read the input instead.
3. Else, if the input is a transient written only here, the producer
   writes the output directly.
4. Otherwise (graph input straight to graph output) it stays.
5. The array that goes is read and written by operators only (not by an
   expanded map or a nested program, whose insides name it too).
"""
import dace

from transforms.graph import readers_elsewhere
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.transformation_api import register


def _removable(sdfg, state, node):
    """Which access node goes, "dst" (rule 2) or "src" (rule 3), or False."""
    if node.op_type == "Dropout" and (any(node.onnx_outputs[1:]) or any(node.onnx_inputs[1:])):
        return False
    if len(state.in_edges(node)) != 1 or len(state.out_edges(node)) != 1:
        return False
    src = state.in_edges(node)[0].src
    dst = state.out_edges(node)[0].dst
    if node.op_type == "Cast" and (
            sdfg.arrays[src.data].dtype != sdfg.arrays[dst.data].dtype
            or tuple(sdfg.arrays[src.data].shape) != tuple(sdfg.arrays[dst.data].shape)):
        return False
    if sdfg.arrays[dst.data].transient and readers_elsewhere(sdfg, state, dst.data) == 0:
        drop = "dst"
    elif (sdfg.arrays[src.data].transient and state.in_degree(src) == 1
          and readers_elsewhere(sdfg, state, src.data) == 0):
        drop = "src"
    else:
        return False
    # rule 5: the edges moved to the kept array are whole-array edges of operators; a map
    # or nested program behind one names the dropped array inside, beyond the edge
    gone = dst if drop == "dst" else src
    neighbours = [e.dst for e in state.out_edges(gone)] + [e.src for e in state.in_edges(gone)]
    if not all(isinstance(n, OnnxOp) for n in neighbours):
        return False
    return drop


@register
class RemoveIdentity(OperatorTransformation):
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    level = "global"
    name = "RemoveIdentity"
    description = "Remove Identity, inference Dropout and same-type Cast nodes (no copy)"
    op_types = {"Identity", "Dropout", "Cast"}
    refusal = "{node.onnx_name} can no longer be removed"
    # Deciding reads other states' readers; the rewrite touches the node, its two access
    # nodes and their neighbours' edges, all in the match's region.
    region_rewrite = True

    def plan(self, sdfg, state, node, weights=None):
        return _removable(sdfg, state, node)

    def describe(self, node, plan):
        return f"remove {node.onnx_name}"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        src = state.in_edges(node)[0].src
        dst = state.out_edges(node)[0].dst
        state.remove_node(node)
        keep, drop = (src, dst) if plan == "dst" else (dst, src)
        for e in state.in_edges(drop):
            state.add_edge(e.src, e.src_conn, keep, e.dst_conn,
                           dace.Memlet.from_array(keep.data, sdfg.arrays[keep.data]))
        for e in state.out_edges(drop):
            state.add_edge(keep, e.src_conn, e.dst, e.dst_conn,
                           dace.Memlet.from_array(keep.data, sdfg.arrays[keep.data]))
        state.remove_node(drop)
        if not any(n.data == drop.data for s in sdfg.states() for n in s.data_nodes()):
            sdfg.remove_data(drop.data)
