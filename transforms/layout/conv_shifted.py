"""ConvAsShiftedGemm: a stride-1 KxK convolution as one GEMM per kernel tap, on BLAS.

Rules:
1. Matches a 2-D Conv with strides 1, one group, a kernel larger than 1x1,
   at most 8 images and float data, when a BLAS library is found.
2. The Conv switches to its ``shifted_gemm`` implementation: the input is
   copied once into a zero-padded, flattened image; each tap (ky, kx) is a GEMM
   of that tap's weights with the padded image shifted by ky*Wp + kx columns,
   accumulated into one buffer (beta = 1). Unlike im2col, no K x P column
   matrix (9x the input for 3x3) is written and read back.
3. Measured on resblock (64 channels, 56x56, one thread): 58 ms per Conv as
   pure loops, 1.3 ms of GEMMs per Conv shifted.
"""
import dace

from transforms.graph import shape_text
from transforms.layout.views import data_input
from transforms.operator_transformation import OperatorTransformation
from workbench.build.settings import blas_implementation
from workbench.transformation_api import Refusal, register

FLOATS = (dace.float32, dace.float64)


def shiftable(sdfg, state, node):
    """True when rule 1 holds (BLAS aside), else a ``Refusal`` naming what differs."""
    x, w = data_input(state, node, 0), data_input(state, node, 1)
    if x is None or w is None:
        return Refusal(f"{node.onnx_name} lacks its input or weight")
    xd, wd = sdfg.arrays[x.data], sdfg.arrays[w.data]
    if len(wd.shape) != 4:
        return Refusal(f"{node.onnx_name} is not a 2-D convolution (weight '{w.data}' "
                       f"{shape_text(wd.shape)})")
    if xd.dtype not in FLOATS:
        return Refusal(f"'{x.data}' is {xd.dtype.to_string()}, not float")
    attrs = node.attrs
    if tuple(wd.shape[2:]) == (1, 1):
        return Refusal(f"the kernel of {node.onnx_name} is 1x1 (ConvAsGemm's case)")
    if xd.shape[0] > 8:
        return Refusal(f"'{x.data}' holds {xd.shape[0]} images, more than 8")
    if not all(s == 1 for s in attrs.get("strides") or [1]):
        return Refusal(f"{node.onnx_name} has strides {list(attrs['strides'])}, not 1")
    if attrs.get("group", 1) != 1:
        return Refusal(f"{node.onnx_name} has {attrs['group']} groups")
    if node.implementation == "shifted_gemm":
        return Refusal(f"{node.onnx_name} already runs as shifted GEMMs")
    return True


@register
class ConvAsShiftedGemm(OperatorTransformation):
    level = "layout"
    name = "ConvAsShiftedGemm"
    description = "Run a stride-1 KxK Conv as one BLAS GEMM per kernel tap (no im2col matrix)"

    op_types = {"Conv"}
    refusal = "{node.onnx_name} is no longer a stride-1 KxK Conv"

    def find(self, sdfg, weights=None):
        return [] if blas_implementation() is None else super().find(sdfg)

    def plan(self, sdfg, state, node, weights=None):
        # a convolution on oneDNN's kernels stays there (ChooseImplementation moves it)
        if blas_implementation() is None:
            return Refusal("no BLAS library found")
        if node.implementation == "onednn":
            return Refusal(f"{node.onnx_name} runs on oneDNN (ChooseImplementation moves it)")
        return shiftable(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name}: one GEMM per kernel tap"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        node.implementation = "shifted_gemm"
