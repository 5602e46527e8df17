"""InPlaceElementwise: an element-wise operator writes over an input it consumes last.

Rules:
1. Matches an element-wise operator (``workbench.ops.elementwise``: one
   map over the output, each input read at the output's index or
   broadcast) with its ``pure`` implementation.
2. Its output is a transient array (not a view: a Concat's producer writing
   into its slice through one must keep doing so) written only by it, in
   the main state only.
3. One input X has the output's shape and element type, is a transient
   array (not a view) used in this state only, feeds this operator once
   (not ``x * x``) and nothing else through this access node, and every
   other node that reads or writes X comes before the operator.
4. The output array is renamed to X: the operator reads X[i] and writes
   X[i] in the same iteration, so no value is lost; the output array goes.
The first input that qualifies is chosen. Bytes moved stay the same; the
program needs one buffer less, and the write lands on cache lines it just
read instead of allocating fresh ones.
"""
from dace import data as dt

from transforms.global_.lifetimes import other_uses
from transforms.graph import (access_nodes, dataflow_steps, rename_arrays, shape_text,
                              step_ancestors, step_bits)
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.elementwise import ELEMENTWISE
from workbench.transformation_api import Refusal, register


def _only_here(sdfg, state, data) -> bool:
    return all(s is state for s, _ in access_nodes(sdfg, data))


def overwritable_input(sdfg, state, node):
    """The access node of the input ``node`` may write over, or a ``Refusal`` (None
    for an operator it does not look at)."""
    if node.op_type not in ELEMENTWISE or node.domain:
        return None
    if node.implementation != "pure":
        return Refusal(f"{node.onnx_name} runs its {node.implementation} implementation, "
                       f"not the pure map")
    outs = state.out_edges(node)
    if len(outs) != 1:
        return Refusal(f"{node.onnx_name} writes {len(outs)} outputs")
    y = outs[0].dst
    y_desc = sdfg.arrays[y.data]
    if not y_desc.transient:
        return Refusal(f"its output '{y.data}' is a graph output")
    if (type(y_desc) is not dt.Array or not _only_here(sdfg, state, y.data)
            or len(access_nodes(sdfg, y.data)) != 1 or state.in_degree(y) != 1):
        return Refusal(f"its output '{y.data}' is a view, or written or read elsewhere too")
    graph, step = dataflow_steps(state)
    earlier = None
    why = []   # per input, why it cannot be written over
    for conn in node.onnx_inputs:
        edge = next((e for e in state.in_edges(node) if conn and e.dst_conn == conn), None)
        if edge is None:
            continue
        x = edge.src
        desc = sdfg.arrays[x.data]
        if not desc.transient:
            why.append(f"'{x.data}' is a graph input or weight")
            continue
        if tuple(desc.shape) != tuple(y_desc.shape) or desc.dtype != y_desc.dtype:
            why.append(f"'{x.data}' is {shape_text(desc.shape)} {desc.dtype.to_string()}, the "
                       f"output {shape_text(y_desc.shape)} {y_desc.dtype.to_string()}")
            continue
        if state.out_degree(x) != 1:
            why.append(f"'{x.data}' is read by {state.out_degree(x)} nodes")
            continue
        if type(desc) is not dt.Array or not _only_here(sdfg, state, x.data):
            why.append(f"'{x.data}' is a view or used in another state")
            continue
        if earlier is None:
            before, order = step_ancestors(state)
            earlier = before[step(node)]
        # Through every other access node of X and every View of X (a reader of a
        # View reads X's memory): lifetimes.other_uses; None when not exact.
        users = other_uses(sdfg, state, x.data, x, (graph, step))
        if users is not None and step_bits(order, users) & ~earlier == 0:
            return x
        why.append(f"'{x.data}' is used again after {node.onnx_name}" if users is not None
                   else f"the order of the other uses of '{x.data}' is not fixed yet")
    return Refusal("no input it could write over: " + "; ".join(why) if why
                   else f"{node.onnx_name} reads no tensor")


@register
class InPlaceElementwise(OperatorTransformation):
    level = "global"
    name = "InPlaceElementwise"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Let an element-wise operator write its result over an input it reads last"
    op_types = ELEMENTWISE
    refusal = "{node.onnx_name} can no longer work in place"
    region_rewrite = True   # the rename touches the operator, X and Y's access nodes

    def plan(self, sdfg, state, node, weights=None):
        """The input access node it writes over."""
        return overwritable_input(sdfg, state, node)

    def describe(self, node, x):
        return f"{node.onnx_name} writes over {x.data}"

    def rewrite(self, sdfg, state, node, x, weights=None):
        rename_arrays(sdfg, state, {state.out_edges(node)[0].dst.data: x.data})
