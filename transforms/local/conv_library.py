"""ConvOnOneDNN: a convolution runs on oneDNN's kernels (implementation ``onednn``).

Rules:
1. Matches a Conv, or a ConvEpilogue around one, of float32 data with 1 to 3
   spatial dimensions, not yet on oneDNN, when oneDNN is installed and has a
   kernel for exactly this convolution other than its reference loops (asked
   at find time; the match names the kernel, e.g. ``brgconv:avx2``).
2. Only the implementation changes: the library reads the arrays at their
   own strides and applies bias and a post-op epilogue itself (see
   workbench/ops/conv_onednn.py), so the program's meaning is the node's.
Measured against onnxruntime per convolution shape in BENCHMARKS.md.
"""
from transforms.operator_transformation import OperatorTransformation
from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv_onednn import conv_desc, core_call
from workbench.ops.registry import make_call
from workbench.transformation_api import register


def onednn_kernel(sdfg, state, node):
    """oneDNN's kernel name for the node's convolution, or None when it has none."""
    if node.op_type == "ConvEpilogue" and node.attrs.get("core") != "Conv":
        return None
    try:
        call = make_call(node, state, sdfg)
        if node.op_type == "ConvEpilogue":
            x, w = node.attrs["core_inputs"][:2]
            call, bias = core_call(call), len(node.attrs["core_inputs"]) > 2
        else:
            x, w, bias = call.input(0), call.input(1), call.input(2) is not None
        ok, kernel = onednn.check(conv_desc(call, x, w, call.output(0), bias))
    except (UnsupportedCaseError, StopIteration, KeyError):
        return None
    # oneDNN's reference kernel is a plain loop nest, far slower than the workbench's own
    return kernel if ok and not kernel.startswith("ref") else None


@register
class ConvOnOneDNN(OperatorTransformation):
    level = "local"
    name = "ConvOnOneDNN"
    description = "Run a convolution on oneDNN's kernels (weights reordered once, epilogue as post-ops)"
    op_types = {"Conv", "ConvEpilogue"}
    refusal = "{match.description}: oneDNN no longer has a kernel for {node.onnx_name}"

    def plan(self, sdfg, state, node, weights=None):
        if node.implementation == "onednn" or not onednn.available():
            return None
        return onednn_kernel(sdfg, state, node)

    def describe(self, node, kernel):
        return f"{node.onnx_name}: {node.implementation} -> oneDNN {kernel.split(' ')[0]}"

    def rewrite(self, sdfg, state, node, kernel, weights=None):
        node.implementation = "onednn"
