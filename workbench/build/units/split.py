"""Cutting a one-state program into units: standalone SDFGs that compile alone.

A unit is one top-level operator of the session's SDFG (a library node, a
nested SDFG, a tasklet, a map scope with its body) or one copy between two
arrays. Its standalone SDFG takes every array it touches as an argument under
a name that says only where it first appears (``c0``, ``c1``, ...), so the
same operator on other arrays (the twelve layers of a ViT) is the same unit.

What stays with the program (``Layout``): which arrays it allocates (the
session's transients, once, for the program's life), which arrays are views
of others (a pointer and an element offset, as DaCe's code computes them),
and the order of the calls (a topological order of the state).

Anything this cannot represent exactly raises ``NotSplittable`` with the
reason, and the program is built whole instead: a wrong split would be a
wrong program.
"""
import copy
from dataclasses import dataclass, field

import dace
from dace import data as dt
from dace.sdfg import nodes, utils as sdutil
from dace.sdfg.state import SDFGState

_CPU_STORAGE = (dace.StorageType.Default, dace.StorageType.CPU_Heap,
                dace.StorageType.Register)


class NotSplittable(Exception):
    """The program cannot be built by units; the message says why."""


@dataclass
class Unit:
    label: str            # the session node's label (timers, errors)
    node_id: int          # the session node's id in its state
    sdfg: dace.SDFG       # the standalone program; arrays c0, c1, ...
    data: dict            # canonical array name -> the session's array name
    key: str = ""         # content key (``units.keys``)
    base: str = None      # the key without recorded constants, when it records some
    compiled: bool = False  # generated and compiled by this build


@dataclass
class Layout:
    units: list                                   # in call order
    views: dict = field(default_factory=dict)     # view -> (viewed array, element offset)
    transients: list = field(default_factory=list)  # arrays the program allocates


def split(sdfg: dace.SDFG) -> Layout:
    """The units of ``sdfg`` in a valid call order, or ``NotSplittable``."""
    if sdfg.number_of_nodes() != 1 or not isinstance(sdfg.nodes()[0], SDFGState):
        raise NotSplittable("the program has control flow (more than one state)")
    if sdfg.symbols and sdfg.free_symbols:   # (free_symbols walks every memlet: 0.2 s on a ViT)
        raise NotSplittable(f"the program has free symbols ({', '.join(sorted(sdfg.free_symbols))})")
    state = sdfg.nodes()[0]
    scopes = state.scope_dict()
    layout = Layout([])
    arguments = {}   # session array -> its descriptor as a unit argument (shared by units)
    for node in state.nodes():
        if scopes[node] is None and isinstance(node, nodes.AccessNode):
            _check_array(sdfg, node.data)
    view_edges = _views(sdfg, state, layout)
    used = {n.data for n in state.nodes() if isinstance(n, nodes.AccessNode)
            and scopes[n] is None}
    layout.transients = sorted(name for name in used if sdfg.arrays[name].transient
                               and name not in layout.views)
    for node in sdutil.dfs_topological_sort(state):
        if scopes[node] is not None or isinstance(node, nodes.ExitNode):
            continue
        if isinstance(node, nodes.AccessNode):
            for edge in state.out_edges(node):
                if isinstance(edge.dst, nodes.AccessNode) and edge not in view_edges:
                    if edge.data.data is not None:
                        layout.units.append(_copy_unit(sdfg, state, edge, arguments))
            continue
        if isinstance(node, nodes.MapEntry):
            inner = list(state.scope_subgraph(node, include_entry=True, include_exit=True).nodes())
        elif isinstance(node, (nodes.LibraryNode, nodes.NestedSDFG, nodes.Tasklet)):
            inner = [node]
        else:
            raise NotSplittable(f"the top-level node {node.label!r} is a "
                                f"{type(node).__name__}, which units do not cover")
        layout.units.append(_unit(sdfg, state, node, inner, arguments))
    return layout


def _check_array(sdfg, name: str) -> None:
    desc = sdfg.arrays[name]
    if type(desc) not in (dt.Array, dt.ArrayView, dt.Scalar):
        raise NotSplittable(f"'{name}' is a {type(desc).__name__}")
    if desc.storage not in _CPU_STORAGE:
        raise NotSplittable(f"'{name}' is stored in {desc.storage.name}")
    if isinstance(desc, dt.Array) and any(o != 0 for o in desc.offset):
        raise NotSplittable(f"'{name}' has an index offset")


def _views(sdfg, state, layout: Layout) -> set:
    """Fill ``layout.views``; the edges that only say what a view views."""
    edges = set()
    for node in state.nodes():
        if not isinstance(node, nodes.AccessNode) or not isinstance(sdfg.arrays[node.data], dt.View):
            continue
        edge = sdutil.get_view_edge(state, node)
        if edge is None:
            raise NotSplittable(f"the view '{node.data}' has no edge to what it views")
        other = edge.src if edge.dst is node else edge.dst
        if not isinstance(other, nodes.AccessNode) or edge.data.data != other.data:
            raise NotSplittable(f"the view '{node.data}' is not a plain subset of an array")
        base = sdfg.arrays[other.data]
        offset = sum(begin * stride for begin, stride
                     in zip(edge.data.subset.min_element(), base.strides)) + base.start_offset
        seen = layout.views.get(node.data)
        if seen is not None and seen != (other.data, offset):
            raise NotSplittable(f"the view '{node.data}' views two places")
        if dace.symbolic.issymbolic(offset):
            raise NotSplittable(f"the view '{node.data}' starts at a symbolic offset")
        layout.views[node.data] = (other.data, int(offset))
        edges.add(edge)
    for name in layout.views:   # a view of a view: offsets add up, cycles are not views
        seen, base = {name}, layout.views[name][0]
        while base in layout.views:
            if base in seen:
                raise NotSplittable(f"the view '{name}' views itself")
            seen.add(base)
            base = layout.views[base][0]
    return edges


class _Builder:
    """The standalone SDFG of one unit, its arrays named by first appearance."""

    def __init__(self, sdfg, arguments: dict):
        self.outer = sdfg
        self.arguments = arguments
        self.sdfg = dace.SDFG("unit")
        self.sdfg.constants_prop = copy.deepcopy(sdfg.constants_prop)
        self.state = self.sdfg.add_state("unit")
        self.names = {}     # session array -> canonical name
        self.access = {}    # id of a session access node -> its copy

    def argument(self, name: str) -> str:
        if name not in self.names:
            if name not in self.arguments:   # one copy per split: unit SDFGs are only read
                desc = self.outer.arrays[name]
                if isinstance(desc, dt.View):
                    desc = desc.as_array()
                desc = copy.deepcopy(desc)
                desc.transient = False
                desc.optional = False   # always passed
                desc.storage = dace.StorageType.Default
                desc.lifetime = dace.AllocationLifetime.Scope
                self.arguments[name] = desc
            self.names[name] = f"c{len(self.names)}"
            self.sdfg.add_datadesc(self.names[name], self.arguments[name])
        return self.names[name]

    def inner_transient(self, name: str) -> str:
        desc = self.outer.arrays[name]
        if not desc.transient or isinstance(desc, dt.View):
            raise NotSplittable(f"'{name}' is used inside a scope but is not a plain transient")
        if name not in self.names:
            self.names[name] = f"c{len(self.names)}"
            self.sdfg.add_datadesc(self.names[name], copy.deepcopy(desc))
        return self.names[name]

    def access_node(self, node) -> nodes.AccessNode:
        if id(node) not in self.access:
            self.access[id(node)] = self.state.add_access(self.argument(node.data))
        return self.access[id(node)]

    def memlet(self, memlet):
        memlet = copy.deepcopy(memlet)
        if memlet.data is not None:
            if memlet.data not in self.names:
                raise NotSplittable(f"a memlet names '{memlet.data}', which the unit does not hold")
            memlet.data = self.names[memlet.data]
        return memlet

    def data(self) -> dict:
        return {canon: name for name, canon in self.names.items()
                if not self.sdfg.arrays[canon].transient}


def _unit(sdfg, state, anchor, inner: list, arguments: dict) -> Unit:
    build = _Builder(sdfg, arguments)
    inside = set(inner)
    copies = {}
    for node in inner:
        if isinstance(node, nodes.AccessNode):   # scope-local data, as in a map's body
            copies[node] = build.state.add_access(build.inner_transient(node.data))
        else:
            copies[node] = copy.deepcopy(node)
            build.state.add_node(copies[node])
    boundary_in, boundary_out, internal = [], [], []
    for node in inner:
        for edge in state.in_edges(node):
            (internal if edge.src in inside else boundary_in).append(edge)
        for edge in state.out_edges(node):
            if edge.dst not in inside:
                boundary_out.append(edge)
    for edge in boundary_in + boundary_out:
        outside = edge.src if edge in boundary_in else edge.dst
        if not isinstance(outside, nodes.AccessNode):
            raise NotSplittable(f"'{anchor.label}' is wired straight to '{outside.label}' "
                                f"without an array between them")
        if edge.data.data is not None:
            build.access_node(outside)
    for edge in internal:
        for node in (edge.src, edge.dst):
            if isinstance(node, nodes.AccessNode) and node.data not in build.names:
                build.inner_transient(node.data)
    for edge in boundary_in:
        if edge.data.data is not None:
            build.state.add_edge(build.access_node(edge.src), edge.src_conn, copies[edge.dst],
                                 edge.dst_conn, build.memlet(edge.data))
    for edge in internal:
        build.state.add_edge(copies[edge.src], edge.src_conn, copies[edge.dst], edge.dst_conn,
                             build.memlet(edge.data))
    for edge in boundary_out:
        if edge.data.data is not None:
            build.state.add_edge(copies[edge.src], edge.src_conn, build.access_node(edge.dst),
                                 edge.dst_conn, build.memlet(edge.data))
    _check_scalars(build, anchor)
    _canonical_connectors(build)
    return Unit(anchor.label, state.node_id(anchor), build.sdfg, build.data())


def _canonical_connectors(build: _Builder) -> None:
    """Scope connectors named after arrays (``IN_x``/``OUT_x``) renamed after the arrays'
    canonical names, so that the name of an array does not reach the unit's key."""
    for node in build.state.nodes():
        if not isinstance(node, (nodes.EntryNode, nodes.ExitNode)):
            continue
        renames = {}
        for conn in list(node.in_connectors) + list(node.out_connectors):
            prefix, _, rest = conn.partition("_")
            if prefix in ("IN", "OUT") and rest in build.names:
                renames[conn] = f"{prefix}_{build.names[rest]}"
        taken = (set(node.in_connectors) | set(node.out_connectors)) - set(renames)
        if not renames or len(set(renames.values())) < len(renames) or taken & set(renames.values()):
            continue   # a clash: keep the names (the key is only less shared)
        for old, new in renames.items():
            if old in node.in_connectors:
                node.add_in_connector(new, node.in_connectors[old])
                node.remove_in_connector(old)
            if old in node.out_connectors:
                node.add_out_connector(new, node.out_connectors[old])
                node.remove_out_connector(old)
        for edge in build.state.in_edges(node):
            edge.dst_conn = renames.get(edge.dst_conn, edge.dst_conn)
        for edge in build.state.out_edges(node):
            edge.src_conn = renames.get(edge.src_conn, edge.src_conn)


def _copy_unit(sdfg, state, edge, arguments: dict) -> Unit:
    build = _Builder(sdfg, arguments)
    src, dst = build.access_node(edge.src), build.access_node(edge.dst)
    build.state.add_edge(src, edge.src_conn, dst, edge.dst_conn, build.memlet(edge.data))
    _check_scalars(build, edge.dst)
    return Unit(f"copy_{edge.src.data}_{edge.dst.data}", state.node_id(edge.dst), build.sdfg,
                build.data())


def _check_scalars(build: _Builder, anchor) -> None:
    """An argument that is a scalar is passed by value: the unit may read it, never write."""
    for node in build.state.nodes():
        if isinstance(node, nodes.AccessNode) and build.state.in_degree(node) > 0:
            desc = build.sdfg.arrays[node.data]
            if isinstance(desc, dt.Scalar) and not desc.transient:
                raise NotSplittable(f"'{anchor.label}' writes a scalar")
