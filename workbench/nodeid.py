"""Stable identities for SDFG nodes, so matches and recipes survive edits.

An identity reads ``[<nested SDFG node identity>>]<state label>:<kind>:<name>#<k>``:
kind/name is ``op:<ONNX node name>`` for an OnnxOp, ``data:<array>`` for an
access node, ``map:<label>``/``mapexit:<label>`` for a map's entry/exit,
``nsdfg``, ``tasklet`` or ``lib`` with the label otherwise; ``k`` counts
earlier nodes of the same kind and name in the state. A state itself is
``[...>]state:<label>``. Nothing depends on node ids or list positions.
"""
import contextlib
import contextvars

import dace
from dace.sdfg import nodes

from workbench.errors import TransformationError


def kind_and_name(node):
    from workbench.ops.node import OnnxOp
    if isinstance(node, OnnxOp):
        return "op", node.onnx_name
    if isinstance(node, nodes.AccessNode):
        return "data", node.data
    if isinstance(node, nodes.MapEntry):
        return "map", node.map.label
    if isinstance(node, nodes.MapExit):
        return "mapexit", node.map.label
    if isinstance(node, nodes.NestedSDFG):
        return "nsdfg", node.label
    if isinstance(node, nodes.Tasklet):
        return "tasklet", node.label
    if isinstance(node, nodes.LibraryNode):
        return "lib", node.label
    return type(node).__name__.lower(), getattr(node, "label", "")


def identity_prefix(sdfg) -> str:
    """What every identity of a node of ``sdfg`` starts with (``_prefix``)."""
    return _prefix(sdfg)


def _prefix(sdfg) -> str:
    """Identity path of a nested SDFG (empty for the top level)."""
    parent_node = sdfg.parent_nsdfg_node
    if parent_node is None or sdfg.parent is None:
        return ""
    return identity(sdfg.parent_sdfg, sdfg.parent, parent_node) + ">"


# While the graph holds still (finding matches), a node's identity comes from one pass
# over its state instead of a walk per node: listing the library's matches on a
# ViT-tiny export asked for 1,180 identities, and the walks were a quarter of the time.
_INDEX = contextvars.ContextVar("identity_index", default=None)


@contextlib.contextmanager
def graph_unchanged(held: dict = None):
    """Identities asked for inside are computed once per state; nothing inside may
    add, remove or reorder nodes (nested uses share the outer index). ``held``: the
    index to keep them in, for a caller that knows the graph holds still between
    several of these (one step's predictions)."""
    if _INDEX.get() is not None:
        yield
        return
    token = _INDEX.set({} if held is None else held)
    try:
        yield
    finally:
        _INDEX.reset(token)


def holding_still() -> bool:
    """Whether the caller is inside ``graph_unchanged`` (``per_state`` then keeps)."""
    return _INDEX.get() is not None


def per_state(state, what: str, compute):
    """``compute()``, kept for ``state`` inside ``graph_unchanged`` (a derived view of
    the state that its finds would otherwise build once per candidate)."""
    index = _INDEX.get()
    if index is None:
        return compute()
    held = index.get((id(state), what))
    if held is None or held[0] is not state:
        held = index[id(state), what] = (state, compute())
    return held[1]


def identity(sdfg, state, node) -> str:
    if isinstance(node, dace.SDFGState) or state is None:
        return f"{_prefix(sdfg)}state:{node.label}"
    index = _INDEX.get()
    if index is not None:
        held = index.get(id(state))
        if held is None or held[0] is not state:
            held = index[id(state)] = (state, identities(sdfg, state))
        known = held[1].get(node)
        if known is not None:
            return known
    kind, name = kind_and_name(node)
    k = 0
    for other in state.nodes():
        if other is node:
            break
        if kind_and_name(other) == (kind, name):
            k += 1
    return f"{_prefix(sdfg)}{state.label}:{kind}:{name}#{k}"


def identities(sdfg, state) -> dict:
    """``identity`` of every node of ``state`` at once: one pass, not one per node."""
    prefix, seen, out = _prefix(sdfg), {}, {}
    for node in state.nodes():
        kind, name = kind_and_name(node)
        k = seen.get((kind, name), 0)
        seen[kind, name] = k + 1
        out[node] = f"{prefix}{state.label}:{kind}:{name}#{k}"
    return out


def short(node) -> str:
    """What a person calls the node."""
    if isinstance(node, dace.SDFGState):
        return f"state {node.label}"
    kind, name = kind_and_name(node)
    return name if kind in ("op", "data") else f"{kind} {name}"


def resolve(sdfg, ident: str):
    """(owning SDFG, state or None, node) for an identity; TransformationError if gone."""
    owner = sdfg
    *path, last = ident.split(">")
    for step in path:
        _, _, nested = resolve(owner, step)
        if not isinstance(nested, nodes.NestedSDFG):
            raise TransformationError(f"'{step}' is not a nested SDFG")
        owner = nested.sdfg
    if last.startswith("state:"):
        label = last[len("state:"):]
        for state in owner.states():
            if state.label == label:
                return owner, None, state
        raise TransformationError(f"state '{label}' no longer exists")
    state_label, kind, rest = last.split(":", 2)
    name, _, k = rest.rpartition("#")
    for state in owner.states():
        if state.label != state_label:
            continue
        if holding_still():   # one pass per state, not one per identity
            known = per_state(state, "nodes by identity", lambda: {
                i: n for n, i in identities(owner, state).items()})
            node = known.get(f"{_prefix(owner)}{last}")
            if node is not None:
                return owner, state, node
            continue
        same = [n for n in state.nodes() if kind_and_name(n) == (kind, name)]
        if int(k) < len(same):
            return owner, state, same[int(k)]
    raise TransformationError(f"node {kind} '{name}' no longer exists")


def resolve_all(sdfg, where: dict):
    """(owner SDFG, state, {role: node}) for a match's roles, all in one place."""
    owner = state = None
    out = {}
    for role, ident in where.items():
        o, s, node = resolve(sdfg, ident)
        if owner is not None and o is not owner:
            raise TransformationError("a match spans several SDFGs")
        owner = o
        state = state or s
        out[role] = node
    return owner, state, out


def find_nodes(sdfg, idents) -> list:
    """Nodes for identities that still resolve (a GUI selection), skipping gone ones."""
    found = []
    for ident in idents:
        try:
            found.append(resolve(sdfg, ident)[2])
        except TransformationError:
            continue
    return found


def selection(sdfg, items) -> set:
    """Identities for a selection given as identities, ONNX node names or nodes."""
    from workbench.ops.node import OnnxOp
    by_onnx_name, where = {}, {}
    with graph_unchanged():
        for node, state in sdfg.all_nodes_recursive():
            where[id(node)] = state
            if isinstance(node, OnnxOp):
                by_onnx_name[node.onnx_name] = identity(state.sdfg, state, node)
        idents = set()
        for item in items:
            if isinstance(item, str):
                idents.add(by_onnx_name.get(item, item))
            else:
                state = where[id(item)]
                idents.add(identity(state.sdfg, state, item))
    return idents
