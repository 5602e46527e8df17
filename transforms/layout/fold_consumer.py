"""FoldTransposeIntoConsumer: element-wise readers and library convolutions read a
transpose's input in place.

Rules:
1. Matches a Transpose whose output is a transient written only there and
   read only by element-wise operators (any number of them; the table
   below: each indexes its inputs by their own shape, so strides carry
   through to its implementation) or by Convs and ConvTransposes on oneDNN
   (OnOneDNN chose the library for them: it takes every operand at its own
   strides; a training program's weight gradient reads the input and dY
   with batch and channels swapped, which the library then reads as NCHW).
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
from workbench.ops.node import OnnxOp
from workbench.transformation_api import register


def foldable(sdfg, state, node) -> bool:
    src, dst = data_input(state, node), data_output(state, node)
    if src is None or dst is None or not plain_array(sdfg, src):
        return False
    if not owned_here(sdfg, state, dst) or state.in_degree(dst) != 1 or not state.out_degree(dst):
        return False
    return all(isinstance(e.dst, OnnxOp) and (e.dst.op_type in ELEMENTWISE or strided_reader(e.dst))
               for e in state.out_edges(dst))


def strided_reader(node) -> bool:
    """A library call that reads its operands at any strides."""
    return node.op_type in ("Conv", "ConvTranspose") and node.implementation == "onednn"


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
