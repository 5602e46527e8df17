"""Every change the workbench makes to DaCe's own code, in one list, installed by ``install()``.

DaCe has no hooks for what these change, so each patch replaces one DaCe
function (or one configuration value) with the workbench's. Each record in
``PATCHES`` names what it replaces, the DaCe version it was written for, the
replacement, DaCe's own original (kept so that tests can ask both the same
question: tests/test_dace_patches.py) and why it exists.

Rules:
1. Nothing is patched on import. ``install()`` is called explicitly by the
   modules that build or change SDFGs (the operator registry at import, every
   build); it is idempotent and thread-safe.
2. A patch relies on the internals of the DaCe it was written for (``_nodes``,
   ``_nx``, the arguments of ``_run_liveoutput``). On any other DaCe version
   ``install()`` installs none of them (they depend on one another: the node
   position cache is only right while ``add_node``/``remove_node`` are
   patched too) and warns once per process, naming both versions.
3. A replacement answers exactly as DaCe's own does, only faster (or, for the
   CMake seed, with the same result); ``store_history`` is the one deliberate
   difference, and it only drops a record the workbench keeps itself.
"""
import operator
import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, List

import dace
from dace import dtypes
from dace.codegen import compiler as _compiler
from dace.config import Config
from dace.sdfg import graph as _graph
from dace.sdfg import state as _state
from dace.sdfg.graph import NodeNotFoundError

WRITTEN_FOR = "1.0.2"
_MISSING = object()   # an attribute this DaCe does not have (another version)


@dataclass(frozen=True)
class Patch:
    """One DaCe attribute replaced: ``owner.attribute = replacement``."""
    name: str
    target: str            # dotted name of what is replaced, for people and warnings
    owner: Any             # the module or class that holds it
    attribute: str
    replacement: Any
    why: str
    written_for: str = WRITTEN_FOR
    original: Any = None   # DaCe's own, read when this module was imported

    def apply(self) -> None:
        setattr(self.owner, self.attribute, self.replacement)

    def restore(self) -> None:
        setattr(self.owner, self.attribute, self.original)

    def installed(self) -> bool:
        return getattr(self.owner, self.attribute, _MISSING) is self.replacement


@dataclass(frozen=True)
class ConfigPatch(Patch):
    """One DaCe configuration value set (``Config.set(attribute, value=replacement)``)."""

    def apply(self) -> None:
        Config.set(self.attribute, value=self.replacement)

    def restore(self) -> None:
        Config.set(self.attribute, value=self.original)

    def installed(self) -> bool:
        return Config.get(self.attribute) == self.replacement


def _patch(name, owner, attribute, replacement, why, kind=Patch) -> Patch:
    target = (f"{owner.__name__}.{attribute}" if isinstance(owner, types.ModuleType)
              else f"{owner.__module__}.{owner.__qualname__}.{attribute}")
    original = (Config.get(attribute) if kind is ConfigPatch
                else getattr(owner, attribute, None))
    return kind(name=name, target=target, owner=owner, attribute=attribute,
                replacement=replacement, why=" ".join(why.split()), original=original)


# --- the replacements -------------------------------------------------------

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


def _missing():
    raise NodeNotFoundError


_dace_add_node = _graph.OrderedDiGraph.add_node
_dace_remove_node = _graph.OrderedDiGraph.remove_node


def add_node(self, node):
    """``OrderedDiGraph.add_node``, forgetting this graph's node positions first."""
    _POSITIONS.pop(id(self), None)
    return _dace_add_node(self, node)


def remove_node(self, node):
    """``OrderedDiGraph.remove_node``, forgetting this graph's node positions first."""
    _POSITIONS.pop(id(self), None)
    return _dace_remove_node(self, node)


def in_degree(self, node) -> int:
    """``OrderedDiGraph.in_degree``: the node's own edge dict holds the same edges as
    networkx's adjacency (parallel edges and self-loops included)."""
    held = self._nodes.get(node)
    return len(held[0]) if held is not None else self._nx.in_degree(node)


def out_degree(self, node) -> int:
    held = self._nodes.get(node)
    return len(held[1]) if held is not None else self._nx.out_degree(node)


_dace_run_liveoutput = getattr(_compiler, "_run_liveoutput", None)


def run_liveoutput(command, shell=False, cwd=None, output_stream=None):
    """``compiler._run_liveoutput``; a CMake configure in a new folder starts from a seed."""
    # Imported here, not above: workbench.build installs these patches, and this
    # module must stay importable on its own (the operator registry imports it first).
    from workbench.build.configure_seed import run_seeded
    return run_seeded(_dace_run_liveoutput, command, shell=shell, cwd=cwd,
                      output_stream=output_stream)


# --- the list ---------------------------------------------------------------

_ODG = _graph.OrderedDiGraph
_POSITIONS_WHY = """
    ``state.node_id(node)`` and ``state.node(i)`` (code generation and scope
    lookups call them tens of thousands of times on a real model) walk the node
    dict in a Python generator: 7 % of building a ViT-tiny export. A list of the
    dict's keys and a position per node answer in O(1), kept per graph until its
    next ``add_node``/``remove_node`` or until its node dict is replaced (DaCe
    nodes hash and compare by identity, so the node itself is found, as the walk
    found it). Rebuilding the list per question was still 15 s of a ViT-tiny
    build (79,000 questions on states of thousands of nodes)."""
_DEGREE_WHY = """
    ``in_degree``/``out_degree`` ask networkx's degree views (6 million calls,
    39 s of a profiled ViT-tiny build, mostly from ``sink_nodes`` in the
    inliner's checks); the count of the node's own in/out edge dict is the same
    number."""

PATCHES: List[Patch] = [
    _patch("caller position", _state, "_getdebuginfo", caller_debuginfo, """
        Every node DaCe adds (``add_access``, ``add_read``, ``add_mapped_tasklet``,
        ...) asks ``dace.sdfg.state._getdebuginfo`` for its caller's file and line.
        DaCe answers with ``inspect.stack()``, which builds every frame of the stack
        with its source context: it reads source files and scans ``sys.modules``
        once per frame. Importing, expanding and tuning a small BERT export spent
        more than half its time there (cProfile: 73 s of 132 s). The frame two
        levels up names the same file and line; ``sys._getframe`` reaches it
        directly, and the DebugInfo is the same."""),
    _patch("cycle check", _ODG, "has_cycles", has_cycles, """
        ``validate_state`` asks ``state.has_cycles()``, which runs networkx's
        ``find_cycle`` (a generator-based edge DFS) from the state's source nodes:
        15 % of a step of the ``auto`` recipe on an EfficientNet-B0 export. The
        same question, a directed cycle reachable from a source node, is answered
        by an iterative three-colour DFS over the same adjacency (a cycle that no
        source reaches stays unreported, as in DaCe)."""),
    _patch("node position", _ODG, "node_id", node_id, _POSITIONS_WHY),
    _patch("node at position", _ODG, "node", node, _POSITIONS_WHY),
    _patch("add node", _ODG, "add_node", add_node, """
        Keeps the node positions of ``node_id``/``node`` right: adding a node is
        one of the two ways DaCe 1.0.2 changes a graph's node order, so the graph's
        cached positions are dropped first; DaCe's own ``add_node`` does the rest.
        """ + _POSITIONS_WHY),
    _patch("remove node", _ODG, "remove_node", remove_node, """
        Keeps the node positions of ``node_id``/``node`` right: removing a node is
        the other way DaCe 1.0.2 changes a graph's node order, so the graph's
        cached positions are dropped first; DaCe's own ``remove_node`` does the
        rest.""" + _POSITIONS_WHY),
    _patch("in degree", _ODG, "in_degree", in_degree, _DEGREE_WHY),
    _patch("out degree", _ODG, "out_degree", out_degree, _DEGREE_WHY),
    _patch("no transformation history", Config, "store_history", False, """
        DaCe records every transformation applied through its own API (each
        library-node expansion, each inlining) on the SDFG, and the first one
        stores a deep copy of the whole SDFG in ``orig_sdfg``, which every later
        deepcopy and JSON of the SDFG then carries. After one ExpandToMaps step on
        a ViT-tiny export (524 operators) the session's JSON went from 2.6 to 5.1
        MB and a copy from 0.40 to 0.67 s; every build paid one more copy of the
        whole program. The workbench keeps its own history
        (``workbench.session.history``), so DaCe's is off.""", kind=ConfigPatch),
    _patch("seeded CMake configure", _compiler, "_run_liveoutput", run_liveoutput, """
        Every new program folder pays CMake's configure (~0.65-0.9 s here, mostly
        compiler identification and ``find_package(OpenMP)``), and its results are
        the same for every program built with the same command. DaCe 1.0.2 has no
        hook around its configure call, so the function that runs it,
        ``dace.codegen.compiler._run_liveoutput``, is replaced: a configure in a
        folder without a CMake cache starts from an earlier folder's
        (``workbench.build.configure_seed`` holds the rules), every other command
        passes through unchanged. ``WORKBENCH_FAST_BUILD=0`` turns seeding off."""),
]

_lock = threading.Lock()
_warned = False


def dace_version() -> str:
    return dace.__version__


def install() -> bool:
    """Install every patch (once; later calls do nothing). On a DaCe version the
    patches were not written for, install none and warn once. True if they are in."""
    global _warned
    version = dace_version()
    with _lock:
        foreign = sorted({p.written_for for p in PATCHES} - {version})
        if foreign:
            if not _warned:
                _warned = True
                warnings.warn(f"DaCe {version} is installed; the workbench's DaCe patches were "
                              f"written for DaCe {', '.join(foreign)} and are not installed "
                              f"(builds and steps will be slower)", RuntimeWarning, stacklevel=2)
            return False
        if all(p.installed() for p in PATCHES):
            return True
        _POSITIONS.clear()   # positions read while add_node/remove_node were DaCe's own
        for p in PATCHES:
            p.apply()
        return True


def uninstall() -> None:
    """Put DaCe's own functions back (for tests that compare with them)."""
    with _lock:
        for p in PATCHES:
            if p.installed():
                p.restore()
        _POSITIONS.clear()


def patch(name: str) -> Patch:
    return next(p for p in PATCHES if p.name == name)
