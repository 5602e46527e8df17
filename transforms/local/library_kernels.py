"""OnOneDNN: a convolution or pooling runs on oneDNN's kernels (implementation ``onednn``).

Rules:
1. Matches a Conv (or a ConvEpilogue around one), a ConvTranspose, MaxPool
   without Indices, AveragePool, GlobalAveragePool or GlobalMaxPool of float32 data with 1
   to 3 spatial dimensions, not yet on oneDNN, when oneDNN is installed and
   has a kernel for exactly this node other than its reference loops (asked
   at find time; the match names the kernel, e.g. ``brgconv:avx2``).
2. Only the implementation changes: the library reads the arrays at their
   own strides and applies the bias and a post-op epilogue itself (see
   workbench/ops/conv_onednn.py), so the program's meaning is the node's.
3. Weights the session holds as constants are packed once; any other weights
   (a training program's parameters, a kernel it computes) on every call.
Measured against onnxruntime per convolution shape in BENCHMARKS.md.
"""
from transforms.graph import in_array, is_weight
from transforms.operator_transformation import OperatorTransformation
from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv_onednn import conv_desc, core_call
from workbench.ops.conv_onednn import library_desc as conv_library_desc
from workbench.ops.deconv_onednn import deconv_desc
from workbench.ops.pool_onednn import pool_desc
from workbench.ops.registry import make_call
from workbench.transformation_api import Refusal, register

POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}


def fast(kernel: str) -> bool:
    """Not one of oneDNN's reference or plain-layout loop nests (``ref:any``,
    ``simple_nchw:any``: a pool on NCHW data took 7.6 ms there, 0.14 ms channels-last)."""
    return not kernel.startswith(("ref", "simple"))


def library_desc(call, node):
    """The shim's descriptor of the node (raises UnsupportedCaseError when it has none)."""
    if node.op_type in POOLS:
        return pool_desc(call)
    if node.op_type == "ConvTranspose":
        return deconv_desc(call)
    if node.op_type == "ConvEpilogue":
        x, w = node.attrs["core_inputs"][:2]
        bias = len(node.attrs["core_inputs"]) > 2 and bool(node.attrs["core_inputs"][2])
        return conv_desc(core_call(call), x, w, call.output(0), bias)
    return conv_library_desc(call, call.input(0), call.input(1), call.output(0),
                             call.input(2) is not None)[0]


def mark_constant_weights(sdfg, state, node, weights) -> None:
    """Tell a convolution's library call whether its weights are a constant of the
    program (packed once) or values the program or its caller change between calls (a
    training program's parameters, a kernel it computes: packed on every call, since a
    sample of them cannot show that they changed)."""
    if node.op_type not in ("Conv", "ConvEpilogue", "ConvTranspose"):
        return
    conn = node.attrs["core_inputs"][1] if node.op_type == "ConvEpilogue" else node.onnx_inputs[1]
    node.constant_weights = is_weight(sdfg, in_array(state, node, conn).data, weights)


def onednn_kernel(sdfg, state, node):
    """oneDNN's kernel name for the node, or a ``Refusal`` when it has none but its
    reference loops (or none at all)."""
    if node.op_type == "ConvEpilogue" and node.attrs.get("core") != "Conv":
        return Refusal(f"{node.onnx_name}'s core is a {node.attrs.get('core')}, not a Conv")
    try:
        ok, kernel = onednn.check(library_desc(make_call(node, state, sdfg), node))
    except UnsupportedCaseError as e:
        return Refusal(f"oneDNN cannot run {node.onnx_name}: {e}")
    except (StopIteration, KeyError):
        return Refusal(f"{node.onnx_name} is missing an input or output oneDNN needs")
    if not ok:
        return Refusal(f"oneDNN refuses {node.onnx_name}: {kernel or 'no kernel'}")
    if not fast(kernel):
        return Refusal(f"oneDNN would run {node.onnx_name} only on its reference loops "
                       f"({kernel})")
    return kernel


@register
class OnOneDNN(OperatorTransformation):
    level = "local"
    name = "OnOneDNN"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    needs_weights = True   # which convolution weights are constants (packed once)
    description = ("Run a convolution or pooling on oneDNN's kernels (weights reordered once, "
                   "epilogue as post-ops)")
    op_types = {"Conv", "ConvEpilogue", "ConvTranspose"} | POOLS
    refusal = "{match.description}: oneDNN no longer has a kernel for {node.onnx_name}"

    def plan(self, sdfg, state, node, weights=None):
        if node.implementation == "onednn":
            return Refusal(f"{node.onnx_name} already runs on oneDNN")
        if not onednn.available():
            return Refusal("oneDNN is not installed")
        return onednn_kernel(sdfg, state, node)

    def describe(self, node, kernel):
        return f"{node.onnx_name}: {node.implementation} -> oneDNN {kernel.split(' ')[0]}"

    def rewrite(self, sdfg, state, node, kernel, weights=None):
        node.implementation = "onednn"
        mark_constant_weights(sdfg, state, node, weights)
