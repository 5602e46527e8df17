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
from transforms.operator_transformation import OperatorTransformation
from workbench.transformation_api import register

RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def plan(sdfg, state, node):
    """'output' (rule 2), 'input' (rule 3) or None: which side becomes the View."""
    src, dst = data_input(state, node), data_output(state, node)
    if src is None or dst is None or len(state.out_edges(node)) != 1:
        return None
    if not plain_array(sdfg, src):
        return None
    if owned_here(sdfg, state, dst) and state.in_degree(dst) == 1:
        return "output"
    if (owned_here(sdfg, state, src) and state.out_degree(src) == 1
            and producer(state, src) is not None and state.in_degree(dst) == 1):
        return "input"
    return None


@register
class ReshapeAsView(OperatorTransformation):
    level = "layout"
    name = "ReshapeAsView"
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
