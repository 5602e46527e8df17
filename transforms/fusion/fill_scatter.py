"""FillIntoScatter: a scatter onto one value everywhere starts from that value, not a copy.

A training program's embedding gradient is ``ScatterND(zeros, rows, dY,
reduction="add")`` (``workbench/training/rules/shaping.py``): a ConstantOfShape
writes zeros as large as the table, and the scatter reads them all back to
copy them into its output before adding the rows. BERT-tiny's word table is
15.6 MB, GPT-2's 154 MB: twice that much moved per training step for a memset.
The fused node (``ScatterNDOnFill`` / ``ScatterElementsOnFill``,
``workbench/ops/scatter.py``) writes the value into its output, then scatters:
the fill's tensor is never stored nor read.

Rules:
1. Matches a ScatterND, ScatterElements or Scatter whose data (input 0) is a
   transient written once, by a fill, and read by the scatter alone (one access
   node). A fill is a ConstantOfShape, or an Expand or Tile of one element whose
   value is known at build time (recorded on the node).
2. The fill and the data have the scatter's output shape and type (ONNX says
   so for the data; checked).
3. Applying it puts one node in place of the fill and the scatter: the same
   indices, updates, output, reduction and axis, and the value as ``fill``.
The program computes what it did: every element of the output starts as the
value and takes the same updates in the same reduction.
"""
from transforms.fusion import program as prog
from transforms.fusion.chains import replace_chain
from transforms.graph import in_array, names_text, single_consumer, state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.ops.scatter import DOMAIN, ON_FILL
from workbench.ops.shape_ops import attribute_tensor
from workbench.transformation_api import Refusal, register

FILLS = {"ConstantOfShape", "Expand", "Tile"}


def fill_value(node):
    """The one value a fill writes, as a Python number, else None."""
    if node.op_type == "ConstantOfShape":
        value = node.attrs.get("value")
        return attribute_tensor(value).ravel()[0].item() if value else 0.0
    if node.op_type in ("Expand", "Tile"):
        value = node.consts.get(0)
        if value is None or value.size != 1 or value.dtype.kind not in "biuf":
            return None
        return value.ravel()[0].item()
    return None


def _plan(sdfg, state, node):
    data_conn = node.onnx_inputs[0] if node.onnx_inputs else ""
    if not data_conn:
        return None
    data = in_array(state, node, data_conn)
    writers = state.in_edges(data)
    fill = writers[0].src if len(writers) == 1 else None
    if not isinstance(fill, OnnxOp) or fill.op_type not in FILLS or \
            fill.domain not in ("", "ai.onnx"):
        if not writers:
            return Refusal(f"its data '{data.data}' is a weight or an input of the program, "
                           f"not the output of a fill")
        kind = fill.op_type if isinstance(fill, OnnxOp) else "no single operator"
        return Refusal(f"its data '{data.data}' is written by {kind}, not a fill "
                       f"({names_text(sorted(FILLS))})")
    if not single_consumer(sdfg, state, data) or len(state_accesses(state, data.data)) != 1:
        return Refusal(f"its data '{data.data}' is read elsewhere too: the fill must stay")
    value = fill_value(fill)
    if value is None:
        return Refusal(f"{fill.onnx_name} repeats a value not known at build time")
    y = next(e.dst for e in state.out_edges(node))
    desc, out = sdfg.arrays[data.data], sdfg.arrays[y.data]
    if tuple(desc.shape) != tuple(out.shape) or desc.dtype != out.dtype:
        return Refusal(f"its data {tuple(desc.shape)} is not shaped and typed as its output "
                       f"{tuple(out.shape)}")
    return fill, data, value


@register
class FillIntoScatter(OperatorTransformation):
    level = "fusion"
    name = "FillIntoScatter"
    description = ("A scatter whose data is one value everywhere (an embedding gradient's "
                   "zeros) starts its output from the value: the fill is never stored or read")
    op_types = set(ON_FILL)
    role = "scatter"
    refusal = "{match.description}: no longer a scatter onto a fill"

    def plan(self, sdfg, state, node, weights=None):
        return _plan(sdfg, state, node)

    def roles(self, node, plan) -> dict:
        return {"scatter": node, "fill": plan[0]}

    def describe(self, node, plan):
        fill, data, value = plan
        return f"{node.onnx_name} onto {fill.onnx_name} ({value!r} in '{data.data}')"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        fill, data, value = plan
        inputs = [(e.dst_conn, e.src) for e in state.in_edges(node)
                  if e.dst_conn in node.onnx_inputs[1:]]
        outputs = [(e.src_conn, e.dst) for e in state.out_edges(node)]
        fused = OnnxOp(prog.unique_label(state, node.onnx_name), op_type=ON_FILL[node.op_type],
                       domain=DOMAIN, onnx_name=node.onnx_name, opset=node.opset,
                       attrs={**node.attrs, "fill": value},
                       onnx_inputs=[""] + list(node.onnx_inputs[1:]),
                       onnx_outputs=list(node.onnx_outputs))
        replace_chain(sdfg, state, [fill, node], [data], fused, inputs, outputs)
