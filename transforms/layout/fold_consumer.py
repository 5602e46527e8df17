"""FoldTransposeIntoConsumer: element-wise readers and library convolutions read a
transpose's input in place.

Rules:
1. Matches a Transpose whose output is a transient written only there and
   read only by element-wise operators (any number of them; the table
   below: each indexes its inputs by their own shape, so strides carry
   through to its implementation) or by Convs and ConvTransposes on oneDNN
   as their input X (OnOneDNN chose the library for them: it takes X at its
   own strides), or as the kernel of a correlation the library runs on its
   backward-weights primitive (a training program's weight gradient reads
   the input and dY with batch and channels swapped, which the library then
   reads as NCHW). A forward kernel's weights stay row-major: the library
   packs them from that layout.
2. Its input is row-major (an array or a contiguous View).
3. The output becomes a View of the input with permuted strides: readers
   index the input's memory through the permutation; nothing is copied.
A strided read is slower per element than a contiguous one, but it
replaces a full read-and-write pass over the tensor.
"""
from transforms.layout.views import (data_input, data_output, drop_node, make_view, owned_here,
                                     plain_array, row_major)
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.elementwise import ELEMENTWISE
from workbench.ops.conv_wgrad import is_correlation
from workbench.ops.node import OnnxOp
from workbench.ops.registry import make_call
from workbench.transformation_api import register


def foldable(sdfg, state, node) -> bool:
    src, dst = data_input(state, node), data_output(state, node)
    if src is None or dst is None or not plain_array(sdfg, src):
        return False
    if not owned_here(sdfg, state, dst) or state.in_degree(dst) != 1 or not state.out_degree(dst):
        return False
    return all(isinstance(e.dst, OnnxOp) and (e.dst.op_type in ELEMENTWISE
                                              or strided_reader(sdfg, state, e.dst, e.dst_conn))
               for e in state.out_edges(dst))


def strided_reader(sdfg, state, node, conn) -> bool:
    """A library call that reads input ``conn`` at any strides: a convolution's input, and
    the kernel of a correlation on the backward-weights primitive; a forward kernel's
    weights are packed from their row-major layout."""
    if node.op_type not in ("Conv", "ConvTranspose") or node.implementation != "onednn":
        return False
    if conn == node.onnx_inputs[0]:
        return True
    if node.op_type != "Conv" or conn != node.onnx_inputs[1]:
        return False
    call = make_call(node, state, sdfg)
    return is_correlation(call, call.input(1), call.output(0))


def permuted_strides(sdfg, node, src) -> tuple:
    """Output dim i walks input dim perm[i]."""
    shape = sdfg.arrays[src.data].shape
    perm = node.attrs.get("perm") or list(range(len(shape)))[::-1]
    rm = row_major(shape)
    return tuple(rm[p] for p in perm)


@register
class FoldTransposeIntoConsumer(OperatorTransformation):
    level = "layout"
    name = "FoldTransposeIntoConsumer"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = ("Let element-wise readers and library convolutions of a Transpose read its "
                   "input through strides (no copy)")
    op_types = {"Transpose"}
    refusal = "{node.onnx_name} can no longer be read in place"

    def plan(self, sdfg, state, node, weights=None):
        return foldable(sdfg, state, node)

    def describe(self, node, plan):
        return f"read {node.onnx_name}'s input through permuted strides"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        src, dst = data_input(state, node), data_output(state, node)
        strides = permuted_strides(sdfg, node, src)
        drop_node(sdfg, state, node, keep=(src, dst))
        make_view(sdfg, state, dst, src, strides=strides)
