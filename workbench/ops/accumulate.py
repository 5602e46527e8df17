"""Maps that accumulate: each output element combines many terms.

``mapped_reduction`` puts a sequential map over the reduced parameters
inside a parallel map over the output elements. The write-conflict
resolution (WCR) then combines terms within one thread, so DaCe emits a
plain ``+=`` (or max) instead of an atomic per term, which a single flat
map over all parameters would need.

The parallel map is collapsed over all its parameters: a leading batch
dim of 1 would otherwise leave OpenMP a single iteration to share.
"""
import re

import dace

from workbench.ops.registry import mapped_tasklet


def mapped_reduction(state, label: str, ranges: dict, reduce_ranges: dict, inputs: dict,
                     code: str, outputs: dict):
    """Like ``mapped_tasklet`` over ``ranges`` and ``reduce_ranges``; outputs carry the WCR."""
    if not reduce_ranges:
        return parallel(mapped_tasklet(state, label, ranges, inputs, code, outputs))
    names = sorted(set(inputs) | set(outputs) | set(ranges) | set(reduce_ranges), key=len,
                   reverse=True)
    for name in names:
        code = _prefix(code, name)
    params = sorted({**ranges, **reduce_ranges}, key=len, reverse=True)

    def renamed(memlet):
        subset = str(memlet.subset)
        for p in params:
            subset = _prefix(subset, p)
        return dace.Memlet(f"{memlet.data}[{subset}]", wcr=memlet.wcr)

    scopes = []
    if ranges:
        scopes.append(state.add_map(label, {f"__{p}": r for p, r in ranges.items()}))
        scopes[0][0].map.collapse = len(ranges)
    scopes.append(state.add_map(f"{label}_terms", {f"__{p}": r for p, r in reduce_ranges.items()},
                                dace.ScheduleType.Sequential))
    tasklet = state.add_tasklet(label, {f"__{k}" for k in inputs}, {f"__{k}" for k in outputs},
                                code)
    entries = [entry for entry, _ in scopes]
    exits = [exit_ for _, exit_ in reversed(scopes)]
    for conn, memlet in inputs.items():
        state.add_memlet_path(state.add_read(memlet.data), *entries, tasklet,
                              memlet=renamed(memlet), dst_conn=f"__{conn}")
    if not inputs:  # keep the scopes connected
        for src, dst in zip(entries, entries[1:] + [tasklet]):
            state.add_nedge(src, dst, dace.Memlet())
    for conn, memlet in outputs.items():
        state.add_memlet_path(tasklet, *exits, state.add_write(memlet.data),
                              memlet=renamed(memlet), src_conn=f"__{conn}")
    return tasklet, entries[0], exits[-1]


def parallel(mapped):
    """Collapse a ``mapped_tasklet`` result's map over all its parameters."""
    _, entry, _ = mapped
    entry.map.collapse = len(entry.map.params)
    return mapped


def _prefix(text: str, name: str) -> str:
    return re.sub(rf"(?<![\w.]){name}\b", f"__{name}", text)
