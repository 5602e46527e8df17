"""ConcatInPlace: producers write straight into their slice of a Concat's output.

Rules:
1. Matches a Concat whose inputs are distinct, non-empty transient Arrays,
   each written by one operator and read only by the Concat, and whose
   output is row-major.
2. Each input becomes a View of its slice of the output (its producer
   writes the output's memory); the Concat and its copy go.
3. When every dimension before the axis has extent 1, each slice is one
   contiguous run and any producer can write it. Otherwise the slices are
   strided, and every producer must be element-wise (its implementation
   indexes its output by its own shape, so the strides carry through).
"""
import dace
from dace import subsets

from transforms.layout.views import (data_output, drop_node, make_view, owned_here,
                                     plain_array, producer, row_major)
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.elementwise import ELEMENTWISE
from workbench.transformation_api import register


def _pieces(sdfg, state, node):
    """[(input access node, start along the axis, extent)], axis, output; or None."""
    out = data_output(state, node)
    if out is None or not plain_array(sdfg, out) or state.in_degree(out) != 1:
        return None
    shape = sdfg.arrays[out.data].shape
    axis = node.attrs.get("axis", 0) % len(shape)
    by_conn = {e.dst_conn: e.src for e in state.in_edges(node)}
    pieces, at = [], 0
    for conn in node.onnx_inputs:
        src = by_conn.get(conn)
        if src is None:
            return None
        n = sdfg.arrays[src.data].shape[axis]
        pieces.append((src, at, n))
        at += n
    sources = [p[0] for p in pieces]
    if len({s.data for s in sources}) != len(sources) or any(n == 0 for _, _, n in pieces):
        return None
    contiguous = all(n == 1 for n in shape[:axis])
    for src in sources:
        writer = producer(state, src)
        if (writer is None or not owned_here(sdfg, state, src) or state.out_degree(src) != 1
                or not isinstance(sdfg.arrays[src.data], dace.data.Array)):
            return None
        if not contiguous and writer.op_type not in ELEMENTWISE:
            return None
    return pieces, axis, out


@register
class ConcatInPlace(OperatorTransformation):
    level = "layout"
    name = "ConcatInPlace"
    description = "Let a Concat's producers write into their slices of its output (no copy)"
    op_types = {"Concat"}
    refusal = "{node.onnx_name} can no longer be written in place"

    def plan(self, sdfg, state, node, weights=None):
        return _pieces(sdfg, state, node)

    def describe(self, node, plan):
        return f"{node.onnx_name}: producers write into the output"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        pieces, axis, out = plan
        shape = sdfg.arrays[out.data].shape
        drop_node(sdfg, state, node, keep=[p[0] for p in pieces] + [out])
        for src, at, n in pieces:
            ranges = [(0, s - 1, 1) for s in shape]
            ranges[axis] = (at, at + n - 1, 1)
            make_view(sdfg, state, src, out, subset=subsets.Range(ranges),
                      strides=row_major(shape))
