"""SiblingGemmsAsOne: GEMMs that share an operand, as one GEMM over their other
operands laid side by side (a training program's Q/K/V weight gradients).

Y_i = op(A) @ B_i (i = 1..k) is one GEMM Y = op(A) @ [B_1 | ... | B_k] whose
column slices are the Y_i: A is read once instead of k times, and the one call
is k times as wide. "Data Movement Is All You Need" runs Q/K/V as one GEMM in
both directions; in a training program the weight gradients X^T dY_q,
X^T dY_k, X^T dY_v share X and become one GEMM here.

Rules:
1. Matches k >= 2 Gemms of one state that read one access node as A with the
   same transA, alpha and implementation, with transB = 0 and no C, whose B_i
   have one row count R and all tensors one dtype. The Gemm first by label
   names the match; the others are its partners.
2. B_i's memory is a transient Array (its root) written by one operator and
   reached from the Gemm through Views only. The root and every View of it
   split into R rows of N_i contiguous values, so each can be laid out at a
   row stride of N = sum N_i: a column slice of the new [R, N] array. The
   root's writer writes through those strides: a MatMulStrided (its output
   view is re-expressed, ``transforms/layout/strided.py``) or an element-wise
   operator (it indexes its output through the array's strides). Every other
   reader of the root or its Views is element-wise, a pure reduction, or a
   Gemm reading it as A or B (at a leading dimension): each indexes through
   strides too.
3. Each Y_i is a transient Array written only by its Gemm, it and its Views
   split into M rows of N_i values, and its readers are of those kinds; it
   becomes a View of its column slice of the [M, N] result. (UpdateInOnePass
   runs after this step in ``auto``: its MultiSweep reads a column slice row
   by row.)
4. No Y_i and no B_i reaches the writer of any B_j: the one GEMM, and every
   reader of the columns, waits for every B_j.
The bytes moved fall by (k - 1) reads of A; the slices' row stride is a
leading dimension to BLAS and a row loop's step to the element-wise readers.
"""
import copy
from dataclasses import dataclass

import dace
from dace import subsets
from dace.sdfg import nodes

from transforms.fusion import program as prog
from transforms.layout.strided import node_views, set_views, through
from transforms.layout.views import drop_array_if_unused, make_view, owned_here, producer
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.layout_ops import OP_TYPE as STRIDED
from workbench.ops.layout_ops import size_attr
from workbench.ops.node import OnnxOp
from workbench.ops.reduce import REDUCE_OPS
from workbench.ops.registry import is_row_major
from workbench.transformation_api import Refusal, register

NAME = "SiblingGemmsAsOne"


@dataclass
class Operand:
    """One Gemm's B or Y: the array it lies in and the Views of it, re-laid."""
    root: object          # the access node of the transient Array
    names: list           # the root's data and its Views' (re-laid at row stride N)
    width: int            # N_i


@dataclass
class Plan:
    gemms: list           # the Gemms, the named one first
    a: object             # the shared A access node
    bs: list              # Operand per Gemm (its B)
    ys: list              # Operand per Gemm (its Y)
    rows: int             # R
    cols: int             # M
    state: object


def row_strides(shape, width: int, ld: int):
    """Strides laying a row-major ``shape`` out as rows of ``width`` contiguous values,
    ``ld`` apart; None when its dims do not split into rows x ``width``."""
    try:
        shape = [int(n) for n in shape]
    except TypeError:
        return None
    strides, run, k = [0] * len(shape), 1, len(shape)
    while k > 0 and run < width:
        k -= 1
        strides[k], run = run, run * shape[k]
    if run != width:
        return None
    outer = ld
    while k > 0:
        k -= 1
        strides[k], outer = outer, outer * shape[k]
    return tuple(strides)


def _views_of(state, access) -> list:
    """Every View access node reading ``access``'s memory, transitively."""
    found, frontier = [], [access]
    while frontier:
        node = frontier.pop()
        for e in state.out_edges(node):
            if isinstance(e.dst, nodes.AccessNode) and e.dst_conn == "views":
                found.append(e.dst)
                frontier.append(e.dst)
    return found


def elementwise(node) -> bool:
    """An element-wise operator (a table op, a comparison, Where, a fused group): its
    implementation indexes every tensor by its shape, through the tensor's strides."""
    return isinstance(node, OnnxOp) and (prog.is_elementwise(node)
                                         or prog.mask_expression(node) is not None)


def reads_through_strides(node, conn: str) -> bool:
    """An operator whose implementation indexes input ``conn`` through its strides: a
    Gemm reads A and B at a leading dimension (a layer's input gradient, dY @ W^T,
    reads the dY its weight gradient reads)."""
    if elementwise(node):
        return True
    return isinstance(node, OnnxOp) and (
        (node.op_type in REDUCE_OPS and node.implementation in (None, "pure"))
        or (node.op_type == "Gemm" and node.implementation in (None, "pure", "blas")
            and conn in node.onnx_inputs[:2]))


def _operand(sdfg, state, access, width: int, gemm, writer_ok):
    """The Operand whose root ``access`` is or views (rules 2 and 3), else a reason."""
    root = access
    while isinstance(sdfg.arrays[root.data], dace.data.View):
        edges = [e for e in state.in_edges(root) if e.dst_conn == "views"]
        if len(edges) != 1 or state.in_degree(root) != 1:
            return f"'{access.data}' is not a View of one array read in place"
        root = edges[0].src
    if not owned_here(sdfg, state, root) or state.in_degree(root) != 1:
        return f"'{root.data}' is not a transient array written once, here"
    writer = producer(state, root)
    if writer is None or not writer_ok(writer):
        return f"'{root.data}' is written by an operator that cannot write strided columns"
    if writer.op_type == STRIDED and _strided_output(
            sdfg, state, writer, root, row_strides(sdfg.arrays[root.data].shape, width,
                                                   2 * width)) is None:
        return f"{writer.onnx_name} writes '{root.data}' through a view that cannot move"
    views = _views_of(state, root)
    for node in [root] + views:
        desc = sdfg.arrays[node.data]
        if not is_row_major(desc) or (node is not root and len(
                [n for s in sdfg.states() for n in s.nodes()
                 if isinstance(n, nodes.AccessNode) and n.data == node.data]) != 1):
            return f"'{node.data}' is not a row-major tensor of this state alone"
        if row_strides(desc.shape, width, width) is None:
            return (f"'{node.data}' {list(desc.shape)} does not split into rows of "
                    f"{width} values")
        for e in state.out_edges(node):
            if isinstance(e.dst, nodes.AccessNode):
                continue
            if (e.dst is not gemm and e.dst is not writer
                    and not reads_through_strides(e.dst, e.dst_conn)):
                return (f"'{node.data}' is read by {e.dst.label}, which does not read "
                        f"through strides")
            if e.dst is writer:
                return f"'{root.data}' is read by its own writer"
    return Operand(root, [n.data for n in [root] + views], width)


def _b_writer(node) -> bool:
    return node.op_type == STRIDED or elementwise(node)


def _sibling_key(sdfg, state, gemm):
    """What Gemms must share to run as one (rule 1), or None."""
    attrs = gemm.attrs
    if attrs.get("transB", 0) or len([c for c in gemm.onnx_inputs if c]) != 2:
        return None
    a = next((e.src for e in state.in_edges(gemm) if e.dst_conn == gemm.onnx_inputs[0]), None)
    if a is None:
        return None
    return (id(a), attrs.get("transA", 0), float(attrs.get("alpha", 1.0)), gemm.implementation,
            sdfg.arrays[a.data].dtype)


def _connected(state, gemm, conn):
    edges = [e for e in (state.in_edges(gemm) if conn in gemm.in_connectors
                         else state.out_edges(gemm)) if conn in (e.dst_conn, e.src_conn)]
    return (edges[0].src if conn in gemm.in_connectors else edges[0].dst) if edges else None


def _reaches(state, start: set, targets: set) -> bool:
    seen, frontier = set(), list(start)
    while frontier:
        node = frontier.pop()
        if node in targets:
            return True
        if node not in seen:
            seen.add(node)
            frontier.extend(state.successors(node))
    return False


def group_plan(sdfg, state, node):
    """The Plan of ``node``'s siblings (``node`` first), or a Refusal."""
    key = _sibling_key(sdfg, state, node)
    if key is None:
        return Refusal(f"{node.onnx_name} is not op(A) @ B without C or a transposed B")
    gemms = sorted((g for g in state.nodes() if isinstance(g, OnnxOp) and g.op_type == "Gemm"
                    and _sibling_key(sdfg, state, g) == key), key=lambda g: g.label)
    if len(gemms) < 2:
        return Refusal(f"no other Gemm reads {node.onnx_name}'s A the same way")
    a = _connected(state, node, node.onnx_inputs[0])
    bs, ys, rows = [], [], None
    for gemm in gemms:
        b = _connected(state, gemm, gemm.onnx_inputs[1])
        y = _connected(state, gemm, gemm.onnx_outputs[0])
        b_shape, y_shape = sdfg.arrays[b.data].shape, sdfg.arrays[y.data].shape
        if len(b_shape) != 2 or len(y_shape) != 2 or rows not in (None, b_shape[0]):
            return Refusal(f"the B operands of {prog.fused_name(gemms)} differ in row count")
        if sdfg.arrays[b.data].dtype != key[4] or sdfg.arrays[y.data].dtype != key[4]:
            return Refusal(f"{gemm.onnx_name} mixes dtypes")
        rows, cols = b_shape[0], y_shape[0]
        made = (_operand(sdfg, state, b, int(b_shape[1]), gemm, _b_writer),
                _operand(sdfg, state, y, int(y_shape[1]), None,
                         lambda w, g=gemm: w is g))
        for what, got in zip(("B", "Y"), made):
            if isinstance(got, str):
                return Refusal(f"{gemm.onnx_name}'s {what}: {got}")
        bs.append(made[0])
        ys.append(made[1])
    if len({b.root.data for b in bs} | {y.root.data for y in ys}) != 2 * len(gemms):
        return Refusal(f"the Gemms of {prog.fused_name(gemms)} share a B or Y array")
    writers = {producer(state, b.root) for b in bs}
    if _reaches(state, {y.root for y in ys}, writers):
        return Refusal(f"a result of {prog.fused_name(gemms)} feeds another one's B (rule 4)")
    if _reaches(state, {b.root for b in bs}, writers):
        return Refusal(f"one B of {prog.fused_name(gemms)} feeds the writer of another "
                       f"(rule 4): every reader of the columns waits for all of them")
    if gemms[0] is not node:
        return None   # the first Gemm's match names this one as a partner
    return Plan(gemms, a, bs, ys, int(rows), int(cols), state)


def _relay(sdfg, state, operand: Operand, whole, offset: int, ld: int, rows: int) -> None:
    """Make the operand's root a View of columns [offset, offset + width) of ``whole``
    and its Views and readers read those columns at row stride ``ld``.

    A written root becomes a write View with its writer's edge alone (DaCe reads a
    View of one in-edge and several out-edges as a read View): what read it reads
    ``whole``'s columns through Views of their own."""
    root = operand.root
    strides = {name: row_strides(sdfg.arrays[name].shape, operand.width, ld)
               for name in operand.names if name in sdfg.arrays}
    for name, laid in strides.items():
        if name != root.data:
            desc = sdfg.arrays[name]
            desc.strides = laid
            desc.total_size = 1 + sum((n - 1) * s for n, s in zip(desc.shape, laid))
    where = subsets.Range([(0, rows - 1, 1), (offset, offset + operand.width - 1, 1)])
    writer = producer(state, root)
    if writer is None:
        make_view(sdfg, state, root, whole, subset=where, strides=strides[root.data])
        return
    if writer.op_type == STRIDED:
        set_views(writer, {"y": _strided_output(sdfg, state, writer, root, strides[root.data])})
        writer.set_attrs({**writer.attrs,
                          "y_layout": [size_attr(n) for n in strides[root.data]]})
    shape, dtype = sdfg.arrays[root.data].shape, sdfg.arrays[root.data].dtype
    direct = None
    for e in list(state.out_edges(root)):
        state.remove_edge(e)
        if isinstance(e.dst, nodes.AccessNode) and e.dst_conn == "views":
            state.add_edge(whole, None, e.dst, "views", dace.Memlet(
                data=whole.data, subset=copy.deepcopy(where),
                other_subset=subsets.Range.from_array(sdfg.arrays[e.dst.data])))
            continue
        if direct is None:
            name, _ = sdfg.add_view(f"{root.data}_columns", shape, dtype,
                                    strides=strides[root.data], find_new_name=True)
            direct = state.add_access(name)
            state.add_edge(whole, None, direct, "views", dace.Memlet(
                data=whole.data, subset=copy.deepcopy(where),
                other_subset=subsets.Range.from_array(sdfg.arrays[name])))
        memlet = copy.deepcopy(e.data)
        memlet.data = direct.data
        state.add_edge(direct, e.src_conn, e.dst, e.dst_conn, memlet)
    make_view(sdfg, state, root, whole, subset=where, strides=strides[root.data])


def _strided_output(sdfg, state, writer, root, laid):
    """A MatMulStrided's output view over ``root`` re-expressed at strides ``laid``."""
    return through(node_views(sdfg, state, writer)["y"], sdfg.arrays[root.data].shape, laid)


def _drop_unread_views(sdfg, state, root) -> None:
    """Views of ``root`` nothing reads any more (the old Gemm's B), innermost first."""
    changed = True
    while changed:
        changed = False
        for view in _views_of(state, root):
            if state.out_degree(view) == 0:
                state.remove_node(view)
                drop_array_if_unused(sdfg, view.data)
                changed = True
                break


def merge(sdfg, state, plan: Plan) -> OnnxOp:
    """One Gemm over [B_1 | ... | B_k] writing [Y_1 | ... | Y_k]; the old ones go."""
    first = plan.gemms[0]
    total = sum(b.width for b in plan.bs)
    dtype = sdfg.arrays[plan.bs[0].root.data].dtype
    b_name, _ = sdfg.add_array(f"{first.label}_b_side_by_side", (plan.rows, total), dtype,
                               transient=True, find_new_name=True)
    y_name, _ = sdfg.add_array(f"{first.label}_y_side_by_side", (plan.cols, total), dtype,
                               transient=True, find_new_name=True)
    b_all, y_all = state.add_access(b_name), state.add_access(y_name)
    gemm = OnnxOp(prog.unique_label(state, f"{first.label}_side_by_side"), op_type="Gemm",
                  domain=first.domain, onnx_name=prog.fused_name(plan.gemms), opset=first.opset,
                  attrs=first.attrs,
                  onnx_inputs=list(first.onnx_inputs[:2]), onnx_outputs=list(first.onnx_outputs))
    gemm.implementation = first.implementation
    state.add_node(gemm)
    a_conn, b_conn = first.onnx_inputs[:2]
    state.add_edge(plan.a, None, gemm, a_conn,
                   dace.Memlet.from_array(plan.a.data, sdfg.arrays[plan.a.data]))
    state.add_edge(b_all, None, gemm, b_conn, dace.Memlet.from_array(b_name, sdfg.arrays[b_name]))
    state.add_edge(gemm, first.onnx_outputs[0], y_all, None,
                   dace.Memlet.from_array(y_name, sdfg.arrays[y_name]))
    for old in plan.gemms:
        state.remove_node(old)
    offset = 0
    for b, y in zip(plan.bs, plan.ys):
        _drop_unread_views(sdfg, state, b.root)
        _relay(sdfg, state, b, b_all, offset, total, plan.rows)
        _relay(sdfg, state, y, y_all, offset, total, plan.cols)
        offset += b.width
    return gemm


@register
class SiblingGemmsAsOne(OperatorTransformation):
    level = "fusion"
    name = NAME
    symbolic = False   # static row widths: a training program is built at one size
    description = ("Run GEMMs that share an operand as one GEMM over their other operands "
                   "laid side by side (Q/K/V weight gradients)")
    op_types = {"Gemm"}
    refusal = "{node.onnx_name} no longer runs as one GEMM with its siblings"

    def plan(self, sdfg, state, node, weights=None):
        return group_plan(sdfg, state, node)

    def describe(self, node, plan):
        widths = "+".join(str(b.width) for b in plan.bs)
        return (f"run {prog.fused_name(plan.gemms)} as one GEMM ({plan.cols}x{widths} from "
                f"one read of A)")

    def roles(self, node, plan):
        """The Gemms, and the operators next to the arrays re-laid (B's writers, Y's
        readers), so that a step's region holds every array whose layout changes."""
        roles = {"node": node, **{f"gemm{k}": g for k, g in enumerate(plan.gemms[1:], 1)}}
        state = plan.state
        near = [producer(state, b.root) for b in plan.bs]
        near += [e.dst for y in plan.ys for e in state.out_edges(y.root)
                 if not isinstance(e.dst, nodes.AccessNode)]
        for k, other in enumerate(dict.fromkeys(near)):
            roles[f"near{k}"] = other
        return roles

    def rewrite(self, sdfg, state, node, plan, weights=None):
        merge(sdfg, state, plan)
