"""Costs of DaCe 1.0.2 that every step, import and build pays, removed at the source.

1. Every node DaCe adds (``add_access``, ``add_read``, ``add_mapped_tasklet``,
   ...) asks ``dace.sdfg.state._getdebuginfo`` for its caller's file and line.
   DaCe answers with ``inspect.stack()``, which builds every frame of the stack
   with its source context: it reads source files and scans ``sys.modules``
   once per frame. Importing, expanding and tuning a small BERT export spent
   more than half its time there (cProfile: 73 s of 132 s). The frame two
   levels up names the same file and line; ``sys._getframe`` reaches it
   directly, and the DebugInfo is the same.
2. ``validate_state`` asks ``state.has_cycles()``, which runs networkx's
   ``find_cycle`` (a generator-based edge DFS) from the state's source nodes:
   15 % of a step of the ``auto`` recipe on an EfficientNet-B0 export. The
   same question, a directed cycle reachable from a source node, is answered
   by an iterative three-colour DFS over the same adjacency (a cycle that no
   source reaches stays unreported, as in DaCe).
3. ``state.node_id(node)`` and ``state.node(i)`` (code generation and scope
   lookups call them tens of thousands of times on a real model) walk the
   node dict in a Python generator: 7 % of building a ViT-tiny export. A list
   of the dict's keys and a position per node answer in O(1), kept per graph
   until its next ``add_node``/``remove_node`` or until its node dict is replaced
   (DaCe nodes hash and compare by
   identity, so the node itself is found, as the walk found it). Rebuilding
   the list per question was still 15 s of a ViT-tiny build (79,000 questions
   on states of thousands of nodes).
4. DaCe records every transformation applied through its own API (each
   library-node expansion, each inlining) on the SDFG, and the first one
   stores a deep copy of the whole SDFG in ``orig_sdfg``, which every later
   deepcopy and JSON of the SDFG then carries. After one ExpandToMaps step on
   a ViT-tiny export (524 operators) the session's JSON went from 2.6 to
   5.1 MB and a copy from 0.40 to 0.67 s; every build paid one more copy
   of the whole program. The workbench keeps its own history
   (``workbench.session.history``), so DaCe's (config ``store_history``) is off.
5. ``in_degree``/``out_degree`` ask networkx's degree views (6 million calls,
   39 s of a profiled ViT-tiny build, mostly from ``sink_nodes`` in the
   inliner's checks); the count of the node's own in/out edge dict is the
   same number.

``install`` is called by the modules that build or change SDFGs (the operator
registry, the build, the transformation base); it is idempotent.
"""
import operator
import sys
import weakref

from dace import dtypes
from dace.sdfg import graph as _graph
from dace.sdfg.graph import NodeNotFoundError
from dace.sdfg import state as _state


def caller_debuginfo(old_dinfo=None) -> dtypes.DebugInfo:
    """``_getdebuginfo``'s contract: ``old_dinfo`` if given, else the position of the
    code that called the ``add_*`` method that called this."""
    if old_dinfo is not None:
        return old_dinfo
    frame = sys._getframe(2)
    line = frame.f_lineno
    return dtypes.DebugInfo(line, 0, line, 0, frame.f_code.co_filename)


def has_cycles(self) -> bool:
    """``OrderedDiGraph.has_cycles``: a directed cycle reachable from a source node."""
    succ = self._nx.succ
    GREY, BLACK = 1, 2
    colour = {}
    for root in self.source_nodes():
        if root in colour:
            continue
        colour[root] = GREY
        stack = [(root, iter(succ[root]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
            elif colour.get(child) == GREY:
                return True
            elif child not in colour:
                colour[child] = GREY
                stack.append((child, iter(succ[child])))
    return False


# graph id -> (weak reference to the graph, its nodes in order, node -> position, the
# node dict they were read from); dropped by every add_node and remove_node of that
# graph (the only writers of a graph's node order in DaCe 1.0.2) and stale once the
# node dict is replaced (a session's working graph installs a step's node dict
# whole), so an entry always matches the graph it names.
_POSITIONS = {}


def _positions(graph):
    held = _POSITIONS.get(id(graph))
    if held is None or held[0]() is not graph or held[3] is not graph._nodes:
        order = list(graph._nodes)
        key = id(graph)
        held = (weakref.ref(graph, lambda _, key=key: _POSITIONS.pop(key, None)), order,
                {n: i for i, n in enumerate(order)}, graph._nodes)
        _POSITIONS[key] = held
    return held


def node_id(self, node) -> int:
    """``OrderedDiGraph.node_id``: the node's position in insertion order."""
    try:
        return _positions(self)[2][node]
    except (KeyError, TypeError):
        raise NodeNotFoundError(node) from None


def node(self, id: int):  # noqa: A002 (DaCe's parameter name)
    """``OrderedDiGraph.node``: the node at position ``id`` (no negative positions)."""
    try:
        position = operator.index(id)
    except TypeError:   # an odd type: DaCe's own walk decides, as before
        return next((n for i, n in enumerate(self._nodes) if i == id), None) or _missing()
    if not 0 <= position < len(self._nodes):
        raise NodeNotFoundError
    return _positions(self)[1][position]


_dace_add_node = _graph.OrderedDiGraph.add_node
_dace_remove_node = _graph.OrderedDiGraph.remove_node


def add_node(self, node):
    _POSITIONS.pop(id(self), None)
    return _dace_add_node(self, node)


def remove_node(self, node):
    _POSITIONS.pop(id(self), None)
    return _dace_remove_node(self, node)


def _missing():
    raise NodeNotFoundError


def in_degree(self, node) -> int:
    """``OrderedDiGraph.in_degree``: the node's own edge dict holds the same edges as
    networkx's adjacency (parallel edges and self-loops included)."""
    held = self._nodes.get(node)
    return len(held[0]) if held is not None else self._nx.in_degree(node)


def out_degree(self, node) -> int:
    held = self._nodes.get(node)
    return len(held[1]) if held is not None else self._nx.out_degree(node)


def install() -> None:
    from dace.config import Config
    Config.set("store_history", value=False)
    _state._getdebuginfo = caller_debuginfo
    _graph.OrderedDiGraph.has_cycles = has_cycles
    _graph.OrderedDiGraph.node_id = node_id
    _graph.OrderedDiGraph.node = node
    _graph.OrderedDiGraph.add_node = add_node
    _graph.OrderedDiGraph.in_degree = in_degree
    _graph.OrderedDiGraph.out_degree = out_degree
    _graph.OrderedDiGraph.remove_node = remove_node
