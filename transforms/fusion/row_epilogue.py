"""RowEpilogueFusion: Softmax or LayerNorm over the last axis joins the fused node before it.

BERT's attention scores leave their GemmEpilogue (scale, mask) only to be
read back by the Softmax; each residual sum leaves its GemmEpilogue only to
be read back by a LayerNorm. A row operator over the last axis can instead
run inside the producer's row kernel: once a row's element-wise epilogue is
written, the one-pass statistics and normalize sweeps run on it in place
while it is in cache (``workbench/ops/onepass.py``), and the intermediate
tensor disappears.

Rules:
1. The producer is a FusedElementwise with one output, a GemmEpilogue or a
   ConvEpilogue, with no row operator yet.
2. Its output is a transient written once, read only in this state and only
   by the row operator: a Softmax or LogSoftmax whose axis is the last, or a
   LayerNormalization with ``axis`` the last and without its optional Mean
   and InvStdDev outputs, of float32/float64 data.
3. The last dimension has more than one element; LayerNorm's scale and bias
   are per-feature vectors of that length (or single values).
4. The producer reads and writes row-major tensors only (a fused chain may read a
   strided View; the row operator's sweeps walk contiguous rows).
5. The producer's node takes the row operator as its ``row`` attribute, its
   scale and bias as new inputs, and writes the row operator's output.
"""
import dace

from transforms.fusion import program as prog
from transforms.fusion.elementwise_chain import strided_arrays
from transforms.graph import (in_array, node_text, readers_elsewhere, readers_text, shape_text,
                              state_accesses)
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.ops.registry import schema_defaults
from workbench.ops.symbolic_sizes import maybe
from workbench.transformation_api import Refusal, register

ROW_OPS = ("Softmax", "LogSoftmax", "LayerNormalization")
PRODUCERS = (prog.FUSED, *prog.EPILOGUE_OPS)


def _row_params(sdfg, state, node, n):
    """Connectors of LayerNorm's scale and bias if they are per-feature (rule 3), else None."""
    conns = [c for c in node.onnx_inputs[1:3] if c]
    for conn in conns:
        shape = [s for s in sdfg.arrays[in_array(state, node, conn).data].shape]
        while shape and shape[0] == 1:
            shape.pop(0)
        if shape not in ([], [n]):
            return None
    return conns


def producer_of(sdfg, state, node):
    """The fused node ``node`` can join (rules 1-3), or a ``Refusal`` saying why not."""
    if node.op_type not in ROW_OPS:
        return Refusal(f"{node.op_type} is not a row operator")
    if any(node.onnx_outputs[1:]):
        return Refusal(f"{node.onnx_name} also writes its Mean/InvStdDev outputs")
    data = in_array(state, node, node.onnx_inputs[0])
    desc = sdfg.arrays[data.data]
    shape = tuple(desc.shape)
    axis = {**schema_defaults(node.op_type, node.opset), **node.attrs}.get("axis", -1)
    if axis % len(shape) != len(shape) - 1:
        return Refusal(f"{node.onnx_name} normalizes over axis {axis} of {shape_text(shape)}, "
                       f"not the last")
    if not maybe(shape[-1] > 1):
        return Refusal(f"rows of '{data.data}' have {shape[-1]} element")
    if desc.dtype not in prog.FLOAT_TYPES:
        return Refusal(f"'{data.data}' is {desc.dtype.to_string()}, not float32/float64")
    if node.op_type == "LayerNormalization" and _row_params(sdfg, state, node, shape[-1]) is None:
        return Refusal(f"scale or bias of {node.onnx_name} is not a vector of {shape[-1]} "
                       f"per-feature values")
    if not desc.transient:
        return Refusal(f"its input '{data.data}' is a graph input or output")
    if state.in_degree(data) != 1:
        return Refusal(f"its input '{data.data}' is written by {state.in_degree(data)} nodes")
    if state.out_degree(data) != 1:
        return Refusal(f"its input '{data.data}' is read by {readers_text(state.out_degree(data))}"
                       f", not only by {node.onnx_name}")
    if readers_elsewhere(sdfg, state, data.data) or \
            len(state_accesses(state, data.data)) != 1:
        return Refusal(f"its input '{data.data}' is accessed elsewhere too")
    producer = state.in_edges(data)[0].src
    if not isinstance(producer, OnnxOp) or producer.op_type not in PRODUCERS:
        return Refusal(f"its input '{data.data}' comes from {node_text(producer)}, not a fused "
                       f"node (FusedElementwise, GemmEpilogue, ConvEpilogue)")
    if producer.attrs.get("row"):
        return Refusal(f"{producer.onnx_name} already runs a row operator")
    if len(state.out_edges(producer)) != 1:
        return Refusal(f"{producer.onnx_name} writes {len(state.out_edges(producer))} outputs")
    strided = strided_arrays(sdfg, state, producer)
    if strided:
        return Refusal(f"{producer.onnx_name} reads or writes {', '.join(strided)} at other "
                       f"strides; the row operator's sweeps walk contiguous rows")
    return producer


@register
class RowEpilogueFusion(OperatorTransformation):
    level = "fusion"
    name = "RowEpilogueFusion"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Run a last-axis Softmax/LayerNorm inside the fused node before it, row by row"
    op_types = set(ROW_OPS)
    role = "row"

    def plan(self, sdfg, state, node, weights=None):
        """The producer."""
        return producer_of(sdfg, state, node)

    def roles(self, node, producer) -> dict:
        return {"producer": producer, "row": node}

    def describe(self, node, producer):
        return f"run {node.onnx_name} row by row inside {producer.onnx_name}"

    def rewrite(self, owner, state, node, producer, weights=None):
        ins = [(e.dst_conn, e.src) for e in state.in_edges(producer)]
        row = {"op": node.op_type, "scale": "", "bias": ""}
        if node.op_type == "LayerNormalization":
            attrs = {**schema_defaults(node.op_type, node.opset), **node.attrs}
            row["epsilon"] = float(attrs["epsilon"])
            n = owner.arrays[in_array(state, node, node.onnx_inputs[0]).data].shape[-1]
            for role, conn in zip(("scale", "bias"), _row_params(owner, state, node, n)):
                row[role] = f"r{role[0]}"  # new connectors: rs, rb
                ins.append((row[role], in_array(state, node, conn)))
        out_conn = producer.onnx_outputs[0]
        middle = state.out_edges(producer)[0].dst
        result = state.out_edges(node)[0].dst
        name = prog.fused_name([producer, node])
        fused = OnnxOp(prog.unique_label(state, name), op_type=producer.op_type,
                       domain="workbench", onnx_name=name, opset=producer.opset,
                       attrs={**producer.attrs, "row": row},
                       onnx_inputs=[c for c, _ in ins], onnx_outputs=[out_conn])
        fused.implementation = producer.implementation
        state.add_node(fused)
        for conn, access in ins:
            state.add_edge(access, None, fused, conn,
                           dace.Memlet.from_array(access.data, owner.arrays[access.data]))
        state.add_edge(fused, out_conn, result, None,
                       dace.Memlet.from_array(result.data, owner.arrays[result.data]))
        for gone in (producer, node, middle):
            state.remove_node(gone)
        owner.remove_data(middle.data)
