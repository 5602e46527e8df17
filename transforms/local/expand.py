"""ExpandToMaps: replace an operator by its implementation's maps, in place.

The library node becomes a nested SDFG which is then inlined, so that the
map-level transformations (tiling, vectorization, map fusion) see it.
"""
from dace.transformation.interstate import InlineSDFG

from transforms.graph import ident, onnx_ops
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.transformation_api import Transformation, register


@register
class ExpandToMaps(Transformation):
    level = "local"
    name = "ExpandToMaps"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Expand an operator into its maps so map-level transformations apply to it"

    def find(self, sdfg):
        return [self.match({"node": ident(sdfg, state, node)},
                           f"expand {node.onnx_name} ({node.implementation})")
                for state, node in onnx_ops(sdfg)]

    def apply(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles["node"]
        before = set(state.nodes())
        node.expand(owner, state)
        nested = [n for n in state.nodes() if n not in before]
        for n in nested:
            if type(n).__name__ == "NestedSDFG" and InlineSDFG.can_be_applied_to(owner, nested_sdfg=n):
                InlineSDFG.apply_to(owner, nested_sdfg=n, verify=False, save=False)
        if not nested:
            raise TransformationError(f"expanding {node.onnx_name} produced nothing")
