"""What a transformation and a match are, and the registry they live in.

The core defines the contract; ``transforms/`` (and a user's own package,
found through the ``dace_workbench.transformations`` entry-point group)
implements it. A ``Match`` names the nodes it touches by stable identities
(ONNX node names, array names, labels: see ``workbench.nodeid``), never by
list positions, so a recipe replays on a fresh import of the same model.
"""
import copy
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

import dace

from workbench import nodeid
from workbench.errors import TransformationError

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
        d = asdict(self)
        d.pop("delta_bytes")
        d["where"] = [list(w) for w in self.where]
        d["options"] = [list(o) for o in self.options]
        return d

    @staticmethod
    def from_json(d: dict) -> "Match":
        return Match(d["transformation"], tuple(tuple(w) for w in d["where"]),
                     d.get("description", ""), tuple(tuple(o) for o in d.get("options", ())),
                     d.get("expr_index", 0))


class Transformation:
    """Base class: subclasses set ``level``, ``name``, ``description``."""
    level: str = ""
    name: str = ""
    description: str = ""

    def find(self, sdfg: dace.SDFG) -> List[Match]:
        """Every match in ``sdfg``; must not modify it."""
        raise NotImplementedError

    def apply(self, sdfg: dace.SDFG, match: Match) -> None:
        """Apply ``match`` to ``sdfg`` in place; raise TransformationError if it no
        longer applies."""
        raise NotImplementedError

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
            matches.append(self.match(where, self.describe(roles), expr_index=xform.expr_index))
        return matches

    def describe(self, roles: dict) -> str:
        return ", ".join(nodeid.short(n) for n in roles.values())

    def apply(self, sdfg, match):
        owner, state, nodes = nodeid.resolve_all(sdfg, match.where_dict())
        if not self.pattern.can_be_applied_to(owner, options=self.options or None,
                                              expr_index=match.expr_index, **nodes):
            raise TransformationError(f"{self.name} no longer applies to {match.description}")
        self.pattern.apply_to(owner, options=self.options or None, expr_index=match.expr_index,
                              verify=False, save=False, **nodes)


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
_loaded = False


def register(cls):
    """Class decorator: register one instance under ``cls.name``."""
    if cls.level not in LEVELS:
        raise ValueError(f"{cls.__name__}.level must be one of {LEVELS}, not {cls.level!r}")
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"transformation name {cls.name!r} missing or registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def load_plugins() -> None:
    """Import the bundled library and any entry-point plug-ins, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    try:
        import transforms  # noqa: F401 (registers the bundled library)
    except ImportError:
        pass
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


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


def apply_to_copy(sdfg: dace.SDFG, match: Match) -> dace.SDFG:
    """The SDFG ``match`` would produce, leaving ``sdfg`` untouched."""
    trial = copy.deepcopy(sdfg)
    get(match.transformation).apply(trial, match)
    return trial

