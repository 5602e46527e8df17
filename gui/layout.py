"""Placing a ``GraphDesc``: Graphviz ``dot -Tjson``, else grandalf, else a simple layering.

Runs in a worker (no Qt). Coordinates are points with y growing downwards.
The result maps node keys to centres, edge keys to polylines/Bezier
control points, and cluster keys to rectangles.
"""
import json
import os
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field

DPI = 72.0
# Above this many nodes dot lays out without memlet labels and with cheaper
# crossing minimization: 4,400 nodes took 31 s with full effort, 11 s so.
LARGE_GRAPH = 1000


@dataclass
class Placement:
    nodes: dict = field(default_factory=dict)      # key -> (cx, cy)
    edges: dict = field(default_factory=dict)      # key -> (points, bezier: bool, label (x, y))
    clusters: dict = field(default_factory=dict)   # key -> (x, y, w, h)
    method: str = ""
    labels: bool = True        # memlet labels have places (False: laid out without them)
    hidden_labels: set = field(default_factory=set)   # edge keys whose label would overlap


def layout(desc, labels: bool = True, method: str = None) -> Placement:
    """Lay out ``desc`` with ``method`` (dot, grandalf, layered) or the best available.

    ``$WORKBENCH_GUI_LAYOUT`` picks the method when none is given (to try a fallback).
    """
    method = method or os.environ.get("WORKBENCH_GUI_LAYOUT") or None
    large = len(desc.nodes) > LARGE_GRAPH
    if method in (None, "dot") and shutil.which("dot"):
        try:
            place = dot_layout(desc, labels and not large, fast=large)
            place.labels = labels and not large
            return place
        except (OSError, ValueError, subprocess.SubprocessError, KeyError):
            if method == "dot":
                raise
    if method in (None, "grandalf"):
        try:
            return grandalf_layout(desc)
        except ImportError:
            if method == "grandalf":
                raise
    return layered_layout(desc)


# -- Graphviz ---------------------------------------------------------------
def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(desc, labels: bool = True) -> str:
    children = defaultdict(list)
    members = defaultdict(list)
    for key, c in desc.clusters.items():
        children[c.parent].append(key)
    for key, n in desc.nodes.items():
        members[n.cluster].append(key)
    out = ['digraph G {', ' graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname="DejaVu Sans",'
           ' fontsize=9, margin=0];', ' node [shape=box, fixedsize=true, label=""];',
           ' edge [fontname="DejaVu Sans", fontsize=7];']

    def emit(ckey, indent):
        pad = " " * indent
        for nkey in members[ckey]:
            w, h = desc.nodes[nkey].size
            out.append(f"{pad}{nkey} [width={w / DPI:.3f}, height={h / DPI:.3f}];")
        for sub in children[ckey]:
            c = desc.clusters[sub]
            label = _q(c.label) if c.kind != "map" else '""'
            out.append(f"{pad}subgraph cluster_{sub} {{ label={label}; labeljust=l; margin=10;")
            emit(sub, indent + 1)
            out.append(f"{pad}}}")
    emit(None, 1)
    for e in desc.edges:
        attrs = [f"id={e.key}"]
        if e.invisible:
            attrs.append("style=invis")
        elif labels and e.label:
            attrs.append(f"label={_q(e.label)}")
        out.append(f" {e.src} -> {e.dst} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out)


def dot_layout(desc, labels: bool = True, timeout: float = 300, fast: bool = False) -> Placement:
    effort = ["-Gnslimit=2", "-Gmclimit=0.5"] if fast else []
    proc = subprocess.run(["dot", "-Tjson", *effort], input=to_dot(desc, labels),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ValueError(f"dot failed: {proc.stderr.strip()[:300]}")
    data = json.loads(proc.stdout)
    height = _floats(data["bb"])[3]
    flip = lambda x, y: (x, height - y)  # noqa: E731
    place = Placement(method="dot")
    for obj in data.get("objects", []):
        name = obj.get("name", "")
        if name.startswith("cluster_") and "bb" in obj:
            x1, y1, x2, y2 = _floats(obj["bb"])
            place.clusters[name[len("cluster_"):]] = (x1, height - y2, x2 - x1, y2 - y1)
        elif "pos" in obj and name in desc.nodes:
            place.nodes[name] = flip(*_floats(obj["pos"]))
    for edge in data.get("edges", []):
        key = edge.get("id")
        if key is None or "pos" not in edge:
            continue
        points, end, start = [], None, None
        for token in edge["pos"].split():
            if token.startswith("e,"):
                end = flip(*_floats(token[2:]))
            elif token.startswith("s,"):
                start = flip(*_floats(token[2:]))
            else:
                points.append(flip(*_floats(token)))
        if start is not None:
            points.insert(0, start)
        if end is not None:
            points.append(end)
        label = flip(*_floats(edge["lp"])) if "lp" in edge else None
        place.edges[key] = (points, end is not None, label)
    return place


def _floats(text: str):
    return tuple(float(v) for v in text.split(","))


# -- fallbacks --------------------------------------------------------------
def grandalf_layout(desc) -> Placement:
    from grandalf.graphs import Edge, Graph, Vertex
    from grandalf.layouts import SugiyamaLayout

    class View:
        def __init__(self, w, h):
            self.w, self.h, self.xy = w, h, (0.0, 0.0)

    vertices = {}
    for key, n in desc.nodes.items():
        v = Vertex(key)
        v.view = View(n.size[0] + 20, n.size[1] + 20)
        vertices[key] = v
    edges = [Edge(vertices[e.src], vertices[e.dst]) for e in desc.edges if e.src != e.dst]
    graph = Graph(list(vertices.values()), edges)
    place = Placement(method="grandalf")
    offset = 0.0
    for component in graph.C:
        sug = SugiyamaLayout(component)
        sug.init_all(optimize=True)
        sug.draw()
        xs = [v.view.xy[0] - v.view.w / 2 for v in component.sV]
        shift = offset - min(xs)
        for v in component.sV:
            place.nodes[v.data] = (v.view.xy[0] + shift, v.view.xy[1])
        offset = max(place.nodes[v.data][0] + v.view.w / 2 for v in component.sV) + 30
    _separate_rows(desc, place)
    _straight_edges(desc, place)
    _cluster_boxes(desc, place)
    return place


def layered_layout(desc) -> Placement:
    """Longest-path layers, barycentre order: enough to read a graph without dot."""
    succ, pred = defaultdict(list), defaultdict(list)
    for e in desc.edges:
        if e.src != e.dst:
            succ[e.src].append(e.dst)
            pred[e.dst].append(e.src)
    layer, order = {}, list(desc.nodes)
    for _ in range(len(order)):          # relax: layer = 1 + max(pred layers), cycle-safe
        changed = False
        for k in order:
            new = max((layer.get(p, 0) + 1 for p in pred[k]), default=0)
            if layer.get(k) != new and new < len(order):
                layer[k], changed = new, True
        if not changed:
            break
    for k in order:   # inputs and weights right above their first reader, not all on top
        if not pred[k] and succ[k]:
            layer[k] = max(0, min(layer.get(s, 1) for s in succ[k]) - 1)
    rows = defaultdict(list)
    for k in order:
        rows[layer.get(k, 0)].append(k)
    pos = {}
    y = 20.0
    for depth in sorted(rows):
        row = rows[depth]
        row.sort(key=lambda k: sum(pos[p][0] for p in pred[k] if p in pos) / max(1, len(
            [p for p in pred[k] if p in pos])) if pred[k] else 0.0)
        x = 20.0
        tallest = max(desc.nodes[k].size[1] for k in row)
        for k in row:
            w = desc.nodes[k].size[0]
            pos[k] = (x + w / 2, y + tallest / 2)
            x += w + 30
        y += tallest + 50
    place = Placement(nodes=pos, method="layered")
    _straight_edges(desc, place)
    _cluster_boxes(desc, place)
    return place


def _separate_rows(desc, place, gap: float = 20.0):
    """Push apart nodes of one row that overlap (grandalf's alignment can stack them)."""
    rows = defaultdict(list)
    for key, (x, y) in place.nodes.items():
        rows[round(y)].append(key)
    for keys in rows.values():
        keys.sort(key=lambda k: place.nodes[k][0])
        for a, b in zip(keys, keys[1:]):
            (xa, _), (xb, yb) = place.nodes[a], place.nodes[b]
            least = xa + (desc.nodes[a].size[0] + desc.nodes[b].size[0]) / 2 + gap
            if xb < least:
                place.nodes[b] = (least, yb)


def _straight_edges(desc, place):
    for e in desc.edges:
        if e.invisible or e.src not in place.nodes or e.dst not in place.nodes:
            continue
        (x1, y1), (x2, y2) = place.nodes[e.src], place.nodes[e.dst]
        h1, h2 = desc.nodes[e.src].size[1] / 2, desc.nodes[e.dst].size[1] / 2
        a, b = (x1, y1 + h1), (x2, y2 - h2)
        place.edges[e.key] = ([a, b], False, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2))


def _cluster_boxes(desc, place, margin: float = 10.0):
    """Cluster rectangles from their members (innermost first)."""
    depth = {}
    for key in desc.clusters:
        d, c = 0, desc.clusters[key]
        while c.parent is not None:
            d, c = d + 1, desc.clusters[c.parent]
        depth[key] = d
    for key in sorted(desc.clusters, key=lambda k: -depth[k]):
        boxes = []
        for nkey, n in desc.nodes.items():
            if n.cluster == key and nkey in place.nodes:
                (cx, cy), (w, h) = place.nodes[nkey], n.size
                boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        for sub, c in desc.clusters.items():
            if c.parent == key and sub in place.clusters:
                x, y, w, h = place.clusters[sub]
                boxes.append((x, y, x + w, y + h))
        if boxes:
            top = 16.0 if desc.clusters[key].kind != "map" else 0.0
            x1 = min(b[0] for b in boxes) - margin
            y1 = min(b[1] for b in boxes) - margin - top
            x2 = max(b[2] for b in boxes) + margin
            y2 = max(b[3] for b in boxes) + margin
            place.clusters[key] = (x1, y1, x2 - x1, y2 - y1)


def drop_overlapping_labels(desc, place, measure, cell: float = 120.0) -> None:
    """Hide (``place.hidden_labels``) each memlet label that would overlap a node or a
    label kept before it, top to bottom. ``measure(text)`` gives a label's (w, h)."""
    grid = defaultdict(list)

    def cells(r):
        x1, y1, x2, y2 = r
        for i in range(int(x1 // cell), int(x2 // cell) + 1):
            for j in range(int(y1 // cell), int(y2 // cell) + 1):
                yield i, j

    def free(r):
        return not any(r[0] < o[2] and o[0] < r[2] and r[1] < o[3] and o[1] < r[3]
                       for c in cells(r) for o in grid[c])

    def add(r):
        for c in cells(r):
            grid[c].append(r)

    for key, (cx, cy) in place.nodes.items():
        w, h = desc.nodes[key].size
        add((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    labelled = [e for e in desc.edges if e.label and not e.invisible and e.key in place.edges
                and place.edges[e.key][2] is not None]
    labelled.sort(key=lambda e: (place.edges[e.key][2][1], place.edges[e.key][2][0]))
    place.hidden_labels = set()
    for e in labelled:
        x, y = place.edges[e.key][2]
        w, h = measure(e.label)
        r = (x - w / 2 - 2, y - h / 2, x + w / 2 + 2, y + h / 2)
        if free(r):
            add(r)
        else:
            place.hidden_labels.add(e.key)
