"""IntegerDataMovement: a Reshape, Transpose, MaxPool, Gather, ... between a
DequantizeLinear and a QuantizeLinear of the same scale and zero point moves the
8-bit values themselves.

A QDQ model wraps every operator in a DequantizeLinear and a QuantizeLinear, the
ones that only move or select values too: BERT's head reshapes and transposes,
ResNet's MaxPool and Flatten, the embedding Gather. Run as written each reads
bytes, writes floats (4x), moves the floats and quantizes them back. These
operators give every output element the value of one input element (MaxPool the
largest, and dequantization keeps order), so with the same scale and zero point
on both sides, quantize(op(dequantize(v))) is op(v): the float round trip gives
back the very integer (|(v - z) * s / s - (v - z)| is far below one half).

Rules:
1. The operator moves or selects elements (``MOVES``) and has one output (a
   MaxPool without Indices).
2. Its data input (input 0) is written by a DequantizeLinear of 8-bit integers
   with one scale (positive, finite) and zero point; no other input is float.
3. Its output is a transient read only by one QuantizeLinear, in this state and
   nowhere else, with the same scale and zero point, quantizing to the same type.
4. The DequantizeLinear stays when something else reads its result.
"""
import math

import dace
import numpy as np

from transforms.fusion.qdq import EIGHT_BITS, quantization, remove_nodes, writer
from transforms.graph import in_array, out_array, readers_elsewhere, single_consumer
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.transformation_api import register

MOVES = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Slice",
         "Expand", "Tile", "MaxPool", "DepthToSpace", "SpaceToDepth"}


def _plan(sdfg, state, node):
    """(dequantize, quantize) around ``node`` when the rules hold, else None."""
    if node.domain not in ("", "ai.onnx") or len([c for c in node.onnx_outputs if c]) != 1 \
            or not node.onnx_outputs[0]:
        return None
    dq = writer(state, node, node.onnx_inputs[0] if node.onnx_inputs else "")
    if not isinstance(dq, OnnxOp) or dq.op_type != "DequantizeLinear":
        return None
    for conn in node.onnx_inputs[1:]:
        if conn and sdfg.arrays[in_array(state, node, conn).data].dtype in (
                dace.float16, dace.float32, dace.float64):
            return None
    product = out_array(state, node, node.onnx_outputs[0])
    if not single_consumer(sdfg, state, product) or state.in_degree(product) != 1:
        return None
    edge = state.out_edges(product)[0]
    q = edge.dst
    if not (isinstance(q, OnnxOp) and q.op_type == "QuantizeLinear"
            and edge.dst_conn == q.onnx_inputs[0]):
        return None
    before, after = (quantization(sdfg, state, n, EIGHT_BITS) for n in (dq, q))
    if before is None or after is None or before[0].size != 1:
        return None
    scale = float(before[0][0])
    if not (math.isfinite(scale) and scale > 0) or not np.array_equal(before[0], after[0]):
        return None
    zeros = [z if z is not None else np.zeros(1, np.uint8) for z in (before[1], after[1])]
    integers = [sdfg.arrays[in_array(state, dq, dq.onnx_inputs[0]).data].dtype,
                sdfg.arrays[out_array(state, q, q.onnx_outputs[0]).data].dtype]
    if integers[0] != integers[1] or int(zeros[0][0]) != int(zeros[1][0]):
        return None
    return dq, q


@register
class IntegerDataMovement(OperatorTransformation):
    level = "fusion"
    name = "IntegerDataMovement"
    description = ("Move 8-bit values through a Reshape/Transpose/MaxPool/Gather/... between "
                   "a DequantizeLinear and a QuantizeLinear of the same scale")
    op_types = MOVES
    refusal = "{match.description}: no longer between a DequantizeLinear and a QuantizeLinear"

    def plan(self, sdfg, state, node, weights=None):
        return _plan(sdfg, state, node)

    def roles(self, node, plan) -> dict:
        return {"node": node, "dequantize": plan[0], "quantize": plan[1]}

    def describe(self, node, plan):
        return f"run {node.onnx_name} on the 8-bit values"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        dq, q = plan
        data_conn, out_conn = node.onnx_inputs[0], node.onnx_outputs[0]
        integers = in_array(state, dq, dq.onnx_inputs[0])
        dequantized = in_array(state, node, data_conn)
        result = out_array(state, q, q.onnx_outputs[0])
        product = out_array(state, node, out_conn)
        for e in [e for e in state.in_edges(node) if e.dst_conn == data_conn]:
            state.remove_edge(e)
        state.add_edge(integers, None, node, data_conn,
                       dace.Memlet.from_array(integers.data, sdfg.arrays[integers.data]))
        state.add_edge(node, out_conn, result, None,
                       dace.Memlet.from_array(result.data, sdfg.arrays[result.data]))
        remove_nodes(sdfg, state, [q, product])
        if (state.out_degree(dequantized) == 0 and sdfg.arrays[dequantized.data].transient
                and readers_elsewhere(sdfg, state, dequantized.data) == 0):
            remove_nodes(sdfg, state, [dq, dequantized])
