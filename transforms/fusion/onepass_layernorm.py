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
import math

from transforms.graph import in_array, shape_text
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.onepass import layernorm_onepass_supported
from workbench.ops.simd import FLOAT_TYPES
from workbench.transformation_api import Refusal, register


def _applies(sdfg, state, node):
    """True, or a ``Refusal`` naming the rule it breaks."""
    if node.implementation == "onepass":
        return Refusal(f"{node.onnx_name} already runs one pass per row")
    arrays = [in_array(state, node, c).data for c in node.onnx_inputs if c]
    shapes = [tuple(sdfg.arrays[a].shape) for a in arrays]
    x = sdfg.arrays[arrays[0]]
    axis = node.attrs.get("axis", -1)
    if layernorm_onepass_supported(shapes[0], x.dtype, axis, shapes[1:]):
        return True
    if x.dtype not in FLOAT_TYPES:
        return Refusal(f"'{arrays[0]}' is {x.dtype.to_string()}, not float32/float64")
    row = shapes[0][axis % len(shapes[0]):]
    if 0 in shapes[0] or math.prod(row) <= 1:
        return Refusal(f"rows of '{arrays[0]}' {shape_text(shapes[0])} from axis {axis} have "
                       f"{math.prod(row)} element(s): nothing to fuse")
    odd = [f"'{a}' {shape_text(s)}" for a, s in zip(arrays[1:], shapes[1:])]
    return Refusal(f"scale/bias ({', '.join(odd)}) do not broadcast as a suffix of a row "
                   f"{shape_text(row)}")


@register
class OnePassLayerNorm(OperatorTransformation):
    level = "fusion"
    name = "OnePassLayerNorm"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "LayerNorm in one pass per row: mean and variance in one sweep, then normalize"
    op_types = {"LayerNormalization"}

    def plan(self, sdfg, state, node, weights=None):
        return _applies(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name}: statistics in one sweep, then normalize"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        node.implementation = "onepass"
