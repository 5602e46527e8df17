"""ElementwiseChainFusion: a DAG of element-wise operators becomes one map.

BERT's GELU (Div, Erf, Add, Mul, Mul) with the bias Add before it, the
bias + residual Adds, and SiLU (Sigmoid, Mul) each write and re-read a full
tensor per operator; fused, every intermediate stays a local variable of one
tasklet and the chain reads its inputs and writes its outputs once.

Rules:
1. Members are element-wise operators (see ``program.py``: the table ops of
   ``elementwise.py``, Clip, Gelu, Mean, earlier fused nodes) of one float
   dtype, whose arrays are row-major; a View may have any strides (a
   transpose folded into its reader, a transposed weight gradient): the
   fused node's row kernel steps through each tensor where it lies
   (``simd.add_row_kernel``). An Array stored in another order
   (ChannelsLast) keeps its operator unfused.
2. A producer and an element-wise consumer of its output join one group
   when the consumer writes a tensor of the output's shape (a consumer that
   broadcasts it would recompute the producer per element).
3. A group must stay convex: no path leaves it and comes back (the fused
   node would then depend on itself).
4. A group of two or more operators becomes one ``FusedElementwise`` node.
   An array a member writes stays an output of it when it is a graph
   output, read in another state or read by a non-member; the other
   intermediates disappear, and members read each other's values as locals.
5. Comparisons, logic ops and Where join a group too (a training program's
   activation gradients: ``Where(Greater(x, 0), dY, 0)``), but only where
   every bool they read is written by a member and every bool they write is
   read by members alone: a mask then lives as a local of the group's one
   float type, and the fused node reads and writes floats only.
"""
import dace
from dace.sdfg import nodes
from dace.sdfg.utils import dfs_topological_sort

from transforms.fusion import program as prog
from transforms.graph import ident, node_text, shape_text
from transforms.layout.views import is_row_major
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.ops.node import OnnxOp
from workbench.transformation_api import Refusal, Transformation, register


def candidate(sdfg, state, node) -> bool:
    # a strided View (a transposed weight gradient) is read and written where it lies by
    # the row kernel (simd.add_row_kernel steps by its strides); an Array stored in
    # another order (ChannelsLast) is not: the fused op sees its connectors row-major
    return ((prog.is_elementwise(node) or prog.mask_expression(node) is not None)
            and prog.member_dtype(sdfg, state, node) is not None
            and not [a for a in strided_arrays(sdfg, state, node)
                     if not isinstance(sdfg.arrays[a], dace.data.View)])


def mask_leaks(sdfg, state, group) -> set:
    """Rule 5: the comparison, logic and Where members of ``group`` that read a bool from
    outside it or write one read outside it (all of them when the members' float types
    differ)."""
    group = set(group)
    masks = {n for n in group if prog.mask_expression(n) is not None}
    if not masks:
        return set()
    floats = {prog.member_dtype(sdfg, state, n) for n in group} - {dace.bool_}
    if len(floats) > 1:
        return masks
    leaks = set()
    for node in masks:
        for e in state.in_edges(node):
            if sdfg.arrays[e.src.data].dtype == dace.bool_ and not (
                    state.in_degree(e.src) == 1 and state.in_edges(e.src)[0].src in group):
                leaks.add(node)
        for e in state.out_edges(node):
            if (sdfg.arrays[e.dst.data].dtype == dace.bool_
                    and prog.exported(sdfg, state, e.dst, group)):
                leaks.add(node)
    return leaks


def strided_arrays(sdfg, state, node) -> list:
    """Arrays and Views ``node`` reads or writes that are not row-major."""
    touched = [e.src for e in state.in_edges(node)] + [e.dst for e in state.out_edges(node)]
    return sorted({a.data for a in touched if isinstance(a, nodes.AccessNode)
                   and isinstance(sdfg.arrays[a.data], dace.data.Array)
                   and not is_row_major(sdfg.arrays[a.data])})


def joins(sdfg, state, access, consumer, members) -> bool:
    """Rule 2 for ``consumer`` reading the array ``access`` holds."""
    return (consumer in members and state.in_degree(access) == 1
            and prog.output_shape(sdfg, state, consumer) == tuple(sdfg.arrays[access.data].shape))


def convex(state, group) -> bool:
    """Rule 3: no operator outside ``group`` is both reached from it and reaches it.

    The arrays members write are passed through: a member's output read by
    another member is no way out of the group.
    """
    frontier = [o.dst for n in group for e in state.out_edges(n)
                for o in state.out_edges(e.dst) if o.dst not in group]
    seen = set()
    while frontier:
        node = frontier.pop()
        if node in seen:
            continue
        seen.add(node)
        for e in state.out_edges(node):
            if e.dst in group:
                return False
            frontier.append(e.dst)
    return True


def groups(sdfg, state, left_out=frozenset()) -> list:
    """Maximal groups (rules 1-3 and 5), each in dataflow order."""
    order = list(dfs_topological_sort(state))
    members = {n for n in order if isinstance(n, OnnxOp) and n not in left_out
               and candidate(sdfg, state, n)}
    group = {n: frozenset([n]) for n in members}
    links = [(n, o.dst) for n in order if n in members for e in state.out_edges(n)
             for o in state.out_edges(e.dst) if joins(sdfg, state, e.dst, o.dst, members)]
    changed = True
    while changed:  # a merge refused as not convex may become convex after others
        changed = False
        for producer, consumer in links:
            merged = group[producer] | group[consumer]
            if merged != group[producer] and convex(state, merged):
                for n in merged:
                    group[n] = merged
                changed = True
    distinct = {g for g in group.values() if len(g) > 1}
    leaks = {n for g in distinct for n in mask_leaks(sdfg, state, g)}
    if leaks:   # group again without them: what they joined may hold without them
        return groups(sdfg, state, left_out | leaks)
    position = {n: k for k, n in enumerate(order)}
    return [sorted(g, key=position.get)
            for g in sorted(distinct, key=lambda g: min(position[n] for n in g))]


def _neighbours(state, node, members) -> set:
    """Members ``node`` reads from or is read by."""
    producers = {a.src for e in state.in_edges(node) for a in state.in_edges(e.src)}
    consumers = {o.dst for e in state.out_edges(node) for o in state.out_edges(e.dst)}
    return (producers | consumers) & members


def valid(sdfg, state, members) -> bool:
    """Rules 1-3 for a given list: one output shape, one writer of every array between
    members, connected through arrays members produce and read, convex."""
    if len(members) < 2 or not all(candidate(sdfg, state, n) for n in members):
        return False
    if len({prog.output_shape(sdfg, state, n) for n in members}) != 1:
        return False
    group = set(members)
    if any(state.in_degree(e.dst) != 1 for n in members for e in state.out_edges(n)
           if any(o.dst in group for o in state.out_edges(e.dst))):
        return False   # rule 2: an array between members has one writer
    reached, frontier = {members[0]}, [members[0]]
    while frontier:
        for n in _neighbours(state, frontier.pop(), set(members)) - reached:
            reached.add(n)
            frontier.append(n)
    return (len(reached) == len(members) and convex(state, set(members))
            and not mask_leaks(sdfg, state, members))


def _why_alone(sdfg, state, node) -> str:
    """Why ``node`` (element-wise) joins no group: the first rule its links break."""
    if prog.member_dtype(sdfg, state, node) is None:
        return f"{node.onnx_name}'s tensors are not all float32 or all float64"
    if mask_leaks(sdfg, state, {node} | _neighbours(state, node, {
            n for n in state.nodes() if isinstance(n, OnnxOp) and candidate(sdfg, state, n)})):
        return (f"{node.onnx_name} passes a bool to or from an operator outside any group: "
                f"a fused node reads and writes floats only")
    strided = strided_arrays(sdfg, state, node)
    if strided:
        return (f"{node.onnx_name} reads or writes '{strided[0]}' stored with strides "
                f"{tuple(sdfg.arrays[strided[0]].strides)}; a fused node takes row-major "
                f"arrays only")
    # (producer, the array between, consumer) around the node, element-wise or not
    links = [(a.src, e.src, node) for e in state.in_edges(node) for a in state.in_edges(e.src)]
    links += [(node, e.dst, o.dst) for e in state.out_edges(node) for o in state.out_edges(e.dst)]
    if not links:
        return f"{node.onnx_name} reads and writes no other operator's tensors"
    others = [p if c is node else c for p, _, c in links]
    fusable = [(p, a, c) for p, a, c in links
               if all(isinstance(n, OnnxOp) and candidate(sdfg, state, n) for n in (p, c))]
    if not fusable:
        names = sorted({node_text(n) for n in others})
        return (f"no element-wise operator of its dtype reads its output or writes its inputs "
                f"(next to {', '.join(names[:3])}{'...' if len(names) > 3 else ''})")
    for p, a, c in fusable:
        if state.in_degree(a) != 1:
            return f"'{a.data}' between {p.onnx_name} and {c.onnx_name} is written by " \
                   f"{state.in_degree(a)} nodes"
    for p, a, c in fusable:
        shape = prog.output_shape(sdfg, state, c)
        if shape != tuple(sdfg.arrays[a.data].shape):
            return (f"shapes differ: {c.onnx_name} writes {shape_text(shape)} from "
                    f"'{a.data}' {shape_text(sdfg.arrays[a.data].shape)} (it would recompute "
                    f"{p.onnx_name} per element)")
    return (f"fusing {node.onnx_name} with its element-wise neighbours would make a node that "
            f"depends on itself (a path leaves the group and comes back)")


@register
class ElementwiseChainFusion(Transformation):
    level = "fusion"
    name = "ElementwiseChainFusion"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Fuse a chain/DAG of element-wise operators into one map (no intermediates)"

    def find(self, sdfg):
        matches = []
        for state in sdfg.states():
            for members in groups(sdfg, state):
                where = {f"op{k}": ident(sdfg, state, n) for k, n in enumerate(members)}
                matches.append(self.match(where, f"fuse {prog.fused_name(members)} into one map"))
        return matches

    def refusals(self, sdfg, weights=None, nodes=None):
        """Why an element-wise operator is in no group (rules 1-3); operators that are
        not element-wise are no candidates and say nothing."""
        out = []
        for state in sdfg.states():
            ops = [n for n in state.nodes() if isinstance(n, OnnxOp)
                   and (prog.is_elementwise(n) or prog.mask_expression(n) is not None)
                   and (nodes is None or ident(sdfg, state, n) in nodes)]
            if not ops:
                continue
            grouped = {n for g in groups(sdfg, state) for n in g}
            for node in ops:
                if node not in grouped:
                    out.append(Refusal(_why_alone(sdfg, state, node), ident(sdfg, state, node),
                                       self.name))
        return out

    def apply(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        members = list(roles.values())
        if not valid(owner, state, members):
            raise TransformationError(f"{match.description}: the operators can no longer fuse")
        program = prog.compose(owner, state, members)
        name = prog.fused_name(program.order)
        node = OnnxOp(prog.unique_label(state, name), op_type=prog.FUSED, domain="workbench",
                      onnx_name=name, attrs={"code": program.code},
                      onnx_inputs=[c for c, _ in program.inputs],
                      onnx_outputs=[c for c, _ in program.outputs])
        prog.replace(owner, state, members, program, node)
