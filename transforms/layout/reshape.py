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
from transforms.graph import ident, onnx_ops
from transforms.layout.views import (data_input, data_output, drop_node, make_view,
                                     owned_here, plain_array, producer)
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.transform import Transformation, register

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
class ReshapeAsView(Transformation):
    level = "layout"
    name = "ReshapeAsView"
    description = "Make a Reshape/Flatten/Squeeze/Unsqueeze a view of its input (no copy)"

    def find(self, sdfg):
        return [self.match({"node": ident(sdfg, state, node)},
                           f"{node.onnx_name} as a view ({side} aliased)")
                for state, node in onnx_ops(sdfg, RESHAPES)
                for side in [plan(sdfg, state, node)] if side]

    def apply(self, sdfg, match):
        _, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles["node"]
        side = plan(sdfg, state, node)
        if side is None:
            raise TransformationError(f"{node.onnx_name} can no longer become a view")
        src, dst = data_input(state, node), data_output(state, node)
        drop_node(sdfg, state, node, keep=(src, dst))
        if side == "output":
            make_view(sdfg, state, dst, src)
        else:
            make_view(sdfg, state, src, dst)
