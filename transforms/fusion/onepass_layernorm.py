"""OnePassLayerNorm: LayerNormalization as one row kernel (statistics in one sweep).

The pure implementation computes the mean in one map, the variance in a
second map over ``x - mean`` and normalizes in a third, with the statistics
in arrays. The ``onepass`` implementation (``workbench/ops/onepass.py``)
sums ``x - x[0]`` and its square in double in one sweep per row, then
normalizes in one more: rows in parallel, no temporaries.

Rules:
1. Matches a LayerNormalization of float32/float64 data with no empty
   dimension whose implementation is not ``onepass`` yet.
2. Scale and bias must broadcast against a row as a contiguous suffix of
   it (the usual per-feature vectors do); others keep the pure kernel.
3. Applying it selects the ``onepass`` implementation; the optional Mean
   and InvStdDev outputs are still written.
"""
from transforms.graph import in_array
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.onepass import layernorm_onepass_supported
from workbench.transformation_api import register


def _applies(sdfg, state, node) -> bool:
    if node.implementation == "onepass":
        return False
    shapes = [tuple(sdfg.arrays[in_array(state, node, c).data].shape)
              for c in node.onnx_inputs if c]
    x = sdfg.arrays[in_array(state, node, node.onnx_inputs[0]).data]
    return layernorm_onepass_supported(shapes[0], x.dtype, node.attrs.get("axis", -1), shapes[1:])


@register
class OnePassLayerNorm(OperatorTransformation):
    level = "fusion"
    name = "OnePassLayerNorm"
    description = "LayerNorm in one pass per row: mean and variance in one sweep, then normalize"
    op_types = {"LayerNormalization"}

    def plan(self, sdfg, state, node, weights=None):
        return _applies(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name}: statistics in one sweep, then normalize"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        node.implementation = "onepass"
