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
from transforms.graph import ident, in_array, onnx_ops
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.ops.onepass import softmax_onepass_supported
from workbench.ops.registry import schema_defaults
from workbench.transform import Transformation, register


def _applies(sdfg, state, node) -> bool:
    desc = sdfg.arrays[in_array(state, node, node.onnx_inputs[0]).data]
    axis = {**schema_defaults(node.op_type, node.opset), **node.attrs}.get("axis", -1)
    return node.implementation != "onepass" and softmax_onepass_supported(
        tuple(desc.shape), desc.dtype, axis, node.opset)


@register
class OnePassSoftmax(Transformation):
    level = "fusion"
    name = "OnePassSoftmax"
    description = "Softmax in one pass per row: running max and sum, then one normalize sweep"

    def find(self, sdfg):
        return [self.match({"node": ident(sdfg, state, node)},
                           f"{node.onnx_name}: running max/sum and one normalize sweep per row")
                for state, node in onnx_ops(sdfg, {"Softmax", "LogSoftmax"})
                if _applies(sdfg, state, node)]

    def apply(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles["node"]
        if node.op_type not in ("Softmax", "LogSoftmax") or not _applies(owner, state, node):
            raise TransformationError(f"{match.description}: no longer applies")
        node.implementation = "onepass"
