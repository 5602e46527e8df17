"""What changed between two points of a session's history (no Qt here).

``node_facts`` reads what makes each node of a described SDFG
(``graph_model.describe``) itself: its kind, op type, implementation,
attributes and connections. ``diff`` compares two readings by node identity
(``workbench.nodeid``: the same name in the same place): a node only the
second point has was added, one only the first has was removed, one both
have with other facts was changed (the reasons say which facts).

Bytes and times are the session's own per-operator figures
(``DataMovement.per_operator``, a profile's per-operator times): a node's
delta is its operator's, and every operator whose figure moved is listed
in ``GraphDiff.operator_bytes``, whose sum is the change in bytes moved.
"""
import hashlib
from dataclasses import dataclass, field

from dace.sdfg import nodes as dn

ADDED, REMOVED, CHANGED = "added", "removed", "changed"

# properties that name or place a node rather than say what it computes
_NOT_ATTRIBUTES = {"guid", "debuginfo", "label", "name", "location", "in_connectors",
                   "out_connectors", "onnx_name", "implementation", "op_type"}


@dataclass(frozen=True)
class NodeFacts:
    ident: str
    label: str                    # what the graph shows: title and subtitle
    operator: str = None          # key of its bytes and time (GNode.operator), None: none
    kind: str = ""
    op_type: str = ""
    implementation: str = ""
    attributes: str = ""          # a digest of its attributes
    inputs: frozenset = frozenset()    # (identity feeding it, its connector)
    outputs: frozenset = frozenset()   # (identity it feeds, its connector)


@dataclass
class NodeChange:
    ident: str
    status: str                   # added | removed | changed
    label: str
    operator: str = None
    reasons: tuple = ()           # changed: "op type", "implementation", "attributes", ...
    bytes_before: int = 0         # its operator's bytes moved at each point
    bytes_after: int = 0
    ms_before: float = None       # its operator's measured time (None: not profiled)
    ms_after: float = None

    @property
    def byte_delta(self) -> int:
        return self.bytes_after - self.bytes_before

    @property
    def ms_delta(self):
        if self.ms_before is None and self.ms_after is None:
            return None
        return (self.ms_after or 0.0) - (self.ms_before or 0.0)


@dataclass
class GraphDiff:
    changes: dict = field(default_factory=dict)    # identity -> NodeChange
    bytes_before: int = 0
    bytes_after: int = 0
    operator_bytes: dict = field(default_factory=dict)   # operator -> delta (non-zero only)
    ms_before: float = None       # whole-program time of each point's profile (None: none)
    ms_after: float = None

    @property
    def byte_delta(self) -> int:
        return self.bytes_after - self.bytes_before

    @property
    def ms_delta(self):
        if self.ms_before is None or self.ms_after is None:
            return None
        return self.ms_after - self.ms_before

    @property
    def timed(self) -> bool:
        """Both points were profiled: time deltas mean something."""
        return self.ms_before is not None and self.ms_after is not None

    def of(self, status: str) -> list:
        return [c for c in self.changes.values() if c.status == status]

    def counts(self) -> dict:
        return {s: len(self.of(s)) for s in (ADDED, REMOVED, CHANGED)}


def _text(value) -> str:
    """A property's value as text that two equal values share (code by its source,
    sets in order; never an object's address)."""
    if hasattr(value, "as_string"):
        return value.as_string
    if isinstance(value, (set, frozenset)):
        return str(sorted(map(str, value)))
    return str(value)


def attributes_text(node, sdfg) -> str:
    """A digest of what a node computes with, beyond its type and connections."""
    if isinstance(node, dn.AccessNode):
        desc = sdfg.arrays.get(node.data) if sdfg is not None else None
        parts = [] if desc is None else [str(desc.dtype), str(desc.shape), str(desc.strides),
                                         str(desc.storage), str(desc.transient)]
    else:
        owner = node.map if isinstance(node, (dn.MapEntry, dn.MapExit)) else node
        parts = [f"{p.attr_name}={_text(v)}" for p, v in owner.properties()
                 if p.attr_name not in _NOT_ATTRIBUTES]
    return hashlib.sha1("\n".join(sorted(parts)).encode()).hexdigest()[:16]


def node_facts(desc) -> dict:
    """Identity -> NodeFacts for every node of ``desc`` (a ``graph_model.GraphDesc``)."""
    ident = {k: n.ident for k, n in desc.nodes.items()}
    ins = {k: set() for k in desc.nodes}
    outs = {k: set() for k in desc.nodes}
    for e in desc.edges:
        if e.invisible or e.src not in ident or e.dst not in ident:
            continue
        edge = e.edge
        outs[e.src].add((ident[e.dst], getattr(edge, "src_conn", None) or ""))
        ins[e.dst].add((ident[e.src], getattr(edge, "dst_conn", None) or ""))
    out = {}
    for k, n in desc.nodes.items():
        node = n.node
        out[n.ident] = NodeFacts(
            n.ident, f"{n.title}  {n.subtitle}".strip(), n.operator, n.kind,
            getattr(node, "op_type", "") or (n.title if n.kind == "library" else ""),
            str(getattr(node, "implementation", "") or ""),
            attributes_text(node, n.sdfg) if node is not None else "",
            frozenset(ins[k]), frozenset(outs[k]))
    return out


def _reasons(a: NodeFacts, b: NodeFacts) -> tuple:
    found = []
    for name, attr in (("kind", "kind"), ("op type", "op_type"),
                       ("implementation", "implementation"), ("attributes", "attributes"),
                       ("inputs", "inputs"), ("outputs", "outputs")):
        if getattr(a, attr) != getattr(b, attr):
            found.append(name)
    return tuple(found)


def diff(before: dict, after: dict, bytes_before: dict = None, bytes_after: dict = None,
         ms_before: dict = None, ms_after: dict = None, total_bytes=(None, None),
         total_ms=(None, None)) -> GraphDiff:
    """Compare two ``node_facts`` readings.

    ``bytes_*``: operator -> bytes moved at each point (``per_operator``);
    ``ms_*``: operator -> measured ms (None: that point has no profile);
    ``total_bytes``/``total_ms``: the whole program's figures (bytes default
    to the per-operator sums)."""
    bytes_before, bytes_after = bytes_before or {}, bytes_after or {}
    result = GraphDiff(
        bytes_before=sum(bytes_before.values()) if total_bytes[0] is None else total_bytes[0],
        bytes_after=sum(bytes_after.values()) if total_bytes[1] is None else total_bytes[1],
        ms_before=total_ms[0], ms_after=total_ms[1])
    timed = ms_before is not None and ms_after is not None

    def change(ident, status, facts, reasons=()):
        op = facts.operator
        c = NodeChange(ident, status, facts.label, op, reasons,
                       bytes_before.get(op, 0) if op else 0, bytes_after.get(op, 0) if op else 0)
        if timed and op:
            c.ms_before, c.ms_after = ms_before.get(op), ms_after.get(op)
        result.changes[ident] = c

    for ident, facts in after.items():
        if ident not in before:
            change(ident, ADDED, facts)
        else:
            reasons = _reasons(before[ident], facts)
            if reasons:
                change(ident, CHANGED, facts, reasons)
    for ident, facts in before.items():
        if ident not in after:
            change(ident, REMOVED, facts)
    for op in set(bytes_before) | set(bytes_after):
        delta = bytes_after.get(op, 0) - bytes_before.get(op, 0)
        if delta:
            result.operator_bytes[op] = delta
    return result


def step_sdfg(ws, position: int):
    """The SDFG after step ``position``, to be read at once, without moving the session
    there (``Session.sdfg_at``: a copy when the live graph holds another step)."""
    return ws.sdfg_at(position)


def step_profile(ws, position: int):
    """The latest profile taken at ``position``, or None."""
    found = [p for p in ws.profiles if p.step == position]
    return found[-1] if found else None


def compare_steps(ws, a: int, b: int):
    """(description of step ``a``, of step ``b``, their GraphDiff) for session ``ws``.
    The caller holds the session's lock."""
    from gui.graph_model import describe
    from gui.profile_names import node_times
    from workbench.analysis.sizes import at_sizes
    if not (0 <= a < len(ws.timeline) and 0 <= b < len(ws.timeline)):
        raise ValueError(f"no such steps to compare: {a} and {b} (0..{len(ws.timeline) - 1})")
    names = dict(ws.operator_names())
    sdfgs, descs, moved, times, totals = [], [], [], [], []
    for position in (a, b):
        sdfg = step_sdfg(ws, position)
        step = ws.timeline[position]
        movement = step.movement if step.movement is not None else ws.data_movement(sdfg)
        prof = step_profile(ws, position)
        sdfgs.append(sdfg)
        with at_sizes(ws.symbols):   # a symbolic program's bytes, at the session's sizes
            descs.append(describe(sdfg, names))
        moved.append(movement)
        times.append(node_times(prof, sdfg, names)[0] if prof is not None and prof.per_kernel
                     else (dict(prof.per_operator) if prof is not None else None))
        totals.append(prof.total_ms if prof is not None else None)
    result = diff(node_facts(descs[0]), node_facts(descs[1]), moved[0].per_operator,
                  moved[1].per_operator, times[0], times[1],
                  (moved[0].moved_bytes, moved[1].moved_bytes), tuple(totals))
    return descs[0], descs[1], result
