"""OnePassSoftmax: Softmax/LogSoftmax as one row kernel (running max and sum, one sweep out).

The pure implementation runs a map per statistic (max, sum of exponentials)
and keeps them in arrays before the normalizing map. The ``onepass``
implementation (``workbench/ops/onepass.py``) fuses the passes per row: a
running max and sum in one sweep, then one normalize sweep, no exponential
stored, rows in parallel.

Rules:
1. Matches a Softmax or LogSoftmax of float32/float64 data with no empty
   dimension and rows of more than one element, whose implementation is
   not ``onepass`` yet.
2. Applying it selects the ``onepass`` implementation; the graph is
   otherwise unchanged.
"""
from transforms.graph import in_array, shape_text
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.onepass import softmax_onepass_supported, softmax_view
from workbench.ops.simd import FLOAT_TYPES
from workbench.ops.registry import schema_defaults
from workbench.transformation_api import Refusal, register


def _applies(sdfg, state, node):
    """True, or a ``Refusal`` naming the rule (1) it breaks."""
    data = in_array(state, node, node.onnx_inputs[0])
    desc = sdfg.arrays[data.data]
    axis = {**schema_defaults(node.op_type, node.opset), **node.attrs}.get("axis", -1)
    if node.implementation == "onepass":
        return Refusal(f"{node.onnx_name} already runs one pass per row")
    if softmax_onepass_supported(tuple(desc.shape), desc.dtype, axis, node.opset):
        return True
    if desc.dtype not in FLOAT_TYPES:
        return Refusal(f"'{data.data}' is {desc.dtype.to_string()}, not float32/float64")
    view = softmax_view(tuple(desc.shape), axis, node.opset)
    if 0 in view:
        return Refusal(f"'{data.data}' {shape_text(desc.shape)} is empty")
    return Refusal(f"rows of '{data.data}' {shape_text(desc.shape)} along axis {axis} have "
                   f"{view[1]} element: nothing to fuse")


@register
class OnePassSoftmax(OperatorTransformation):
    level = "fusion"
    name = "OnePassSoftmax"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Softmax in one pass per row: running max and sum, then one normalize sweep"
    op_types = {"Softmax", "LogSoftmax"}

    def plan(self, sdfg, state, node, weights=None):
        return _applies(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name}: running max/sum and one normalize sweep per row"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        node.implementation = "onepass"
