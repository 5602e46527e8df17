"""MapSchedule: which maps run on all cores (OpenMP), which run sequentially.

Rules:
1. An outermost map (in no map, in an SDFG nested in none) with static
   ranges of at least ``PARALLEL_MIN`` iterations runs on all cores
   (``CPU_Multicore``), its leading dimensions collapsed into one parallel
   loop until there are at least ``CHUNKS`` of them: a [1, 128, 768] map
   would otherwise give its single outer iteration to one thread. The
   innermost dimension is never collapsed (it stays a plain, vectorizable
   loop).
2. An outermost map with fewer iterations runs sequentially: starting a
   parallel region costs more than the work.
3. A map inside another map that was made parallel runs sequentially (no
   nested parallel regions).
4. A match is offered only where it changes the schedule DaCe would pick
   (``Default`` is parallel, collapse 1, outermost; sequential inside).
Bytes moved stay the same.
"""
import dace
from dace import symbolic
from dace.sdfg import nodes

from transforms.graph import outside_maps
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.transformation_api import Transformation, register

PARALLEL_MIN = 4096
CHUNKS = 64
_SEQ, _PAR = dace.ScheduleType.Sequential, dace.ScheduleType.CPU_Multicore


def _extents(entry):
    sizes = []
    for begin, end, step in entry.map.range:
        size = (end - begin) // step + 1
        if symbolic.issymbolic(size):
            return None
        sizes.append(int(size))
    return sizes


def choice(sdfg, state, entry):
    """(schedule, collapse) the rules pick for ``entry``, or None to leave it."""
    current = entry.map.schedule
    if not outside_maps(sdfg, state, entry):
        return (_SEQ, 1) if current == _PAR else None
    sizes = _extents(entry)
    if sizes is None or current not in (dace.ScheduleType.Default, _SEQ, _PAR):
        return None
    total = 1
    for n in sizes:
        total *= n
    if total < PARALLEL_MIN:
        return None if current == _SEQ else (_SEQ, 1)
    collapse, chunks = 1, sizes[0]
    while chunks < CHUNKS and collapse < len(sizes) - 1:
        chunks *= sizes[collapse]
        collapse += 1
    effective = {_PAR: (_PAR, entry.map.collapse), _SEQ: (_SEQ, 1)}.get(current, (_PAR, 1))
    return None if effective == (_PAR, collapse) else (_PAR, collapse)


@register
class MapSchedule(Transformation):
    level = "local"
    name = "MapSchedule"
    description = "Run an outer map on all cores (collapsing small leading dimensions) " \
                  "or a small or inner one sequentially"

    def find(self, sdfg):
        matches = []
        for node, state in sdfg.all_nodes_recursive():
            if not isinstance(node, nodes.MapEntry):
                continue
            picked = choice(state.sdfg, state, node)
            if picked is None:
                continue
            schedule, collapse = picked
            what = (f"parallelize {node.map.label} (collapse {collapse})" if schedule == _PAR
                    else f"run {node.map.label} sequentially")
            matches.append(self.match({"map": nodeid.identity(state.sdfg, state, node)}, what,
                                      {"schedule": schedule.name, "collapse": collapse}))
        return matches

    def apply(self, sdfg, match):
        _, _, roles = nodeid.resolve_all(sdfg, match.where_dict())
        entry = roles["map"]
        if not isinstance(entry, nodes.MapEntry):
            raise TransformationError(f"{match.description}: not a map")
        options = match.options_dict()
        entry.map.schedule = dace.ScheduleType[options["schedule"]]
        entry.map.collapse = int(options.get("collapse", 1))
