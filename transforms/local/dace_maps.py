"""DaCe's own map transformations, kept as data.

Each row: (name, DaCe pattern, description, options, accept, per-match
options). ``accept(sdfg, state, roles)`` adds conditions to DaCe's own;
rules per row:
1. MapTiling: blocks of 32 in each dimension that is a multiple of 32 and
   longer than one block (the others stay whole); only a map with unit
   steps (not the tile loop a tiling made). A block that does not divide
   its dimension ends in ``min(N, i + 32)``, which DaCe's memlet
   propagation widens past the array: the next step that propagates
   (MapExpansion, StateFusion, ...) then yields an invalid SDFG.
2. MapInterchange, MapCollapse, MapExpansion, TrivialMapElimination: as
   DaCe matches them; MapExpansion not on a map entered by an empty memlet
   (the inner map of a tiling: DaCe's expansion fails on it). MapExpansion leaves the inner maps' schedule to
   DaCe (sequential inside a parallel map) instead of fixing it to
   Sequential, so that MapCollapse can join them again (it wants equal
   schedules).
3. A map's OpenMP ``collapse`` never exceeds its own dimensions after a
   step: TrivialMapElimination drops dimensions and MapExpansion splits
   them off without lowering it, and ``collapse(3)`` over two loops does
   not compile.
4. AccumulateTransient: an inner map's reduction (WCR) into the outer map
   is accumulated in a local buffer started at the reduction's identity
   (0 for sums, 1 for products, the type's lowest/highest finite value
   for max/min: DaCe cannot print an infinity), then written once.
Vectorization and MapSchedule need more rules; they have their own files.
"""
import dace
import numpy as np
from dace import dtypes
from dace.frontend.operations import detect_reduction_type
from dace.sdfg import nodes
from dace.transformation import dataflow as df

from workbench.transformation_api import DacePattern, register

TILE = 32


def _tiled(size) -> bool:
    """Rule 1 for one dimension's length."""
    return not dace.symbolic.issymbolic(size) and int(size) > TILE and int(size) % TILE == 0


def _tile_sizes(entry) -> list:
    """TILE for the dimensions it tiles, the whole length (left alone) for the others."""
    sizes = [end - begin + 1 for begin, end, _ in entry.map.range]
    return [TILE if _tiled(n) else (str(n) if dace.symbolic.issymbolic(n) else int(n))
            for n in sizes]


def _tileable(sdfg, state, roles) -> bool:
    entry = roles["map_entry"]
    if any(step != 1 for _, _, step in entry.map.range):
        return False
    return any(_tiled(end - begin + 1) for begin, end, _ in entry.map.range)


def _tile_options(sdfg, state, roles) -> dict:
    return {"tile_sizes": tuple(_tile_sizes(roles["map_entry"])), "divides_evenly": True}


def _expandable(sdfg, state, roles) -> bool:
    """Rule 2: every memlet into the map comes through a connector."""
    return all(e.dst_conn is not None for e in state.in_edges(roles["map_entry"]))


_IDENTITY = {dtypes.ReductionType.Sum: lambda t: 0, dtypes.ReductionType.Product: lambda t: 1,
             dtypes.ReductionType.Max: lambda t: _limits(t).min,
             dtypes.ReductionType.Min: lambda t: _limits(t).max}


def _limits(dtype):
    kind = np.dtype(dtype.as_numpy_dtype())
    return np.finfo(kind) if kind.kind == "f" else np.iinfo(kind)


def _reduction(sdfg, state, roles):
    """(array, identity) of the first reduction between the two map exits, or None."""
    for e in state.edges_between(roles["map_exit"], roles["outer_map_exit"]):
        if e.data.wcr is None:
            continue
        kind = _IDENTITY.get(detect_reduction_type(e.data.wcr))
        if kind is None:
            return None
        value = kind(sdfg.arrays[e.data.data].dtype)
        return e.data.data, repr(float(value)) if isinstance(value, np.floating) else str(value)
    return None


def _accumulable(sdfg, state, roles) -> bool:
    return _reduction(sdfg, state, roles) is not None


def _accumulate_options(sdfg, state, roles) -> dict:
    array, identity = _reduction(sdfg, state, roles)
    return {"array": array, "identity": identity}


WRAPPED = [
    ("MapTiling", df.MapTiling, "Tile a map (blocks of 32 per dimension) for cache reuse",
     {"tile_sizes": (TILE,)}, _tileable, _tile_options),
    ("MapInterchange", df.MapInterchange, "Swap two nested maps", {}, None, None),
    ("MapCollapse", df.MapCollapse, "Collapse nested maps into one for more parallelism", {},
     None, None),
    ("MapExpansion", df.MapExpansion, "Split a multi-dimensional map into nested maps",
     {"inner_schedule": dace.ScheduleType.Default}, _expandable, None),
    ("AccumulateTransient", df.AccumulateTransient,
     "Accumulate a map's reduction in a local buffer before writing it once", {},
     _accumulable, _accumulate_options),
    ("TrivialMapElimination", df.TrivialMapElimination,
     "Remove map dimensions over a single index", {}, None, None),
]


def clamp_collapse(sdfg) -> None:
    """Rule 3, over every map of ``sdfg``."""
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, nodes.MapEntry) and node.map.collapse > len(node.map.params):
            node.map.collapse = max(1, len(node.map.params))


def _apply(self, sdfg, match):
    DacePattern.apply(self, sdfg, match)
    clamp_collapse(sdfg)


def _make(name, pattern, description, options, accept, match_options):
    attrs = {"level": "local", "name": name, "description": description, "pattern": pattern,
             "options": options, "apply": _apply}
    if accept is not None:
        attrs["accept"] = lambda self, sdfg, state, roles: accept(sdfg, state, roles)
    if match_options is not None:
        attrs["match_options"] = lambda self, sdfg, state, roles: match_options(sdfg, state, roles)
    return register(type(name, (DacePattern,), attrs))


for _row in WRAPPED:
    _make(*_row)
