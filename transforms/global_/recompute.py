"""RecomputeInBackward: compute a value again in the backward pass instead of keeping it.

A training program keeps every forward value its backward pass reads, from
its forward write to its backward read: across the turn from forward to
backward, where the step's memory peaks. Computed again from values the
backward pass keeps anyway, the value's buffer is free after its last
forward read. That costs bytes (the recomputation reads its inputs and
writes the value again) unless ElementwiseChainFusion then folds the
recomputation into the backward chain that reads it; each match says what it
saves in memory, the session predicts its bytes.

Rules:
1. Matches a forward operator P (``training_role``: not backward, loss or
   update) of a training program's main state whose one output X is a plain
   transient array written only by P, read directly by at least one backward
   operator, and read by ONNX operators only (their roles say which reads
   are forward ones).
2. The recomputation is P and, walking back, the producer of every input
   that is not *kept*: a graph input or weight nothing writes (a View of
   one too), or a transient written once that the program still uses at X's
   first backward reader B. An input of at most 1/16 of X's bytes (a
   BatchNorm's statistics) may stay live until B instead. Every operator
   recomputed is a forward, element-wise one (one pass, no reduction,
   deterministic) with one output, at most 8 of them; each array between
   them is plain and written once.
3. Each operator is copied under X's backward scope
   (``<scope>/backward/recompute/<Op>``), writing a new transient; B and X's
   other backward readers read the copy of X. The copies that read only
   kept values wait for a value B reads that the backward pass writes (an
   empty edge: DaCe's code generator and the unit builds run the state in a
   topological order), so they run just before B, not in the forward pass.
4. Offered only when the peak live bytes (``workbench.analysis.memory``, in
   the program's order) fall.
"""
import copy
from dataclasses import dataclass

import dace
from dace import data as dt
from dace.sdfg import nodes

from transforms.fusion import program as prog
from transforms.graph import state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench import nodeid
from workbench.analysis.memory import live_spans
from workbench.ops.node import OnnxOp
from workbench.training.naming import backward_scope, training_role
from workbench.transformation_api import Refusal, register

MAX_OPS = 8
SMALL = 16   # an input of at most 1/SMALL of X's bytes may live on until B
ANCHOR_DEPTH = 6   # how far past B to look for a backward value to wait on


def _mb(n: int) -> str:
    size = abs(n)
    text = f"{size / 1e6:.2f} MB" if size >= 1e5 else (f"{size / 1e3:.1f} kB" if size >= 1e3
                                                       else f"{size} B")
    return ("-" if n < 0 else "") + text


def _role(node) -> str:
    return training_role(node.onnx_name) if isinstance(node, OnnxOp) else ""


def _writers(state, name: str) -> list:
    return [e.src for a in state_accesses(state, name) for e in state.in_edges(a)]


def _readers(state, name: str) -> list:
    """(edge) out of every access node of ``name``, ordering edges aside."""
    return [e for a in state_accesses(state, name) for e in state.out_edges(a)
            if not e.data.is_empty()]


def _root(sdfg, state, access):
    """The array a View access node sees (through Views of Views), else the node."""
    while isinstance(sdfg.arrays[access.data], dt.View):
        edges = state.in_edges(access) or state.out_edges(access)
        if len(edges) != 1:
            return None
        edge = edges[0]
        access = edge.src if edge.dst is access else edge.dst
        if not isinstance(access, nodes.AccessNode):
            return None
    return access


@dataclass
class _Plan:
    x: object          # the access node of the value
    chain: list        # the operators recomputed, P first
    readers: list      # the edges of its backward reads
    anchor: object     # the backward value the copies wait for
    peak: int          # peak live bytes now, and after
    after: int
    # the copies, in the program's order: (operator, its ONNX name, label, output array),
    # named on the whole program (``decide``) so that a region rewrite names them alike
    copies: list = None


def _spans(sdfg, state):
    return nodeid.per_state(state, "live_spans", lambda: live_spans(sdfg))


def plan_recompute(sdfg, state, node):
    """A ``_Plan`` for recomputing ``node``'s output in the backward pass, a ``Refusal``,
    or None for an operator the transformation does not look at."""
    if sdfg.parent_nsdfg_node is not None or sdfg.number_of_nodes() != 1 \
            or _role(node) != "forward":
        return None
    outs = [e for e in state.out_edges(node) if not e.data.is_empty()]
    if len(outs) != 1 or not isinstance(outs[0].dst, nodes.AccessNode):
        return None
    x = outs[0].dst
    readers = _readers(state, x.data)
    backward = [e for e in readers if _role(e.dst) == "backward"]
    if not backward:
        return None
    if not prog.is_elementwise(node):
        return Refusal(f"{node.onnx_name} is not element-wise: only cheap operators are "
                       f"recomputed (a GEMM or a convolution costs more than keeping its output)")
    desc = sdfg.arrays[x.data]
    if not desc.transient or type(desc) is not dt.Array or len(_writers(state, x.data)) != 1:
        return Refusal(f"'{x.data}' is a graph output, a view or written more than once")
    if not all(isinstance(e.dst, OnnxOp) for e in readers):
        return Refusal(f"'{x.data}' is read by a node that is no ONNX operator (a map or a "
                       f"view): which of its reads are backward ones is not known")
    spans = _spans(sdfg, state)
    pos = spans.position
    first = min(backward, key=lambda e: pos[e.dst]).dst
    at = pos[first]
    size = spans.sizes.get(x.data, 0)
    chain, leaves, work = [node], [], [node]
    while work:
        op = work.pop()
        if not prog.is_elementwise(op) or _role(op) != "forward" or \
                len([e for e in state.out_edges(op) if not e.data.is_empty()]) != 1:
            return Refusal(f"recomputing '{x.data}' would take {op.onnx_name}, which is not a "
                           f"forward element-wise operator with one output")
        for e in state.in_edges(op):
            if e.data.is_empty():
                continue
            why = _leaf(sdfg, state, e.src, spans, at, size)
            if why is None:
                leaves.append(e.src)
                continue
            producers = _writers(state, e.src.data)
            desc_in = sdfg.arrays[e.src.data]
            if len(producers) != 1 or type(desc_in) is not dt.Array or not desc_in.transient \
                    or not isinstance(producers[0], OnnxOp):
                return Refusal(f"recomputing '{x.data}' needs '{e.src.data}', which {why}")
            if producers[0] not in chain:
                chain.append(producers[0])
                work.append(producers[0])
        if len(chain) > MAX_OPS:
            return Refusal(f"recomputing '{x.data}' would take more than {MAX_OPS} operators")
    anchor = _anchor(state, first, {e.dst for e in backward}, x.data, pos)
    if anchor is None:
        return Refusal(f"no value of the backward pass is read within {ANCHOR_DEPTH} operators "
                       f"after {first.onnx_name}, the first backward reader of '{x.data}': "
                       f"nothing to run the recomputation after")
    last_forward = max((pos[e.dst] for e in readers if _role(e.dst) != "backward"),
                       default=pos[x])
    last_backward = max(pos[e.dst] for e in backward)
    changed = {x.data: (spans.spans[x.data][0], last_forward)}
    for leaf in leaves:
        if leaf.data in spans.spans:
            lo, hi = spans.spans[leaf.data]
            changed[leaf.data] = (lo, max(hi, at))
    added = [(at, last_backward, size)] + [(at, at, spans.sizes.get(_out(state, op).data, 0))
                                           for op in chain[1:]]
    before, after = spans.peak(), spans.peak(changed, added)
    if after >= before:
        return Refusal(f"recomputing '{x.data}' would not lower the peak of live memory "
                       f"({_mb(before)}): the value is not live where it peaks")
    return _Plan(x, chain, backward, anchor, before, after)


def _anchor(state, first, readers: set, x_name: str, pos: dict):
    """An access node written in the backward pass that ``first`` or an operator reading
    its result (within ``ANCHOR_DEPTH``) reads, and whose writer depends on none of
    ``readers``, the backward readers the recomputed value will feed (an edge from it to
    the recomputation then makes no cycle: a later reader may lead to a writer that an
    operator after ``first`` reads). A backward operator
    that reads forward values only (``1 - s`` for a Sigmoid) runs in the forward pass
    under a topological order; reading the recomputed value, it moves with it."""
    level, seen = [first], {first}
    for _ in range(ANCHOR_DEPTH):
        for op in level:
            for e in state.in_edges(op):
                a = e.src
                if e.data.is_empty() or not isinstance(a, nodes.AccessNode) or a.data == x_name:
                    continue
                writers = [w.src for w in state.in_edges(a)]
                if any(_role(w) == "backward" for w in writers) and \
                        not any(_reaches(state, r, w, pos) for r in readers for w in writers):
                    return a
        level = [r.dst for op in level for o in state.out_edges(op) for r in state.out_edges(o.dst)
                 if isinstance(r.dst, OnnxOp) and r.dst not in seen]
        seen.update(level)
    return None


def _reaches(state, src, dst, pos: dict) -> bool:
    """Whether a path leads from ``src`` to ``dst`` (searched back from ``dst`` through
    nodes that come after ``src`` in the program's order)."""
    stack, seen = [dst], {dst}
    while stack:
        n = stack.pop()
        if n is src:
            return True
        for e in state.in_edges(n):
            if e.src not in seen and pos[e.src] >= pos[src]:
                seen.add(e.src)
                stack.append(e.src)
    return False


def _out(state, op):
    return next(e.dst for e in state.out_edges(op) if not e.data.is_empty())


def _leaf(sdfg, state, access, spans, at, size):
    """None when ``access`` may be read as it is at step ``at``, else why not."""
    root = _root(sdfg, state, access)
    if root is None:
        return "is seen through a view of several edges"
    desc = sdfg.arrays[root.data]
    if not desc.transient:
        return None if not _writers(state, root.data) else "is a graph output"
    if root is not access or len(_writers(state, root.data)) != 1:
        return "is a view of a transient or written more than once"
    _, hi = spans.spans.get(root.data, (0, -1))
    if hi >= at or spans.sizes.get(root.data, 0) * SMALL <= size:
        return None
    return "is not kept for the backward pass"


@register
class RecomputeInBackward(OperatorTransformation):
    level = "global"
    name = "RecomputeInBackward"
    description = ("Compute a forward value again in the backward pass instead of keeping it "
                   "(a training program's memory for bytes)")
    refusal = "{match.description}: no longer applies"

    region_rewrite = True   # decided on the whole program; the copies sit in its region

    def plan(self, sdfg, state, node, weights=None):
        return plan_recompute(sdfg, state, node)

    def decide(self, sdfg, match, weights=None):
        plan = super().decide(sdfg, match, weights)
        owner, state, _, _ = self._resolved(sdfg, match)
        plan.copies = _copies(owner, state, plan.chain)
        return plan

    def describe(self, node, plan):
        ops = len(plan.chain)
        return (f"recompute '{plan.x.data}' for the backward pass ({ops} operator"
                f"{'s' if ops > 1 else ''}): peak live memory {_mb(plan.after - plan.peak)} "
                f"({_mb(plan.peak)} -> {_mb(plan.after)})")

    def rewrite(self, sdfg, state, node, plan, weights=None):
        made = {}   # forward array -> access node of its copy
        for op, onnx_name, label, array in plan.copies or _copies(sdfg, state, plan.chain):
            out = next(e for e in state.out_edges(op) if not e.data.is_empty())
            add_twin(sdfg, state, op, (onnx_name, label),
                     [e for e in state.in_edges(op) if not e.data.is_empty()], [(out, array)],
                     made, plan.anchor)
        twin_x = made[plan.x.data]
        for e in plan.readers:
            memlet = copy.deepcopy(e.data)
            memlet.data = twin_x.data
            state.remove_edge(e)
            state.add_edge(twin_x, None, e.dst, e.dst_conn, memlet)
            if state.degree(e.src) == 0:
                state.remove_node(e.src)


def _copies(sdfg, state, chain) -> list:
    """``_Plan.copies`` for ``chain`` on the graph as it is: fresh ONNX names, labels and
    arrays, each taken before the next is chosen."""
    onnx_names = {n.onnx_name for n in state.nodes() if isinstance(n, OnnxOp)}
    labels = {n.label for n in state.nodes()}
    arrays = set(sdfg.arrays) | set(sdfg.symbols) | set(sdfg.constants_prop)
    out = []
    for op in sorted(chain, key=_spans(sdfg, state).position.get):
        base = f"{backward_scope(op.onnx_name)}/recompute/{op.onnx_name.rsplit('/', 1)[-1]}"
        name, k = base, 1
        while name in onnx_names:
            name, k = f"{base}_{k}", k + 1
        label = prog.unique_label_among(labels, name)
        written = next(e for e in state.out_edges(op) if not e.data.is_empty()).dst.data
        array = dt.find_new_name(f"{written}_recomputed", arrays)
        onnx_names.add(name)
        labels.add(label)
        arrays.add(array)
        out.append((op, name, label, array))
    return out


def add_twin(sdfg, state, op, names, ins, outs, made, anchor):
    """A copy of ``op`` named ``names`` (ONNX name, label) in the backward pass: it reads
    the copies already made (``made``: forward array -> access node of its copy) where
    there are any, else the forward arrays, after ``anchor``; it writes new arrays,
    ``outs`` being (edge of ``op``'s output, new array name) pairs, whose access nodes
    join ``made``. RecomputeInBackward and RecomputeBlock both copy this way."""
    twin = copy.deepcopy(op)
    twin.onnx_name, twin.label = names
    state.add_node(twin)
    reads_copies = False
    for e in ins:
        src = made.get(e.src.data, e.src)
        reads_copies |= src is not e.src
        memlet = copy.deepcopy(e.data)
        if src is not e.src:
            memlet.data = src.data
        state.add_edge(src, e.src_conn, twin, e.dst_conn, memlet)
    if not reads_copies:
        state.add_nedge(anchor, twin, dace.Memlet())
    for out, array in outs:
        name = sdfg.add_datadesc(array, copy.deepcopy(sdfg.arrays[out.dst.data]))
        made[out.dst.data] = state.add_access(name)
        memlet = copy.deepcopy(out.data)
        memlet.data = name
        state.add_edge(twin, out.src_conn, made[out.dst.data], out.dst_conn, memlet)
    return twin
