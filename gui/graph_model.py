"""What the graph view draws, read from an SDFG (no Qt here).

``describe`` walks the SDFG once and returns plain records: nodes with
their kind, label and stable identity (``workbench.nodeid``), memlet edges
with the bytes they move, and clusters (states, map scopes, expanded
nested SDFGs) that the layout keeps together. Nested SDFGs are collapsed
unless their identity is in ``expanded``. A symbolic program's shapes read with
the model's dim names (``[1, sequence, 64]``) and its bytes are counted at the
sizes set by ``workbench.analysis.sizes.at_sizes`` around ``describe``.
"""
from dataclasses import dataclass, field

import dace
from dace.sdfg import nodes as dn

from workbench import nodeid
from workbench.analysis.movement import operator_name
from workbench.analysis.sizes import number
from workbench.importer.symbolic import shape_text
from workbench.ops.node import OnnxOp

KINDS = ("access", "tasklet", "mapentry", "mapexit", "onnx", "library", "nsdfg", "group", "other")


@dataclass
class GNode:
    key: str
    ident: str
    kind: str
    title: str
    subtitle: str
    node: object
    state: object
    sdfg: object
    cluster: str = None
    operator: str = None        # the ONNX operator it belongs to, if any
    expanded: bool = False      # nested SDFGs only
    transient: bool = True      # access nodes: False for inputs, outputs, weights
    size: tuple = (60.0, 24.0)  # width, height in points (set by the view)
    # a folded name-scope group (kind "group", see gui.scope_groups) only:
    members: tuple = ()         # identities of the nodes it holds
    scope: tuple = None         # its scope path
    operators: frozenset = frozenset()   # ONNX operators of its members
    bytes: int = 0              # bytes moved by the memlets touching a member


@dataclass
class GEdge:
    key: str
    src: str
    dst: str
    label: str
    bytes: int = None           # bytes the memlet moves (access-node edges only)
    edge: object = None
    sdfg: object = None
    invisible: bool = False     # layout-only (orders states, nested content)


@dataclass
class GCluster:
    key: str
    kind: str                   # state | map | nsdfg
    label: str
    parent: str = None
    obj: object = None


@dataclass
class GraphDesc:
    nodes: dict = field(default_factory=dict)      # key -> GNode
    edges: list = field(default_factory=list)      # GEdge
    clusters: dict = field(default_factory=dict)   # key -> GCluster
    state_edges: list = field(default_factory=list)  # (cluster key, cluster key, label)
    by_ident: dict = field(default_factory=dict)   # identity -> node key
    hidden: dict = field(default_factory=dict)     # identity folded into a group -> its key

    def find(self, text: str) -> list:
        """Node keys whose title, subtitle or identity contains ``text``."""
        t = text.lower().strip()
        exact = [k for k, n in self.nodes.items() if t in (n.title.lower(), n.subtitle.lower())]
        return exact or [k for k, n in self.nodes.items()
                         if t in n.title.lower() or t in n.subtitle.lower() or t in n.ident.lower()]


def describe(sdfg: dace.SDFG, names: dict = None, expanded=frozenset()) -> GraphDesc:
    desc = GraphDesc()
    _describe_sdfg(desc, sdfg, names or {}, set(expanded), None)
    return desc


def _describe_sdfg(desc, sdfg, names, expanded, parent_cluster):
    described = {}   # state -> (cluster key, node keys)
    for state in sdfg.states():
        ckey = f"s{len(desc.clusters)}"
        desc.clusters[ckey] = GCluster(ckey, "state", f"state {state.label}", parent_cluster, state)
        described[state] = (ckey, _describe_state(desc, sdfg, state, names, expanded, ckey))
    try:
        transitions = [(e.src, e.dst, _interstate_label(e)) for e in sdfg.edges()]
    except Exception:
        transitions = []
    for src, dst, label in transitions:
        if src in described and dst in described:
            (a, a_keys), (b, b_keys) = described[src], described[dst]
            desc.state_edges.append((a, b, label))
            if a_keys and b_keys:   # keep the states in program order in the layout
                desc.edges.append(GEdge(f"e{len(desc.edges)}", a_keys[-1], b_keys[0], "",
                                        invisible=True))
    return [k for k in desc.nodes if desc.nodes[k].sdfg is sdfg]


def _describe_state(desc, sdfg, state, names, expanded, state_cluster):
    scopes = state.scope_dict()
    map_clusters = {}
    local = {}
    for node in state.nodes():
        if isinstance(node, dn.MapEntry):
            ckey = f"m{len(desc.clusters)}"
            map_clusters[node] = ckey
            desc.clusters[ckey] = GCluster(ckey, "map", node.map.label, None, node)
    for entry, ckey in map_clusters.items():
        outer = scopes.get(entry)
        desc.clusters[ckey].parent = map_clusters.get(outer, state_cluster)
    idents = nodeid.identities(sdfg, state)
    for node in state.nodes():
        key = f"n{len(desc.nodes)}"
        ident = idents[node]
        kind, title, subtitle = node_text(node, sdfg)
        if isinstance(node, dn.MapEntry):
            cluster = map_clusters[node]
        else:
            cluster = map_clusters.get(scopes.get(node), state_cluster)
        operator = None if isinstance(node, dn.AccessNode) else operator_name(node, names)
        gnode = GNode(key, ident, kind, title, subtitle, node, state, sdfg, cluster, operator)
        if isinstance(node, dn.AccessNode) and node.data in sdfg.arrays:
            gnode.transient = bool(sdfg.arrays[node.data].transient)
        desc.nodes[key] = gnode
        desc.by_ident[ident] = key
        local[node] = key
        if isinstance(node, dn.NestedSDFG) and ident in expanded:
            gnode.expanded = True
            ckey = f"c{len(desc.clusters)}"
            desc.clusters[ckey] = GCluster(ckey, "nsdfg", f"nested SDFG {node.label}", cluster,
                                           node)
            gnode.cluster = ckey
            inner = _describe_sdfg(desc, node.sdfg, names, expanded, ckey)
            if inner:
                desc.edges.append(GEdge(f"e{len(desc.edges)}", key, inner[0], "", invisible=True))
    for edge in state.edges():
        memlet = edge.data
        label = "" if memlet is None or memlet.is_empty() else str(memlet)
        desc.edges.append(GEdge(f"e{len(desc.edges)}", local[edge.src], local[edge.dst], label,
                                edge_bytes(edge, sdfg), edge, sdfg))
    return [local[n] for n in state.nodes()]


def node_text(node, sdfg):
    """(kind, title, subtitle) of a node as the graph shows it."""
    if isinstance(node, OnnxOp):
        return "onnx", node.op_type, node.onnx_name
    if isinstance(node, dn.AccessNode):
        desc = sdfg.arrays.get(node.data)
        shape = "" if desc is None else shape_text(desc.shape)
        return "access", node.data, shape
    if isinstance(node, dn.MapEntry):
        ranges = ", ".join(f"{p}={r}" for p, r in zip(node.map.params, _ranges(node.map)))
        return "mapentry", node.map.label, f"[{ranges}]"
    if isinstance(node, dn.MapExit):
        return "mapexit", node.map.label, ""
    if isinstance(node, dn.Tasklet):
        return "tasklet", node.label, ""
    if isinstance(node, dn.NestedSDFG):
        return "nsdfg", node.label, "nested SDFG"
    if isinstance(node, dn.LibraryNode):
        impl = getattr(node, "implementation", None)
        return "library", type(node).__name__, f"{node.label}" + (f" ({impl})" if impl else "")
    return "other", type(node).__name__, getattr(node, "label", "")


def _ranges(m):
    out = []
    for begin, end, step in m.range.ranges:
        text = f"{begin}:{end + 1}" if step == 1 else f"{begin}:{end + 1}:{step}"
        out.append(text)
    return out


def _interstate_label(edge) -> str:
    try:
        cond = edge.data.condition.as_string
        assign = ", ".join(f"{k}={v}" for k, v in edge.data.assignments.items())
        return "; ".join(t for t in (("" if cond in ("1", "True") else cond), assign) if t)
    except Exception:
        return ""


def edge_bytes(edge, sdfg):
    """Bytes a memlet moves when it touches an access node (else None); a symbolic
    size at the sizes ``at_sizes`` sets (None without them)."""
    memlet = edge.data
    if memlet is None or memlet.is_empty() or memlet.data not in sdfg.arrays:
        return None
    if not (isinstance(edge.src, dn.AccessNode) or isinstance(edge.dst, dn.AccessNode)):
        return None
    try:
        subset = memlet.subset if memlet.subset is not None else memlet.other_subset
        count = number(subset.num_elements())
        return count * sdfg.arrays[memlet.data].dtype.bytes
    except (TypeError, ValueError, AttributeError):
        return None  # symbolic inside a scope


def human_bytes(n) -> str:
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} GiB"
