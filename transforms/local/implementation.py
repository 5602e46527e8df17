"""ChooseImplementation: pick how one operator expands (pure, BLAS, im2col, ...)."""
from transforms.operator_transformation import OperatorTransformation
from workbench.ops import implementations_of
from workbench.transformation_api import register


@register
class ChooseImplementation(OperatorTransformation):
    level = "local"
    name = "ChooseImplementation"
    description = "Switch an operator to another of its implementations (pure maps, BLAS, im2col)"
    refusal = "{match.description}: {node.onnx_name} has no such implementation"
    option_names = ("implementation",)

    def choices(self, node):
        return [{"implementation": impl} for impl in implementations_of(node.op_type)
                if impl != node.implementation]

    def plan(self, sdfg, state, node, weights=None, implementation=None):
        # applying the implementation it has already is harmless (a replayed recipe)
        return implementation if implementation in implementations_of(node.op_type) else None

    def describe(self, node, impl):
        return f"{node.onnx_name}: {node.implementation} -> {impl}"

    def rewrite(self, sdfg, state, node, impl, weights=None):
        node.implementation = impl
