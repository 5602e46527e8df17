"""ChooseImplementation: pick how one operator expands (pure, BLAS, im2col, ...)."""
from transforms.graph import ident, onnx_ops
from workbench import nodeid
from workbench.ops import implementations_of
from workbench.transform import Transformation, register


@register
class ChooseImplementation(Transformation):
    level = "local"
    name = "ChooseImplementation"
    description = "Switch an operator to another of its implementations (pure maps, BLAS, im2col)"

    def find(self, sdfg):
        matches = []
        for state, node in onnx_ops(sdfg):
            for impl in implementations_of(node.op_type):
                if impl != node.implementation:
                    matches.append(self.match({"node": ident(sdfg, state, node)},
                                              f"{node.onnx_name}: {node.implementation} -> {impl}",
                                              {"implementation": impl}))
        return matches

    def apply(self, sdfg, match):
        _, _, roles = nodeid.resolve_all(sdfg, match.where_dict())
        roles["node"].implementation = match.options_dict()["implementation"]
