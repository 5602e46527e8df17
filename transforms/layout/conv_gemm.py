"""ConvAsGemm: a 1x1 convolution is a GEMM on the NCHW data as it lies.

Rules:
1. Matches a Conv with a kernel of 1 in every spatial dim, strides 1, no
   padding and one group (any batch, any number of spatial dims), whose
   tensors are row-major.
2. Per image n, Y[n] (M x P, P = H*W...) = W (M x C) @ X[n] (C x P) + bias:
   NCHW data already is a row-major C x P matrix per image, so the Conv
   becomes a MatMulStrided reading X, W and the bias in place (the bias
   broadcast along P with stride 0). No im2col matrix, no copy.
3. The product runs on BLAS (one GEMM per image) when a BLAS library is
   found, else as the pure strided product.
"""
import math

from transforms.layout.strided import implementation_for, strided_node
from transforms.layout.views import data_input, data_output, plain_array
from transforms.operator_transformation import OperatorTransformation
from workbench.transformation_api import Refusal, register


def pointwise(sdfg, state, node):
    """True for a 1x1 Conv as rule 1 has it, else a ``Refusal`` naming what differs."""
    x, w, y = data_input(state, node, 0), data_input(state, node, 1), data_output(state, node)
    if x is None or w is None or y is None or state.out_degree(node) != 1:
        return Refusal(f"{node.onnx_name} lacks its input, weight or one output")
    b = data_input(state, node, 2)
    for a in (x, w, y) + ((b,) if b is not None else ()):
        if not plain_array(sdfg, a):
            return Refusal(f"'{a.data}' is not a row-major array (channels-last or a view)")
    wshape = sdfg.arrays[w.data].shape
    spatial = len(wshape) - 2
    attrs = node.attrs
    if spatial < 1 or not all(k == 1 for k in wshape[2:]) or \
            list(attrs.get("kernel_shape") or [1] * spatial) != [1] * spatial:
        return Refusal(f"the kernel of {node.onnx_name} is {'x'.join(map(str, wshape[2:]))}, "
                       f"not 1x1")
    if not all(s == 1 for s in attrs.get("strides") or [1]):
        return Refusal(f"{node.onnx_name} has strides {list(attrs['strides'])}")
    if not all(p == 0 for p in attrs.get("pads") or [0]):
        return Refusal(f"{node.onnx_name} pads its input ({list(attrs['pads'])})")
    if attrs.get("group", 1) != 1:
        return Refusal(f"{node.onnx_name} has {attrs['group']} groups")
    return True


def gemm_views(sdfg, state, node) -> dict:
    """Per image: A = W as (M, C), B = X[n] as (C, P), Y[n] as (M, P), bias along M."""
    n, c, *spatial = sdfg.arrays[data_input(state, node, 0).data].shape
    m = sdfg.arrays[data_output(state, node).data].shape[1]
    p = math.prod(spatial)
    views = {"a": ((n, m, c), (0, c, 1)), "b": ((n, c, p), (c * p, p, 1)),
             "y": ((n, m, p), (m * p, p, 1))}
    if data_input(state, node, 2) is not None:
        views["c"] = ((n, m, p), (0, 1, 0))
    return views


@register
class ConvAsGemm(OperatorTransformation):
    level = "layout"
    name = "ConvAsGemm"
    description = "Run a 1x1 Conv as a GEMM on the NCHW data in place (BLAS, no im2col copy)"
    op_types = {"Conv"}
    refusal = "{node.onnx_name} is no longer a 1x1 Conv"

    def plan(self, sdfg, state, node, weights=None):
        # a convolution on oneDNN's kernels stays there (ChooseImplementation moves it)
        if node.implementation == "onednn":
            return Refusal(f"{node.onnx_name} runs on oneDNN (ChooseImplementation moves it)")
        return pointwise(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name} as a GEMM"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        views = gemm_views(sdfg, state, node)
        arrays = {"a": data_input(state, node, 1), "b": data_input(state, node, 0),
                  "y": data_output(state, node)}
        if "c" in views:
            arrays["c"] = data_input(state, node, 2)
        strided_node(sdfg, state, node, views, arrays, implementation_for("blas"))
