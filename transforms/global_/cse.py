"""CommonSubexpressionElimination: an operator computed twice is computed once.

Rules:
1. Matches two operators of the same type, domain, opset, implementation,
   attributes and recorded constants that read the very same access nodes
   at every input position and have the same outputs present; the first in
   the state is kept, the other is the duplicate. Random operators never
   match.
2. Every output array of both is a transient with one access node and one
   writer (so the kept value is not overwritten while the duplicate's
   readers still need it), used in the main state only.
3. The duplicate's readers read the kept operator's outputs instead; the
   duplicate and its output arrays go.
4. Ordering edges (empty memlets) count as inputs: a copy RecomputeInBackward
   made to run in the backward pass waits on a backward value; merged with
   the forward original it would undo that step.
Bytes saved: everything the duplicate read and wrote.
"""
from transforms.graph import access_nodes, ident, onnx_ops, rename_arrays
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.importer.fold import NON_DETERMINISTIC
from workbench.transformation_api import Transformation, register


def _key(state, node):
    inputs = {e.dst_conn: id(e.src) for e in state.in_edges(node) if not e.data.is_empty()}
    waits = sorted(id(e.src) for e in state.in_edges(node) if e.data.is_empty())
    return (node.op_type, node.domain, node.opset, node.implementation, node.attrs_json,
            node.consts_json, tuple(node.onnx_outputs),
            tuple(inputs.get(c) if c else None for c in node.onnx_inputs), tuple(waits))


def _single_value(sdfg, state, node) -> bool:
    for e in state.out_edges(node):
        found = access_nodes(sdfg, e.dst.data)
        if (not sdfg.arrays[e.dst.data].transient or len(found) != 1
                or found[0][0] is not state or state.in_degree(e.dst) != 1):
            return False
    return True


def pairs(sdfg):
    """(state, kept, duplicate) for every duplicate operator."""
    out, first = [], {}
    for state, node in onnx_ops(sdfg):
        if node.op_type in NON_DETERMINISTIC or not state.in_edges(node):
            continue
        if not _single_value(sdfg, state, node):
            continue
        key = (id(state), _key(state, node))
        if key in first:
            out.append((state, first[key], node))
        else:
            first[key] = node
    return out


@register
class CommonSubexpressionElimination(Transformation):
    level = "global"
    name = "CommonSubexpressionElimination"
    description = "Compute an operator that appears twice with the same inputs only once"

    def find(self, sdfg):
        return [self.match({"keep": ident(sdfg, state, keep), "drop": ident(sdfg, state, drop)},
                           f"{drop.onnx_name} repeats {keep.onnx_name}")
                for state, keep, drop in pairs(sdfg)]

    def apply(self, sdfg, match):
        _, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        keep, drop = roles["keep"], roles["drop"]
        if not any(k is keep and d is drop for _, k, d in pairs(sdfg)):
            raise TransformationError(f"{match.description} no longer holds")
        kept = {e.src_conn: e.dst for e in state.out_edges(keep)}
        for edge in list(state.out_edges(drop)):
            old, new = edge.dst, kept[edge.src_conn]
            for e in list(state.out_edges(old)):
                state.add_edge(new, e.src_conn, e.dst, e.dst_conn, e.data)
                state.remove_edge(e)
            state.remove_node(old)
            rename_arrays(sdfg, state, {old.data: new.data})
        state.remove_node(drop)
