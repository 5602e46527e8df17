"""ReshapeAsView: a reshape aliases its input instead of copying it.

Rules:
1. Matches Reshape, Flatten, Squeeze, Unsqueeze and Identity whose data
   input is row-major (an array or a contiguous View): the same bytes in
   the same order, only the shape differs.
2. If the output is a transient written only here, it becomes a View of
   the input: its readers read the input's memory.
3. Else (the output is a graph output), if the input is a transient Array
   written by one operator and read only by the reshape, the input becomes
   a View of the output: its producer writes the output's memory.
4. Otherwise (say, a graph input reshaped straight into a graph output) the
   copy stays.
Shape-tensor inputs are disconnected; their access nodes go when nothing
else reads them.
"""
from transforms.layout.views import (data_input, data_output, drop_node, make_view,
                                     owned_here, plain_array, producer)
from dace.data import View

from transforms.operator_transformation import OperatorTransformation
from workbench.transformation_api import Refusal, register

RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def plan(sdfg, state, node):
    """'output' (rule 2), 'input' (rule 3) or a ``Refusal``: which side becomes the View."""
    src, dst = data_input(state, node), data_output(state, node)
    if src is None or dst is None or len(state.out_edges(node)) != 1:
        return Refusal(f"{node.onnx_name} lacks its data input or has several outputs")
    if not plain_array(sdfg, src):
        return Refusal(f"its input '{src.data}' is not row-major (channels-last or strided)")
    if owned_here(sdfg, state, dst) and state.in_degree(dst) == 1:
        return "output"
    if (owned_here(sdfg, state, src) and state.out_degree(src) == 1
            and producer(state, src) is not None and state.in_degree(dst) == 1):
        return "input"
    # rule 4: say what keeps each side from becoming the other's View
    return Refusal(f"neither side can alias the other: its output '{dst.data}' "
                   f"{_why_not_owned(sdfg, state, dst)}, and its input '{src.data}' "
                   f"{_why_not_owned(sdfg, state, src, reader=True)}")


def _why_not_owned(sdfg, state, access, reader=False) -> str:
    desc = sdfg.arrays[access.data]
    if not desc.transient:
        return "is a graph input or output" if not reader else "is a graph input or weight"
    if isinstance(desc, View):
        return "is already a view"
    if not owned_here(sdfg, state, access):
        return "is used elsewhere too"
    if reader and state.out_degree(access) != 1:
        return f"is read by {state.out_degree(access)} nodes"
    if reader and producer(state, access) is None:
        return "is not written by one operator"
    return f"is written by {state.in_degree(access)} nodes"


@register
class ReshapeAsView(OperatorTransformation):
    level = "layout"
    name = "ReshapeAsView"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Make a Reshape/Flatten/Squeeze/Unsqueeze a view of its input (no copy)"
    op_types = RESHAPES
    refusal = "{node.onnx_name} can no longer become a view"

    def plan(self, sdfg, state, node, weights=None):
        return plan(sdfg, state, node)

    def describe(self, node, side):
        return f"{node.onnx_name} as a view ({side} aliased)"

    def rewrite(self, sdfg, state, node, side, weights=None):
        src, dst = data_input(state, node), data_output(state, node)
        drop_node(sdfg, state, node, keep=(src, dst))
        if side == "output":
            make_view(sdfg, state, dst, src)
        else:
            make_view(sdfg, state, src, dst)
