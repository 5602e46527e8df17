"""ChooseImplementation: pick how one operator expands (pure, BLAS, im2col, ...)."""
from transforms.graph import names_text
from transforms.layout.views import is_row_major
from transforms.local.library_kernels import mark_constant_weights
from transforms.operator_transformation import OperatorTransformation
from workbench.ops import implementations_of
from workbench.transformation_api import Refusal, register


STRIDED = {"onednn", "direct"}  # implementations that read operands at any strides
# (op type, implementation) that takes B as a constant of the program (packed once)
PACKS_B = {("MatMul", "onednn"), ("Gemm", "onednn"), ("GemmEpilogue", "onednn")}


@register
class ChooseImplementation(OperatorTransformation):
    level = "local"
    name = "ChooseImplementation"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Switch an operator to another of its implementations (pure maps, BLAS, im2col)"
    refusal = "{match.description}: {node.onnx_name} has no such implementation"
    option_names = ("implementation",)

    def choices(self, node):
        return [{"implementation": impl} for impl in implementations_of(node.op_type)
                if impl != node.implementation and (node.op_type, impl) not in PACKS_B]

    def plan(self, sdfg, state, node, weights=None, implementation=None):
        # applying the implementation it has already is harmless (a replayed recipe)
        if implementation not in implementations_of(node.op_type):
            return None
        if (node.op_type, implementation) in PACKS_B:
            # it cannot tell weights from inputs (it runs without them, inside bodies too)
            return Refusal(f"{implementation} packs B once: GemmOnOneDNN chooses it where "
                           f"{node.onnx_name}'s B is a weight")
        # only library calls read channels-last (ChannelsLast) operands as they lie
        if implementation not in STRIDED:
            strided = sorted({e.data.data for e in state.in_edges(node) + state.out_edges(node)
                              if e.data.data and not is_row_major(sdfg.arrays[e.data.data])})
            if strided:
                return Refusal(f"{implementation} reads row-major tensors, and "
                               f"{names_text(strided)} laid out channels-last")
        return implementation

    def describe(self, node, impl):
        return f"{node.onnx_name}: {node.implementation} -> {impl}"

    def rewrite(self, sdfg, state, node, impl, weights=None):
        node.implementation = impl
        mark_constant_weights(sdfg, state, node, weights)
