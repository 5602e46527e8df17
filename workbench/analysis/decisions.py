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
    _walk(decision, found)
    return found


def _walk(value, found: list) -> None:
    if isinstance(value, nodes.Node):
        found.append(value)
    elif isinstance(value, MultiConnectorEdge):
        found += [value.src, value.dst]
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(k, found)
            _walk(v, found)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _walk(getattr(value, field.name), found)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            _walk(v, found)


def onto(decision, copies: dict, edge_copies: dict):
    """``decision`` with every live node and edge it names replaced by its region copy;
    NotLocal when it names one outside the region."""
    if isinstance(decision, nodes.Node):
        if decision not in copies:
            raise NotLocal("the decision names a node outside the region")
        return copies[decision]
    if isinstance(decision, MultiConnectorEdge):
        if decision not in edge_copies:
            raise NotLocal("the decision names an edge outside the region")
        return edge_copies[decision]
    if isinstance(decision, dict):
        return {onto(k, copies, edge_copies): onto(v, copies, edge_copies)
                for k, v in decision.items()}
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        return dataclasses.replace(decision, **{
            f.name: onto(getattr(decision, f.name), copies, edge_copies)
            for f in dataclasses.fields(decision) if f.init})
    if isinstance(decision, tuple) and hasattr(decision, "_fields"):   # a named tuple
        return type(decision)(*(onto(v, copies, edge_copies) for v in decision))
    if isinstance(decision, (tuple, list, set, frozenset)):
        return type(decision)(onto(v, copies, edge_copies) for v in decision)
    return decision
