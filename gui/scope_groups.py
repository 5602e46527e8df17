"""Groups of graph nodes by ONNX name scope, and folding them into boxes (no Qt here).

An exported transformer names its operators by module path
(``/layers/layers.0/self_attention/MatMul``, ``/model/h.1/attn/Add``); that
path without its last part is the node's scope. An access node has no name
of its own: it takes the deepest scope shared by the operators it touches, so
a weight sits in its layer and a tensor passed between layers sits between
their boxes. A scope is a group when it holds at least two operator nodes;
a group with the same members as its only child group is dropped (the child
keeps the more specific name).

``fold`` turns a ``GraphDesc`` into a smaller one in which every collapsed
group is one node (kind ``group``) with its members' bytes, and every
expanded group is a frame (cluster kind ``scope``). Edges into and out of a
box are merged per neighbour with their bytes summed.
"""
from dataclasses import dataclass, field, replace

from gui.graph_model import GCluster, GEdge, GNode, GraphDesc, human_bytes

# A graph larger than this opens folded (``auto_collapsed``), at the deepest
# level whose folded graph has at most ``READABLE`` nodes: about a screenful.
AUTO_FOLD = 300
READABLE = 120
# Expanding a box shows its child groups as boxes when they are this large.
SMALL_GROUP = 6


@dataclass
class Group:
    path: tuple                 # scope parts: ("layers", "layers.0")
    level: int = 1              # 1 for a top-level group, 2 for one inside it, ...
    parent: tuple = None        # the enclosing group's path (None at the top)
    children: list = field(default_factory=list)   # paths of child groups
    members: list = field(default_factory=list)    # node keys, transitively
    operators: set = field(default_factory=set)    # ONNX operator names of its members
    bytes: int = 0              # bytes moved by the memlets that touch a member

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def label(self) -> str:
        return "/" + "/".join(self.path)


def scope_path(name) -> tuple:
    """``/layers/layers.0/ln_1/LayerNormalization`` -> ``("layers", "layers.0", "ln_1")``.

    A fused node's name lists its parts in braces (``/layer.0/{intermediate/MatMul,
    {intermediate/Add,Div}}``): its scope is the one all its parts share."""
    if not name or not str(name).startswith("/"):
        return ()
    return _common([tuple(p for p in part.split("/") if p)[:-1]
                    for part in expand_braces(str(name))])


def expand_braces(text: str, limit: int = 256) -> list:
    """``/a/{b,c/{d,e}}`` -> ``["/a/b", "/a/c/d", "/a/c/e"]`` (at most ``limit`` names;
    unbalanced braces are taken as they are)."""
    def alternatives(i, depth):
        """Parse from ``i`` up to a ',' or '}' of this depth: (names, next index)."""
        names, chunk = [""], ""
        while i < len(text):
            c = text[i]
            if c == "{":
                inner, i = [], i + 1
                while True:
                    part, i = alternatives(i, depth + 1)
                    inner += part
                    if i >= len(text) or text[i] == "}":
                        break
                    i += 1   # past ','
                names = [n + chunk + x for n in names for x in inner][:limit]
                chunk = ""
                i += 1   # past '}'
                continue
            if depth and c in ",}":
                break
            chunk += c
            i += 1
        return [n + chunk for n in names], i
    if text.count("{") != text.count("}"):
        return [text]
    return alternatives(0, 0)[0]


def _common(paths) -> tuple:
    paths = list(paths)
    if not paths:
        return ()
    first = paths[0]
    n = len(first)
    for p in paths[1:]:
        n = min(n, len(p))
        for i in range(n):
            if p[i] != first[i]:
                n = i
                break
    return first[:n]


def node_scopes(desc) -> dict:
    """Node key -> scope path. Operators by their ONNX name; the rest (access nodes,
    unnamed map nodes) by the scope their named neighbours share."""
    scopes, neighbours = {}, {k: [] for k in desc.nodes}
    for key, n in desc.nodes.items():
        if n.kind != "access" and n.operator and str(n.operator).startswith("/"):
            scopes[key] = scope_path(n.operator)
    for e in desc.edges:
        if not e.invisible and e.src in neighbours and e.dst in neighbours:
            neighbours[e.src].append(e.dst)
            neighbours[e.dst].append(e.src)
    for _ in range(3):   # unnamed nodes next to unnamed nodes: a few rounds reach them
        guessed = {}
        for key in desc.nodes:
            if key in scopes:
                continue
            known = [scopes[k] for k in neighbours[key]
                     if k in scopes and desc.nodes[k].kind != "access"]
            if known:
                guessed[key] = _common(known)
        if not guessed:
            break
        scopes.update(guessed)
    for key in desc.nodes:
        scopes.setdefault(key, ())
    return scopes


def build_groups(desc, scopes: dict = None) -> dict:
    """Path -> ``Group`` for every scope that is worth a box (see the module doc)."""
    scopes = node_scopes(desc) if scopes is None else scopes
    ops, members = {}, {}
    for key, path in scopes.items():
        n = desc.nodes[key]
        for i in range(1, len(path) + 1):
            members.setdefault(path[:i], []).append(key)
            if n.kind != "access":
                ops[path[:i]] = ops.get(path[:i], 0) + 1
    candidates = sorted((p for p in members if ops.get(p, 0) >= 2), key=len)
    kept = set(candidates)
    for p in candidates:   # drop a group that only wraps one child with the same members
        kids = [c for c in candidates if len(c) > len(p) and c[:len(p)] == p]
        if kids and any(len(members[c]) == len(members[p]) for c in kids):
            kept.discard(p)
    if len(members.get(min(kept, key=len, default=()), ())) == len(desc.nodes):
        kept.discard(min(kept, key=len))   # one group holding everything folds nothing
    groups = {}
    for p in sorted(kept, key=len):
        parent = next((p[:i] for i in range(len(p) - 1, 0, -1) if p[:i] in groups), None)
        g = Group(p, 1 if parent is None else groups[parent].level + 1, parent,
                  members=list(members[p]))
        g.operators = {desc.nodes[k].operator for k in g.members if desc.nodes[k].operator}
        groups[p] = g
        if parent is not None:
            groups[parent].children.append(p)
    _sum_bytes(desc, groups, scopes)
    return groups


def _sum_bytes(desc, groups, scopes):
    for e in desc.edges:
        if e.invisible or not e.bytes:
            continue
        touched = set()
        for key in (e.src, e.dst):
            path = scopes.get(key, ())
            touched.update(path[:i] for i in range(1, len(path) + 1) if path[:i] in groups)
        for p in touched:
            groups[p].bytes += e.bytes


def owner(scope: tuple, groups: dict, collapsed) -> tuple:
    """The outermost collapsed group holding a node of ``scope`` (None: it is shown)."""
    for i in range(1, len(scope) + 1):
        if scope[:i] in collapsed and scope[:i] in groups:
            return scope[:i]
    return None


def collapsed_to(groups: dict, level: int) -> set:
    """The groups to collapse so that groups above ``level`` are open, those at it are boxes."""
    return {p for p, g in groups.items() if g.level == level}


def visible_count(desc, scopes, groups, collapsed) -> int:
    boxes, shown = set(), 0
    for key in desc.nodes:
        o = owner(scopes[key], groups, collapsed)
        if o is None:
            shown += 1
        else:
            boxes.add(o)
    return shown + len(boxes)


def auto_collapsed(desc, scopes, groups, limit: int = READABLE) -> set:
    """Nothing for a small graph; else the deepest level whose folded graph has at most
    ``limit`` nodes (level 1 when none has)."""
    if len(desc.nodes) <= AUTO_FOLD or not groups:
        return set()
    best = collapsed_to(groups, 1)
    for level in range(2, max(g.level for g in groups.values()) + 1):
        candidate = collapsed_to(groups, level)
        if visible_count(desc, scopes, groups, candidate) > limit:
            break
        best = candidate
    return best


def expand(groups: dict, collapsed: set, path: tuple) -> set:
    """Open ``path`` (and the groups around it) one level: its large child groups
    become boxes, so a layer opens as its attention and MLP blocks."""
    out = set(collapsed)
    p = path
    while p is not None:
        out.discard(p)
        p = groups[p].parent if p in groups else None
    for child in groups[path].children if path in groups else ():
        if len(groups[child].members) >= SMALL_GROUP:
            out.add(child)
    return out


def collapse(groups: dict, collapsed: set, path: tuple) -> set:
    """Fold ``path`` into a box (its inner state is forgotten: it reopens one level)."""
    out = {p for p in collapsed if p[:len(path)] != path}
    out.add(path)
    return out


def fold(desc, scopes: dict, groups: dict, collapsed) -> GraphDesc:
    """A ``GraphDesc`` with each collapsed group as one node and each open one as a frame."""
    collapsed = set(collapsed) & set(groups)
    out = GraphDesc(clusters=dict(desc.clusters), state_edges=list(desc.state_edges))
    where = {}     # original key -> shown key
    boxes = {}     # group path -> box GNode
    index = {p: i for i, p in enumerate(sorted(groups))}
    for key, n in desc.nodes.items():
        o = owner(scopes[key], groups, collapsed)
        if o is None:
            out.nodes[key] = n
            out.by_ident[n.ident] = key
            where[key] = key
            continue
        box = boxes.get(o)
        if box is None:
            g = groups[o]
            box = GNode(f"g{index[o]}", "scope:" + g.label, "group", "▸ " + g.name,
                        f"{len(g.members)} nodes · {human_bytes(g.bytes)}", None, n.state,
                        n.sdfg, n.cluster, None)
            box.members = tuple(desc.nodes[k].ident for k in g.members)
            box.scope, box.operators, box.bytes = o, frozenset(g.operators), g.bytes
            boxes[o] = box
            out.nodes[box.key] = box
            out.by_ident[box.ident] = box.key
        elif box.cluster != n.cluster:
            box.cluster = _common_cluster(desc.clusters, box.cluster, n.cluster)
        where[key] = box.key
        out.hidden[n.ident] = box.key
    merged = {}
    for e in desc.edges:
        a, b = where.get(e.src), where.get(e.dst)
        if a is None or b is None or a == b:
            continue
        if a == e.src and b == e.dst:
            out.edges.append(e)
            continue
        m = merged.get((a, b))
        if m is None:
            m = merged[(a, b)] = GEdge(f"f{len(merged)}", a, b, "", 0, invisible=True)
            out.edges.append(m)
        m.invisible = m.invisible and e.invisible
        m.bytes += e.bytes or 0
    for m in merged.values():
        m.label = human_bytes(m.bytes) if m.bytes else ""
    _frames(out, scopes, groups, collapsed, where)
    inside = _cluster_members(out)   # a map folded away leaves an empty frame: drop it
    for ckey in [c for c, cl in out.clusters.items() if cl.kind != "state" and c not in inside]:
        del out.clusters[ckey]
    return out


def _common_cluster(clusters, a, b):
    chain = []
    while a is not None:
        chain.append(a)
        a = clusters[a].parent
    while b is not None and b not in chain:
        b = clusters[b].parent
    return b


def _frames(out, scopes, groups, collapsed, where):
    """Open groups (outside any collapsed one) as frames around what they show."""
    shown = {}   # open group path -> shown node keys
    for key, shown_key in where.items():
        path = scopes[key]
        for i in range(1, len(path) + 1):
            p = path[:i]
            if p in collapsed:
                break
            if p in groups:
                shown.setdefault(p, set()).add(shown_key)
    inside = _cluster_members(out)
    for p in sorted(shown, key=len):   # outer frames first: inner ones nest in them
        keys = shown[p]
        if len(keys) < 2:
            continue
        g = groups[p]
        home = None
        for k in keys:
            c = out.nodes[k].cluster
            home = c if home is None else _common_cluster(out.clusters, home, c)
        ckey = f"q{len(out.clusters)}"
        out.clusters[ckey] = GCluster(ckey, "scope", f"▾ {g.name} · {human_bytes(g.bytes)}",
                                      home, p)
        moved = set()
        for k in keys:
            if out.nodes[k].cluster == home:
                _set_cluster(out, k, ckey)
                moved.add(k)
        for sub, c in list(out.clusters.items()):
            if c.parent == home and sub != ckey and inside.get(sub) and inside[sub] <= keys:
                c.parent = ckey
                moved |= inside[sub]
        inside[ckey] = moved   # what the clusters around it hold is unchanged


def _set_cluster(out, key, ckey):
    n = out.nodes[key]
    if n.kind != "group" and n.cluster != ckey:   # a copy: the unfolded description keeps its own
        n = out.nodes[key] = replace(n)
    n.cluster = ckey


def _cluster_members(out) -> dict:
    """Cluster key -> every node key inside it (nested clusters included)."""
    inside = {}
    for key, n in out.nodes.items():
        c = n.cluster
        while c is not None:
            inside.setdefault(c, set()).add(key)
            c = out.clusters[c].parent
    return inside
