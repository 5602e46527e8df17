"""A match's region written without names: equal texts, equal byte predictions.

Why: a training program repeats each layer's forward and backward twelve times
(ViT-tiny), and a step changes a few nodes: most matches a listing predicts
have the same region, up to names, as one already measured, in this step or an
earlier one. Measuring a region copies it, applies the match and counts its
bytes (~10 ms); writing its key takes a fraction of that.

What the key holds: the transformation, its options and the roles of the
match's nodes; every node of the region in the state's order with its
properties, less what only names it (labels, ONNX names, debug information);
every edge with its memlet, arrays replaced by their order of first use; each
array's descriptor, whether the rest of the graph uses it and whether it is a
constant input (``StateIndex``); the boundary. What a prediction reads beyond
the region (the SDFG's symbols) is the same for every key of one session.

A global transformation's decision on the whole program (``decisions``) joins
the key with its nodes written as their places in the region.

A property whose value the key cannot write exactly (a nested SDFG, an object
of a type it does not know) makes the region unkeyed (``None``): it is then
measured every time. So does a transformation that reads weights, whose values
are not in the key.
"""
import dataclasses
import enum
import hashlib

import dace
from dace.properties import CodeBlock
from dace.sdfg import nodes
from dace.sdfg.graph import MultiConnectorEdge

# Properties that name a node, not what it does.
_NAMES = {"label", "name", "onnx_name", "debuginfo", "guid", "location", "instrument"}
_PLAIN = (str, int, float, bool, type(None))


class Unkeyed(Exception):
    """The region holds something the key cannot write exactly."""


def region_key(index, region, boundary, match, transformation, decision=None):
    """The key of ``match``'s region (``StateIndex.region``): the SHA-256 of its text,
    or None (see above). ``decision``: what a global transformation decided on the whole
    program (``decisions``), written with its nodes as positions in the region."""
    if getattr(transformation, "needs_weights", True):
        return None
    arrays = {}
    # what a node or memlet says apart from its arrays, once per step (``StateIndex``
    # lives for one): regions overlap, a node is in twenty of them
    held = index.__dict__.setdefault("_signatures", {})
    ordered = sorted(region, key=index.order.__getitem__)
    position = {node: i for i, node in enumerate(ordered)}
    try:
        text = [match.transformation, repr(match.options), match.expr_index,
                tuple(sorted((role, position[index.by_ident[ident]])
                             for role, ident in match.where))]
        for node in ordered:
            text.append(_node(node, arrays, held))
            text.append(node in boundary)
        edge_order = index.edge_order()
        state = index.state
        edges = sorted((e for n in ordered for e in state.out_edges(n) if e.dst in position),
                       key=edge_order.__getitem__)
        for e in edges:
            text.append((position[e.src], e.src_conn, position[e.dst], e.dst_conn,
                         _memlet(e.data, arrays, held)))
        if decision is not None:
            text.append(_decided(decision, position))
    except Unkeyed:
        return None
    names = list(arrays)
    outside = index.used_outside(region, names)
    for name in names:
        text.append((index.desc_json(name), name in outside,
                     any(index.is_constant_input(a) for a in index.accesses.get(name, ()))))
    return hashlib.sha256(repr(text).encode()).hexdigest()   # a region's text: up to 100 kB


def _decided(value, position: dict):
    if isinstance(value, nodes.Node):
        if value not in position:
            raise Unkeyed("a decided node outside the region")
        return ("node", position[value])
    if isinstance(value, MultiConnectorEdge):
        return ("edge", _decided(value.src, position), value.src_conn,
                _decided(value.dst, position), value.dst_conn)
    if isinstance(value, dict):
        return ("dict", tuple(sorted(repr((_decided(k, position), _decided(v, position)))
                                     for k, v in value.items())))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, _decided(getattr(value, f.name), position))
                                            for f in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return tuple(_decided(v, position) for v in value)
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(_decided(v, position)) for v in value)))
    return _value(value)


def _array(name, arrays: dict) -> int:
    if name is None:
        return -1
    return arrays.setdefault(name, len(arrays))


def _node(node, arrays: dict, held: dict):
    fixed = held.get(node)
    if fixed is None:
        fixed = held[node] = _node_fixed(node)
    if isinstance(node, nodes.AccessNode):
        return fixed, _array(node.data, arrays)
    return fixed


def _node_fixed(node):
    if isinstance(node, nodes.NestedSDFG):
        raise Unkeyed("a nested SDFG")
    out = [type(node).__name__]
    if isinstance(node, (nodes.MapEntry, nodes.MapExit)):
        out.append(_properties(node.map, _NAMES))
    out.append(tuple(sorted((k, str(v)) for k, v in node.in_connectors.items())))
    out.append(tuple(sorted((k, str(v)) for k, v in node.out_connectors.items())))
    out.append(_properties(node, _NAMES | {"data", "map", "in_connectors", "out_connectors"}))
    return tuple(out)


def _memlet(memlet, arrays: dict, held: dict):
    fixed = held.get(id(memlet))
    if fixed is None or fixed[0] is not memlet:   # the memlet kept: its id stays its own
        fixed = held[id(memlet)] = (memlet, _properties(memlet, {"data", "debuginfo",
                                                                 "guid"}))
    return _array(memlet.data, arrays), fixed[1]


def _properties(obj, skip: set) -> tuple:
    return tuple((prop.attr_name, _value(value)) for prop, value in obj.properties()
                 if prop.attr_name not in skip)


def _value(value):
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, (list, tuple)):
        return tuple(_value(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _value(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(repr(_value(v)) for v in value))
    if isinstance(value, CodeBlock):
        return ("code", value.as_string, str(value.language))
    if isinstance(value, (dace.subsets.Subset, dace.symbolic.SymExpr)) \
            or isinstance(value, dace.symbolic.sympy.Basic):
        return ("sym", str(value))
    if isinstance(value, dace.dtypes.typeclass):
        return ("type", value.to_string())
    raise Unkeyed(type(value).__name__)
