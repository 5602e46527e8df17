"""RecomputeBlock: activation checkpointing, a whole block computed again in the backward pass.

RecomputeInBackward computes one cheap element-wise value again. A block (an
encoder layer, a residual block) keeps many values for the backward pass, its
GEMMs' and convolutions' inputs among them; keeping only what the block reads
from outside (its *checkpoint*) and running the block's forward operators
again just before the backward pass needs them frees every one of those
buffers after its last forward read, for the bytes and work of the copies.

Rules:
1. A block is a forward name scope (``/encoder/layer.0``): the forward operators
   (``training_role``) of a training program's one state whose ONNX name lies
   under it. Every scope with at least 2 of them is planned, nested scopes each
   on their own; the match names the block's first operator in the program's
   order and carries the scope as its option. A block none of whose values a
   backward operator reads is refused.
2. The targets are the block's values a backward operator reads directly: a
   plain transient written once, read only by ONNX operators (a graph output
   is resident anyway and stays as it is). The recomputation is, walking back
   from them, every block operator a target needs; each input that no block
   operator writes is a checkpoint value: a weight or input nothing writes (a
   View of one too) or a plain transient written once, kept until the copies
   run.
3. The block is refused when it holds a nondeterministic operator (Random*,
   Bernoulli, Multinomial: a copy would draw other numbers; the training
   program's Dropout multiplies by a mask the host draws, which is copied like
   any Mul), control flow, or a fused operator (apply before ``auto``); a
   copied operator must be a standard-domain forward ONNX operator writing no
   array it reads, without accumulating writes. A multi-output operator
   (LayerNormalization's mean and inverse deviation, a training-mode
   BatchNormalization's running statistics) is copied whole: each output goes
   to a fresh transient, and those no backward operator needs are read by
   nobody, so no state is written again.
4. Each copy is named ``<block>/backward/recompute/<path under the block>`` and
   writes fresh transients; the backward readers of a target read its copy.
   The copies that read only checkpoint values wait (an empty edge) for a
   gradient (a value a backward operator downstream of the loss writes) that a
   backward reader of a target, or an operator within ``ANCHOR_DEPTH`` after it,
   reads, written by nothing that depends on any backward reader of a target (no
   cycle): in the topological order DaCe's code generator runs, they come after
   the forward pass, when the backward pass reaches the block.
5. Offered only when the peak live bytes (``workbench.analysis.memory``) fall:
   each target's buffer then ends at its last forward read, its copy lives from
   the first backward reader to its last, the other copies for that one step,
   and checkpoint transients live on until it. The description gives the peak
   before and after and the bytes the copies read and write.
"""
import copy
from dataclasses import dataclass

from dace import data as dt
from dace.sdfg import nodes

from transforms.fusion import program as prog
from transforms.global_.recompute import (ANCHOR_DEPTH, _mb, _readers, _role, _root,
                                          _spans, _writers, add_twin)
from transforms.operator_transformation import OperatorTransformation
from workbench import nodeid
from workbench.analysis.memory import _bytes
from workbench.importer.control_flow_graphs import CONTROL_FLOW
from workbench.importer.fold import NON_DETERMINISTIC
from workbench.ops.node import OnnxOp
from workbench.training.naming import BACKWARD, forward_scope
from workbench.transformation_api import Refusal, register

MIN_OPS = 2


def _scopes(name: str) -> list:
    """``/a/b/Op`` -> ['/a', '/a/b']: the scopes an operator lies in, outermost first."""
    parts = forward_scope(name).split("/")[1:]
    return ["/" + "/".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _children(blocks: dict, scope: str) -> list:
    return [t for t in blocks if t.startswith(scope + "/") and "/" not in t[len(scope) + 1:]]


def _blocks(sdfg, state) -> dict:
    """scope -> its forward operators in the program's order."""
    def compute():
        out = {}
        position = _spans(sdfg, state).position
        ops = [n for n in state.nodes() if isinstance(n, OnnxOp) and _role(n) == "forward"]
        for op in sorted(ops, key=position.get):
            for scope in _scopes(str(op.onnx_name or "")):
                out.setdefault(scope, []).append(op)
        # a scope holding just what one scope inside it holds (``/layer1`` around
        # ``/layer1/layer1.0``) is the same block: the inner one is offered
        return {s: ops for s, ops in out.items()
                if not any(len(out[t]) == len(ops) for t in _children(out, s))}
    return nodeid.per_state(state, "recompute_blocks", compute)


def _outs(state, op) -> list:
    return [e for e in state.out_edges(op) if not e.data.is_empty()]


def _ins(state, op) -> list:
    return [e for e in state.in_edges(op) if not e.data.is_empty()]


@dataclass
class _Plan:
    scope: str
    ops: list          # the operators copied, in the program's order
    edges: list        # their data edges, in and out (the region a step copies holds them)
    targets: list      # the arrays the backward pass reads
    readers: list      # the edges of those backward reads
    anchor: object     # the backward value the copies wait for
    peak: int          # peak live bytes now, and after
    after: int
    moved: int         # bytes the copies read and write
    copies: list = None   # (operator, ONNX name, label, {forward array: its copy's name})


def _refused_op(op):
    """Why ``op`` makes its block unfit, or None."""
    if op.op_type in NON_DETERMINISTIC:
        return (f"{op.onnx_name} ({op.op_type}) draws random numbers: a copy in the "
                f"backward pass would draw others")
    if op.op_type in CONTROL_FLOW:
        return f"{op.onnx_name} is control flow ({op.op_type}): its bodies are not copied"
    if op.op_type == prog.FUSED:
        return (f"{op.onnx_name} is a fused operator: recompute a block before fusing "
                f"(before 'auto')")
    if op.domain not in ("", "ai.onnx"):
        return f"{op.onnx_name} is a {op.domain} operator, which is not known to be safe to copy"
    return None


def plan_block(sdfg, state, node, scope: str):
    """A ``_Plan`` for recomputing block ``scope`` (whose first operator is ``node``) in the
    backward pass, a ``Refusal``, or None where the match is not this node's."""
    if sdfg.parent_nsdfg_node is not None or sdfg.number_of_nodes() != 1 \
            or _role(node) != "forward" or scope not in _scopes(str(node.onnx_name or "")):
        return None
    block = _blocks(sdfg, state).get(scope, [])
    if len(block) < MIN_OPS or block[0] is not node:
        return None
    for op in block:
        why = _refused_op(op)
        if why:
            return Refusal(f"block {scope}: {why}")
    inside = set(block)
    targets, readers = [], []
    for op in block:
        for e in _outs(state, op):
            x = e.dst.data if isinstance(e.dst, nodes.AccessNode) else None
            reads = _readers(state, x) if x else []
            backward = [r for r in reads if _role(r.dst) == "backward"]
            if not backward or x in targets:
                continue
            desc = sdfg.arrays[x]
            if not desc.transient:
                continue   # resident for the whole call anyway
            if type(desc) is not dt.Array or len(_writers(state, x)) != 1:
                return Refusal(f"block {scope}: '{x}', which the backward pass reads, is a "
                               f"view or written more than once")
            if not all(isinstance(r.dst, OnnxOp) for r in reads):
                return Refusal(f"block {scope}: '{x}' is read by a node that is no ONNX "
                               f"operator: which of its reads are backward ones is not known")
            targets.append(x)
            readers.extend(backward)
    if not targets:
        return Refusal(f"block {scope}: the backward pass reads none of its values "
                       f"(nothing is kept for it that a recomputation could free)")
    needed, keep, work = [], set(), [w for x in targets for w in _writers(state, x)]
    while work:
        op = work.pop()
        if op in needed:
            continue
        needed.append(op)
        written = {e.dst.data for e in _outs(state, op) if isinstance(e.dst, nodes.AccessNode)}
        if any(e.data.wcr is not None for e in _outs(state, op)) or len(written) != len(
                _outs(state, op)):
            return Refusal(f"block {scope}: {op.onnx_name} accumulates into or writes its "
                           f"outputs other than once each: a copy is not known to be the same")
        for e in _ins(state, op):
            if not isinstance(e.src, nodes.AccessNode) or e.src.data in written:
                return Refusal(f"block {scope}: {op.onnx_name} reads a node that is no array, "
                               f"or an array it writes")
            name = e.src.data
            writers = _writers(state, name)
            if any(w in inside for w in writers):
                desc = sdfg.arrays[name]
                if len(writers) != 1 or type(desc) is not dt.Array or not desc.transient:
                    return Refusal(f"block {scope}: '{name}' is a view, a graph output or "
                                   f"written more than once inside the block")
                work.append(writers[0])
                continue
            why = _checkpoint(sdfg, state, e.src, inside)
            if why:
                return Refusal(f"block {scope}: its input '{name}' {why}")
            keep.add(_root(sdfg, state, e.src).data)
    spans = _spans(sdfg, state)
    pos = spans.position
    needed.sort(key=pos.get)
    first, anchor = _anchor(state, sorted({r.dst for r in readers}, key=pos.get),
                            set(targets))
    if anchor is None:
        return Refusal(f"block {scope}: no value of the backward pass is read within "
                       f"{ANCHOR_DEPTH} operators after a backward reader of its values (the "
                       f"first: {first.onnx_name}): nothing to run the recomputation after")
    at = max(pos[first], pos[anchor])   # readers that ran before (in the forward pass) wait now
    changed, added = {}, []
    for x in targets:
        reads = _readers(state, x)
        forward = [pos[r.dst] for r in reads if _role(r.dst) != "backward"]
        lo = spans.spans[x][0]
        changed[x] = (lo, max(forward, default=lo))
        added.append((at, max(pos[r.dst] for r in reads if _role(r.dst) == "backward"),
                      spans.sizes.get(x, 0)))
    for name in keep:
        if name in spans.spans:
            lo, hi = spans.spans[name]
            changed[name] = (lo, max(hi, at))
    for op in needed:
        for e in _outs(state, op):
            if e.dst.data not in targets:
                added.append((at, at, spans.sizes.get(e.dst.data, 0)))
    before, after = spans.peak(), spans.peak(changed, added)
    if after >= before:
        return Refusal(f"block {scope}: recomputing it would not lower the peak of live memory "
                       f"({_mb(before)}): its values are not live where the step peaks")
    moved = sum(_bytes(sdfg.arrays[e.src.data if e.dst is op else e.dst.data])
                for op in needed for e in _ins(state, op) + _outs(state, op))
    edges = [e for op in needed for e in _ins(state, op) + _outs(state, op)]
    return _Plan(scope, needed, edges, targets, readers, anchor, before, after, moved)


def _checkpoint(sdfg, state, access, inside):
    """None when the block may read ``access`` again in the backward pass, else why not."""
    root = _root(sdfg, state, access)
    if root is None:
        return "is seen through a view of several edges"
    desc = sdfg.arrays[root.data]
    writers = _writers(state, root.data)
    if not desc.transient:
        return None if not writers else "is a graph output or state the step writes"
    if root is not access:
        return "is a view of a transient"
    if len(writers) != 1 or type(desc) is not dt.Array:
        return "is written more than once"
    if any(w in inside for w in writers):
        return "is a view of a value the block computes"
    return None


def _anchor(state, readers: list, targets: set):
    """(reader, access node): an array a backward operator downstream of the loss writes
    (a gradient: a backward value computed from weights alone, a kernel turned around,
    is ready as the backward pass starts and would run the copies there) that a backward
    reader of a target, or an operator reading its results (within ``ANCHOR_DEPTH``),
    reads, whose writers depend on no such reader (an edge from it to the copies then
    closes no cycle); the readers are tried in the program's order. A reader that reads forward
    values only runs in the forward pass, until it reads a copy: it moves with the copies.
    (the first reader, None) when there is none."""
    after = _downstream(state, readers)
    graded = nodeid.per_state(state, "recompute_graded", lambda: _downstream(
        state, [n for n in state.nodes() if _role(n) == "loss"]))
    for first in readers:
        level, seen = [first], {first}
        for _ in range(ANCHOR_DEPTH):
            for op in level:
                for e in state.in_edges(op):
                    a = e.src
                    if e.data.is_empty() or not isinstance(a, nodes.AccessNode) \
                            or a in after or a.data in targets:
                        continue
                    writers = [w.src for w in state.in_edges(a)]
                    if any(_role(w) == "backward" and w in graded for w in writers) and \
                            not any(w in after for w in writers):
                        return first, a
            level = [r.dst for op in level for o in state.out_edges(op)
                     for r in state.out_edges(o.dst)
                     if isinstance(r.dst, OnnxOp) and r.dst not in seen]
            seen.update(level)
    return readers[0], None


def _downstream(state, start) -> set:
    """``start`` and every node a path leads to from it."""
    found, stack = set(start), list(start)
    while stack:
        n = stack.pop()
        for e in state.out_edges(n):
            if e.dst not in found:
                found.add(e.dst)
                stack.append(e.dst)
    return found


@register
class RecomputeBlock(OperatorTransformation):
    level = "global"
    name = "RecomputeBlock"
    description = ("Compute a whole block's values again in the backward pass from what it "
                   "reads (activation checkpointing: a training program's memory for work)")
    refusal = "{match.description}: no longer applies"
    option_names = ("scope",)

    region_rewrite = True   # decided on the whole program; the copies sit in its region

    def choices(self, node) -> list:
        return [{"scope": s} for s in _scopes(str(getattr(node, "onnx_name", "") or ""))]

    def plan(self, sdfg, state, node, weights=None, scope=None):
        return plan_block(sdfg, state, node, scope)

    def decide(self, sdfg, match, weights=None):
        plan = super().decide(sdfg, match, weights)
        owner, state, _, _ = self._resolved(sdfg, match)
        plan.copies = _copies(owner, state, plan)
        return plan

    def describe(self, node, plan):
        ops = len(plan.ops)
        return (f"recompute block {plan.scope} in the backward pass ({ops} operator"
                f"{'s' if ops > 1 else ''}, {len(plan.targets)} value"
                f"{'s' if len(plan.targets) > 1 else ''} no longer kept): peak live memory "
                f"{_mb(plan.after - plan.peak)} ({_mb(plan.peak)} -> {_mb(plan.after)}), "
                f"the copies move {_mb(plan.moved)} more")

    def rewrite(self, sdfg, state, node, plan, weights=None):
        made = {}   # forward array -> access node of its copy
        for op, onnx_name, label, arrays in plan.copies or _copies(sdfg, state, plan):
            add_twin(sdfg, state, op, (onnx_name, label), _ins(state, op),
                     [(out, arrays[out.dst.data]) for out in _outs(state, op)], made,
                     plan.anchor)
        for e in plan.readers:
            twin_x = made[e.src.data]
            memlet = copy.deepcopy(e.data)
            memlet.data = twin_x.data
            state.remove_edge(e)
            state.add_edge(twin_x, e.src_conn, e.dst, e.dst_conn, memlet)
            if state.degree(e.src) == 0:
                state.remove_node(e.src)


def _copies(sdfg, state, plan) -> list:
    """``_Plan.copies`` on the graph as it is: fresh ONNX names, labels and arrays."""
    onnx_names = {n.onnx_name for n in state.nodes() if isinstance(n, OnnxOp)}
    labels = {n.label for n in state.nodes()}
    arrays = set(sdfg.arrays) | set(sdfg.symbols) | set(sdfg.constants_prop)
    out = []
    for op in plan.ops:
        rest = str(op.onnx_name)[len(plan.scope) + 1:]
        base = f"{plan.scope}/{BACKWARD}/recompute/{rest}"
        name, k = base, 1
        while name in onnx_names:
            name, k = f"{base}_{k}", k + 1
        label = prog.unique_label_among(labels, name)
        fresh = {}
        for e in _outs(state, op):
            fresh[e.dst.data] = dt.find_new_name(f"{e.dst.data}_recomputed", arrays)
            arrays.add(fresh[e.dst.data])
        onnx_names.add(name)
        labels.add(label)
        out.append((op, name, label, fresh))
    return out
