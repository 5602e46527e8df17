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
from transforms.graph import ident, in_array, onnx_ops
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.ops.onepass import layernorm_onepass_supported
from workbench.transform import Transformation, register


def _applies(sdfg, state, node) -> bool:
    if node.implementation == "onepass":
        return False
    shapes = [tuple(sdfg.arrays[in_array(state, node, c).data].shape)
              for c in node.onnx_inputs if c]
    x = sdfg.arrays[in_array(state, node, node.onnx_inputs[0]).data]
    return layernorm_onepass_supported(shapes[0], x.dtype, node.attrs.get("axis", -1), shapes[1:])


@register
class OnePassLayerNorm(Transformation):
    level = "fusion"
    name = "OnePassLayerNorm"
    description = "LayerNorm in one pass per row: mean and variance in one sweep, then normalize"

    def find(self, sdfg):
        return [self.match({"node": ident(sdfg, state, node)},
                           f"{node.onnx_name}: statistics in one sweep, then normalize")
                for state, node in onnx_ops(sdfg, {"LayerNormalization"})
                if _applies(sdfg, state, node)]

    def apply(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles["node"]
        if node.op_type != "LayerNormalization" or not _applies(owner, state, node):
            raise TransformationError(f"{match.description}: no longer applies")
        node.implementation = "onepass"
