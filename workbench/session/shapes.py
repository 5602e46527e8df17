"""Shapes: what one step's SDFG holds in its one state, installed on a shared host.

A spliced step (``workbench.session.working_graph``) keeps the Shape of its
state: the node list, the edge list and the arrays (objects, not copies).
Node, edge, memlet and descriptor objects are never changed after a splice
puts them in the live graph (the next step works on copies again), so
installing a step's Shape on the host restores it exactly: undo, redo and
goto cost a pass over the node and edge lists, whatever the distance, and
less when the host still holds the Shape installed last (``advance`` then
touches only what differs).
"""
import copy
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import networkx as nx
from dace.sdfg import nodes


@dataclass(frozen=True, eq=False)
class Shape:
    """What one step's SDFG holds in its one state and its arrays (objects, not copies)."""
    nodes: tuple
    edges: tuple
    arrays: dict


# host SDFG -> the Shape installed on it now (a host is shared by the steps spliced into it)
_INSTALLED = weakref.WeakKeyDictionary()


def capture(sdfg) -> Shape:
    """The Shape ``sdfg`` has now (remembered as installed)."""
    state = sdfg.nodes()[0]
    shape = Shape(tuple(state.nodes()), tuple(state.edges()), dict(sdfg.arrays))
    _INSTALLED[sdfg] = shape
    return shape


def installed(sdfg):
    """The Shape installed on ``sdfg`` (None when none was captured or installed)."""
    return _INSTALLED.get(sdfg)


def install(sdfg, shape: Shape) -> None:
    """Make ``sdfg``'s state and arrays exactly ``shape`` (new containers, same objects).

    When the live containers still hold the Shape installed last (nothing changed them
    since), only the difference is installed (``advance``): an undo or redo on ViT-tiny
    rebuilt 1,400 nodes' dicts and networkx's graph for a step that touched ten, and
    the garbage it left cost a 0.25-0.5 s collection at times."""
    current = _INSTALLED.get(sdfg)
    if current is shape:
        return
    if current is not None and _holds(sdfg, current):
        advance(sdfg, current, shape)
        return
    state = sdfg.nodes()[0]
    node_dict = OrderedDict((n, (OrderedDict(), OrderedDict())) for n in shape.nodes)
    edge_dict = OrderedDict()
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(shape.nodes)
    for e in shape.edges:
        node_dict[e.src][1][e] = e
        node_dict[e.dst][0][e] = e
        edge_dict[e] = e
        graph.add_edge(e.src, e.dst, key=e.key, data=e.data, src_conn=e.src_conn,
                       dst_conn=e.dst_conn)
    state._nodes, state._edges, state._nx = node_dict, edge_dict, graph
    state._clear_scopedict_cache()
    arrays = type(sdfg._arrays)()
    arrays.update(shape.arrays)
    sdfg._arrays = arrays
    for node in shape.nodes:
        if isinstance(node, nodes.NestedSDFG):
            node.sdfg.parent, node.sdfg.parent_sdfg = state, sdfg
            node.sdfg.parent_nsdfg_node = node
    for e in shape.edges:
        e.data._sdfg, e.data._state, e.data._edge = sdfg, state, e
    sdfg.reset_cfg_list()
    _INSTALLED[sdfg] = shape


def _holds(sdfg, shape: Shape) -> bool:
    """Whether ``sdfg``'s one state and arrays hold exactly ``shape``'s objects."""
    if sdfg.number_of_nodes() != 1:
        return False
    state = sdfg.nodes()[0]
    arrays = sdfg._arrays
    return (len(state._nodes) == len(shape.nodes) and len(state._edges) == len(shape.edges)
            and len(arrays) == len(shape.arrays)
            and all(a is b for a, b in zip(state._nodes, shape.nodes))
            and all(a is b for a, b in zip(state._edges, shape.edges))
            and all(arrays.get(name) is desc for name, desc in shape.arrays.items()))


def advance(sdfg, old: Shape, new: Shape) -> tuple:
    """Install ``new`` on ``sdfg``, which holds ``old``, touching only what differs: the
    node and edge dicts are new (their order is the step's), a node's own edge dicts
    are new only where its edges changed, networkx's graph loses and gains just the
    changed nodes and edges (its order is not DaCe's and nothing reads it as such).
    A full ``install`` took most of a spliced step on a ViT-tiny export. Returns the
    edges gone and added."""
    state = sdfg.nodes()[0]
    before_nodes, after_nodes = set(old.nodes), set(new.nodes)
    before_edges, after_edges = set(old.edges), set(new.edges)
    gone_nodes, added_nodes = before_nodes - after_nodes, after_nodes - before_nodes
    gone_edges, added_edges = before_edges - after_edges, after_edges - before_edges
    touched = {n for e in gone_edges | added_edges for n in (e.src, e.dst)} | added_nodes
    held = state._nodes
    fresh = {n: (OrderedDict(), OrderedDict()) for n in touched if n in after_nodes}
    for e in new.edges:
        if e.src in fresh:
            fresh[e.src][1][e] = e
        if e.dst in fresh:
            fresh[e.dst][0][e] = e
    state._nodes = OrderedDict((n, fresh[n] if n in fresh else held[n]) for n in new.nodes)
    state._edges = OrderedDict((e, e) for e in new.edges)
    graph = state._nx
    graph.remove_nodes_from(gone_nodes)
    graph.remove_edges_from([(e.src, e.dst, e.key) for e in gone_edges
                             if e.src not in gone_nodes and e.dst not in gone_nodes])
    graph.add_nodes_from(n for n in new.nodes if n in added_nodes)
    for e in new.edges:
        if e in added_edges:
            graph.add_edge(e.src, e.dst, key=e.key, data=e.data, src_conn=e.src_conn,
                           dst_conn=e.dst_conn)
            e.data._sdfg, e.data._state, e.data._edge = sdfg, state, e
    state._clear_scopedict_cache()
    arrays = type(sdfg._arrays)()
    arrays.update(new.arrays)
    sdfg._arrays = arrays
    nested = [n for n in added_nodes | gone_nodes if isinstance(n, nodes.NestedSDFG)]
    for node in nested:
        if node in added_nodes:
            node.sdfg.parent, node.sdfg.parent_sdfg = state, sdfg
            node.sdfg.parent_nsdfg_node = node
    if nested:
        sdfg.reset_cfg_list()
    _INSTALLED[sdfg] = new
    return gone_edges, added_edges


def copy_of(sdfg, shape: Shape):
    """An independent SDFG holding ``shape`` of host ``sdfg`` (the host is only read)."""
    if shape is None or _INSTALLED.get(sdfg) is shape:
        return copy.deepcopy(sdfg)
    host, moved = copy.deepcopy((sdfg, shape))
    _INSTALLED.pop(host, None)
    install(host, moved)
    return host


def serialized(sdfg, shape: Shape) -> dict:
    """``to_json()`` of host ``sdfg`` holding ``shape``, without copying it: the Shape is
    installed for the call and the one held before put back. The caller holds the
    session's lock (whatever reads the live graph holds it too); a host that holds no
    captured Shape is copied instead."""
    now = _INSTALLED.get(sdfg)
    if shape is None or now is shape:
        return sdfg.to_json()
    if now is None:
        return copy_of(sdfg, shape).to_json()
    install(sdfg, shape)
    try:
        return sdfg.to_json()
    finally:
        install(sdfg, now)
