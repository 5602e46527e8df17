"""What a transformation and a match are, and the registry they live in.

The core defines the contract; ``transforms/`` (and a user's own package,
found through the ``dace_workbench.transformations`` entry-point group)
implements it. A ``Match`` names the nodes it touches by stable identities
(ONNX node names, array names, labels: see ``workbench.nodeid``), never by
list positions, so a recipe replays on a fresh import of the same model.
"""
import copy
import json
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import dace

from workbench import nodeid
from workbench.errors import TransformationError, WorkbenchError
from workbench.importer.symbolic import symbolic_refusal

LEVELS = ("local", "fusion", "layout", "global")
ENTRY_POINT_GROUP = "dace_workbench.transformations"


@dataclass(frozen=True)
class Match:
    """One place a transformation applies."""
    transformation: str
    where: tuple              # ((role, node identity), ...): what ``apply`` needs
    description: str = ""     # for people: "fuse /Relu into /fc1/Gemm"
    options: tuple = ()       # ((name, value), ...) transformation-specific choices
    expr_index: int = 0
    # Predicted change in bytes moved (after - before), filled by the session.
    delta_bytes: Optional[int] = field(default=None, compare=False)

    @property
    def nodes(self) -> tuple:
        """Identities of the nodes this match touches (GUI highlight, selection)."""
        return tuple(ident for _, ident in self.where)

    def where_dict(self) -> dict:
        return dict(self.where)

    def options_dict(self) -> dict:
        return dict(self.options)

    def to_json(self) -> dict:
        """The one serialization of a match: history entries, recipes and scripts record
        this (as JSON has it: tuples become lists, inside option values too, so a
        reopened step reads the same)."""
        return {"transformation": self.transformation,
                "where": [list(w) for w in self.where],
                "description": self.description,
                "options": json.loads(json.dumps([list(o) for o in self.options])),
                "expr_index": self.expr_index}

    @staticmethod
    def from_json(d: dict) -> "Match":
        """A match from ``to_json``'s dict (a history entry or a recipe step)."""
        return Match(d["transformation"], tuple(tuple(w) for w in d.get("where", ())),
                     d.get("description", ""), tuple(tuple(o) for o in d.get("options", ())),
                     d.get("expr_index", 0))


@dataclass(frozen=True)
class Refusal:
    """Why a transformation does not apply to one node, for people: "the Add's other
    input is read by 2 nodes", "no BLAS library found". A plan (see
    ``OperatorTransformation``) returns one instead of None; it is false like None,
    so code that only asks "did it plan?" reads it as no. ``node`` (an identity) and
    ``transformation`` are filled in by whoever collects it."""
    reason: str
    node: str = ""
    transformation: str = ""

    def __bool__(self) -> bool:
        return False


class Transformation:
    """Base class: subclasses set ``level``, ``name``, ``description``."""
    level: str = ""
    name: str = ""
    description: str = ""
    # True for a transformation that needs the weights ({SDFG array name: numpy
    # array}; which arrays are weights, or their values): constant folding,
    # weight pre-packing. It is then called as ``find(sdfg, weights)`` (read
    # only) and ``apply(sdfg, match, weights)`` with a private copy of the
    # session's dict, in which it adds, replaces or deletes entries (never
    # writes into an array: history steps share them); the session keeps the
    # copy only if the whole step succeeds. See ``find_matches``/``apply_match``.
    needs_weights: bool = False
    # True for a global transformation whose decision reads the whole program (lifetimes,
    # every use of an array) but whose rewrite stays inside the match's region: a
    # session decides on the live graph (``decide``) and rewrites a copy of the region
    # with that decision, instead of copying the whole graph for the step.
    region_rewrite: bool = False
    # True for a transformation that changes where values live, never what moves
    # (buffer sharing, allocation once): its byte prediction is 0 without copying the
    # whole program (10 s on a ViT-tiny training program). Measured under full checks.
    same_bytes: bool = False
    # True when checked on programs whose sizes are symbols (``tests/test_symbolic.py``);
    # the others are not offered there and say why (``importer.symbolic.symbolic_refusal``)
    symbolic: bool = False

    def find(self, sdfg: dace.SDFG, weights: dict = None) -> List[Match]:
        """Every match in ``sdfg``; must not modify it (``weights`` is given only
        when ``needs_weights``)."""
        raise NotImplementedError

    def apply(self, sdfg: dace.SDFG, match: Match, weights: dict = None) -> None:
        """Apply ``match`` to ``sdfg`` in place; raise TransformationError if it no
        longer applies. ``weights`` is given only when ``needs_weights``.

        The check must be the whole of ``find``'s condition on the graph as it is:
        recipes apply matches found before other steps of their pass changed the graph
        (``recipe_run._apply_all``), and recorded steps replay on other sessions."""
        raise NotImplementedError

    def decide(self, sdfg: dace.SDFG, match: Match, weights: dict = None):
        """What ``apply`` would decide for ``match`` on ``sdfg``, which it must not
        modify: naming graph objects by nodes and edges only, so that a caller can map
        them onto a copy and hand it to ``apply(..., decided=)``. Raises
        TransformationError as ``apply`` does when the match no longer applies. Only
        for ``region_rewrite`` transformations."""
        raise NotImplementedError(f"{self.name} does not decide apart from rewriting")

    def refusals(self, sdfg: dace.SDFG, weights: dict = None, nodes: set = None) -> List[Refusal]:
        """Why it does not apply to the nodes it looked at, each a ``Refusal`` naming its
        node (only nodes whose identity is in ``nodes``, when given); read only, like
        ``find``. A node that a match of this transformation touches gets none (one
        option of a node may be refused while another matches). A transformation that
        does not say gives none. Called through ``refusals`` below."""
        return []

    def match(self, where: dict, description: str = "", options: dict = None,
              expr_index: int = 0) -> Match:
        return Match(self.name, tuple(where.items()), description,
                     tuple(sorted((options or {}).items())), expr_index)


class DacePattern(Transformation):
    """Wraps one of DaCe's own pattern transformations."""
    pattern: type = None
    options: dict = {}

    def accept(self, sdfg, state, nodes: dict) -> bool:
        """Extra conditions on a DaCe match (default: all of them)."""
        return True

    def match_options(self, sdfg, state, nodes: dict) -> dict:
        """Options for this match only, on top of ``options`` (JSON values)."""
        return {}

    def find(self, sdfg):
        from dace.transformation.optimizer import Optimizer
        matches = []
        for xform in Optimizer(sdfg).get_pattern_matches(patterns=[self.pattern],
                                                          options=[self.options]):
            owner = sdfg.cfg_list[xform.cfg_id]
            state = owner.node(xform.state_id) if xform.state_id >= 0 else None
            roles = _roles(xform)
            if not self.accept(owner, state, roles):
                continue
            where = {role: nodeid.identity(owner, state, node) for role, node in roles.items()}
            matches.append(self.match(where, self.describe(roles),
                                      self.match_options(owner, state, roles),
                                      expr_index=xform.expr_index))
        return matches

    def describe(self, roles: dict) -> str:
        return ", ".join(nodeid.short(n) for n in roles.values())

    def apply(self, sdfg, match):
        owner, state, nodes = nodeid.resolve_all(sdfg, match.where_dict())
        options = {**self.options, **match.options_dict()} or None
        # the wrapper's own conditions too: a recorded match (a recipe, a replay) is not
        # found again, and what they refuse would not compile or not be safe
        if not self.pattern.can_be_applied_to(owner, options=options,
                                              expr_index=match.expr_index, **nodes) \
                or not self.accept(owner, state, nodes):
            raise TransformationError(f"{self.name} no longer applies to {match.description}")
        self.pattern.apply_to(owner, options=options, expr_index=match.expr_index,
                              verify=False, save=False, **nodes)
        whole_array_reshapes(sdfg)


def whole_array_reshapes(sdfg: dace.SDFG) -> None:
    """Give each nested SDFG connector that sees its array reshaped the whole array.

    DaCe's memlet propagation (run after most of its transformations) squeezes
    a nested SDFG's inner subset into the outer array even when the inner
    array has another shape of the same size (how operator implementations
    see data reshaped), which yields an out-of-bounds outer memlet. Such a
    connector always reads or writes the whole array.
    """
    from dace.sdfg import nodes as nd
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, nd.NestedSDFG):
            continue
        edges = [(e, e.dst_conn, e.src) for e in state.in_edges(node)] + \
                [(e, e.src_conn, e.dst) for e in state.out_edges(node)]
        for edge, conn, other in edges:
            inner = node.sdfg.arrays.get(conn)
            if edge.data.data is None or inner is None or not isinstance(other, nd.AccessNode):
                continue
            outer = state.sdfg.arrays[edge.data.data]
            if tuple(inner.shape) != tuple(outer.shape) and inner.total_size == outer.total_size:
                edge.data.subset = dace.subsets.Range.from_array(outer)
                edge.data.volume = outer.total_size


def _roles(xform) -> dict:
    """Pattern node name -> matched node (or state) of a DaCe match."""
    out = {}
    for name in type(xform)._get_pattern_nodes():
        try:
            out[name] = getattr(xform, name)
        except (KeyError, ValueError, AttributeError):
            continue  # a node of another expression of the pattern
    return out


_REGISTRY: Dict[str, Transformation] = {}
_RECIPE_DIRS: List[str] = []   # folders of ``NAME.json`` recipes (see workbench.recipe)
# Whole-program rules every step's result must keep: f(sdfg) -> lines, each a broken rule
# (the bundled library registers buffer_order: no value read after its buffer is reused).
_CHECKS: List[Callable] = []
_loaded = False
_LOAD_LOCK = threading.RLock()   # held while the entry points load (see load_plugins)
_LOADING = threading.Event()     # set while they do


def register(cls):
    """Class decorator: register one instance under ``cls.name``."""
    if cls.level not in LEVELS:
        raise ValueError(f"{cls.__name__}.level must be one of {LEVELS}, not {cls.level!r}")
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"transformation name {cls.name!r} missing or registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def register_recipes(folder) -> None:
    """Add a folder of ``NAME.json`` recipes (the bundled library's, a plug-in's)."""
    folder = str(folder)
    if folder not in _RECIPE_DIRS:
        _RECIPE_DIRS.append(folder)


def recipe_dirs() -> List[str]:
    """The registered recipe folders, in registration order."""
    load_plugins()
    return list(_RECIPE_DIRS)


def load_plugins() -> None:
    """Load every package of the entry-point group, once: the bundled library
    (``transforms``, named in pyproject.toml) and users' plug-ins alike.

    Another thread asking meanwhile waits for the whole registry: the window's
    listing and its "Not offered" lane may both be first, and the one that came
    second saw a half-loaded registry (no refusals, or a short list) before."""
    global _loaded
    if _loaded and not _LOADING.is_set():
        return
    with _LOAD_LOCK:
        if _loaded:
            return   # a plug-in that asks for the registry while it loads gets no recursion
        _LOADING.set()   # before _loaded: a thread that sees _loaded must see this too
        _loaded = True
        try:
            from importlib.metadata import entry_points
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                ep.load()
        finally:
            _LOADING.clear()
    if not _REGISTRY:   # not even the bundled library: the install predates its entry point
        _loaded = False
        raise WorkbenchError(f"no transformation library is registered in the entry-point "
                             f"group '{ENTRY_POINT_GROUP}'; install the workbench "
                             f"(pip install -e .) so the bundled one is found.")


def get(name: str) -> Transformation:
    load_plugins()
    if name not in _REGISTRY:
        raise TransformationError(f"unknown transformation '{name}'; known: "
                                  f"{', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def all_transformations(level: Optional[str] = None) -> List[Transformation]:
    load_plugins()
    if level is not None and level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}")
    return [t for t in _REGISTRY.values() if level is None or t.level == level]


def by_level() -> dict:
    return {level: [{"name": t.name, "description": t.description}
                    for t in all_transformations(level)] for level in LEVELS}


def find_matches(t: Transformation, sdfg: dace.SDFG, weights: dict = None) -> List[Match]:
    """``t.find``, handing ``weights`` only to a transformation that needs them
    (without them it finds nothing: it cannot tell weights from inputs)."""
    if symbolic_refusal(t, sdfg):
        return []
    with nodeid.graph_unchanged():
        if not t.needs_weights:
            return t.find(sdfg)
        return [] if weights is None else t.find(sdfg, weights)


def explains(t: Transformation) -> bool:
    """Whether ``t`` says why it does not apply (overrides ``Transformation.refusals``)."""
    return type(t).refusals is not Transformation.refusals


def refusals(t: Transformation, sdfg: dace.SDFG, weights: dict = None,
             nodes=None) -> List[Refusal]:
    """``t``'s refusals for the nodes of a selection (identities, ONNX node names or
    nodes, as ``Session.transformations`` takes them; None: every node), weights
    handed as ``find_matches`` hands them, each with ``transformation`` set. Read only."""
    if symbolic_refusal(t, sdfg):   # once per selected node, not for every node of the graph
        return [Refusal(symbolic_refusal(t, sdfg), node, t.name)
                for node in (sorted(nodeid.selection(sdfg, nodes)) if nodes is not None else ())]
    if not explains(t) or (t.needs_weights and weights is None):
        return []
    with nodeid.graph_unchanged():
        wanted = None if nodes is None else nodeid.selection(sdfg, nodes)
        refused = t.refusals(sdfg, weights if t.needs_weights else None, wanted)
    out, seen = [], set()
    for r in refused:
        if (wanted is not None and r.node not in wanted) or (r.node, r.reason) in seen:
            continue
        seen.add((r.node, r.reason))
        out.append(r if r.transformation else Refusal(r.reason, r.node, t.name))
    return out


def register_check(check: Callable) -> None:
    """Add a rule every step's result must keep (see ``_CHECKS``)."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def apply_match(t: Transformation, sdfg: dace.SDFG, match: Match, weights: dict = None,
                original: dace.SDFG = None, checks: bool = True, decided=None) -> None:
    """``t.apply``, handing ``weights`` (changed in place) only to a transformation
    that needs them; a result that breaks a registered rule that ``original`` (the
    SDFG before the step, when given; or a function that builds it) kept is a
    TransformationError (``sdfg`` is then
    half-changed: callers apply to a copy). ``checks=False`` leaves the rules to the
    caller (a step applied to its region is checked on the whole graph it joins).
    ``decided``: ``t.decide``'s answer on the whole program, mapped onto ``sdfg``."""
    extra = {} if decided is None else {"decided": decided}
    if symbolic_refusal(t, sdfg):
        raise TransformationError(f"{symbolic_refusal(t, sdfg)}. The session is unchanged.")
    if not t.needs_weights:
        t.apply(sdfg, match, **extra)
    elif weights is None:
        raise TransformationError(f"{t.name} needs the model's weights: apply it through a "
                                  f"Session (ws.apply)")
    else:
        t.apply(sdfg, match, weights, **extra)
    if not checks:
        return
    for check in _CHECKS:
        broken = check(sdfg)
        if broken and original is not None:
            original = original if isinstance(original, dace.SDFG) else original()  # builder
            before = set(check(original))
            broken = [line for line in broken if line not in before]
        if broken:
            raise refused(t, match, broken)


def registered_checks() -> tuple:
    """The rules every step's result must keep (``register_check``)."""
    return tuple(_CHECKS)


def refused(t: Transformation, match: Match, broken: list) -> TransformationError:
    """The error for a step whose result breaks the rules ``broken`` names."""
    return TransformationError(
        f"{t.name} on {match.description or match.nodes} refused: {broken[0]}"
        f"{f' (and {len(broken) - 1} more)' if len(broken) > 1 else ''}; "
        f"the result would read a value after its buffer is reused. "
        f"The session is unchanged.")


def apply_to_copy(sdfg: dace.SDFG, match: Match, weights: dict = None) -> dace.SDFG:
    """The SDFG ``match`` would produce, leaving ``sdfg`` (and ``weights``) untouched."""
    trial = copy.deepcopy(sdfg)
    apply_match(get(match.transformation), trial, match,
                None if weights is None else dict(weights), original=sdfg)
    return trial

