"""A global transformation's decision, made on the whole program, carried onto a region.

A ``region_rewrite`` transformation decides on the live graph (``decide``: it reads
lifetimes, every use of an array, the peak of live memory) and rewrites only the
nodes its decision names. The region a step or a prediction copies must then hold
those nodes too (``named_nodes``: extra seeds), and the decision is handed to the
copy with every node and edge replaced by its copy (``onto``).
"""
import dataclasses

from dace.sdfg import nodes
from dace.sdfg.graph import MultiConnectorEdge


class NotLocal(Exception):
    """The step's result reaches outside its region: apply it to the whole graph."""


def named_nodes(decision) -> list:
    """Every node ``decision`` names, with both ends of every edge it names."""
    found = []
    _map(decision, lambda node: found.append(node) or node,
         lambda edge: found.extend((edge.src, edge.dst)) or edge)
    return found


def onto(decision, copies: dict, edge_copies: dict):
    """``decision`` with every live node and edge it names replaced by its region copy;
    NotLocal when it names one outside the region."""
    def node(n):
        if n not in copies:
            raise NotLocal("the decision names a node outside the region")
        return copies[n]

    def edge(e):
        if e not in edge_copies:
            raise NotLocal("the decision names an edge outside the region")
        return edge_copies[e]
    return _map(decision, node, edge)


def _map(value, node, edge):
    """``value`` with ``node(n)`` for every node and ``edge(e)`` for every edge in it,
    through dicts, dataclasses, named tuples, tuples, lists and sets."""
    if isinstance(value, nodes.Node):
        return node(value)
    if isinstance(value, MultiConnectorEdge):
        return edge(value)
    if isinstance(value, dict):
        return {_map(k, node, edge): _map(v, node, edge) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _map(getattr(value, f.name), node, edge)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, tuple) and hasattr(value, "_fields"):   # a named tuple
        return type(value)(*(_map(v, node, edge) for v in value))
    if isinstance(value, (tuple, list, set, frozenset)):
        return type(value)(_map(v, node, edge) for v in value)
    return value
