"""Memory a program needs: what stays resident, what it allocates, and the
most that is live at once.

Rules:
1. *Resident*: every non-transient array (inputs, outputs, weights) for the
   whole call.
2. *Allocated*: every transient of the SDFG and its nested SDFGs, each once
   (arrays that a transformation made share one buffer are one array). DaCe
   allocates them for the call unless a transformation reuses buffers, so
   this is what the generated program holds.
3. *Peak live*: resident plus the largest sum of transients whose lifetimes
   overlap, in program order (states in order; nodes of a state in a
   topological order; a transient lives from the first node that touches it
   to the last). It is what an allocator that frees each buffer after its
   last use would need for this order: the figure a recompute-or-keep choice
   in a training program changes. A nested SDFG's transients live while its
   node runs. Views alias their data and count nothing.
"""
from dataclasses import dataclass

import dace
from dace import data as dt
from dace.sdfg import nodes


@dataclass
class MemoryFigure:
    resident_bytes: int
    allocated_bytes: int
    peak_live_bytes: int

    def to_dict(self) -> dict:
        return {"resident_bytes": self.resident_bytes, "allocated_bytes": self.allocated_bytes,
                "peak_live_bytes": self.peak_live_bytes}


def _bytes(desc) -> int:
    try:
        return int(desc.total_size) * desc.dtype.bytes
    except (TypeError, ValueError):   # a symbolic size: not counted
        return 0


def _transient(desc) -> bool:
    return desc.transient and not isinstance(desc, dt.View)


def _nested_bytes(sdfg) -> int:
    total = 0
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, nodes.NestedSDFG):
            total += sum(_bytes(d) for d in node.sdfg.arrays.values() if _transient(d))
    return total


def memory_figure(sdfg: dace.SDFG) -> MemoryFigure:
    resident = sum(_bytes(d) for d in sdfg.arrays.values()
                   if not d.transient and not isinstance(d, dt.View))
    allocated = sum(_bytes(d) for d in sdfg.arrays.values() if _transient(d)) + \
        _nested_bytes(sdfg)
    first, last, extra = {}, {}, []
    step = 0
    for state in sdfg.states():
        for node in _topological(state):
            if isinstance(node, nodes.AccessNode):
                desc = sdfg.arrays.get(node.data)
                if desc is not None and _transient(desc):
                    first.setdefault(node.data, step)
                    last[node.data] = step
            elif isinstance(node, nodes.NestedSDFG):
                extra.append((step, sum(_bytes(d) for d in node.sdfg.arrays.values()
                                        if _transient(d))))
            step += 1
    change = [0] * (step + 2)
    for name, start in first.items():
        size = _bytes(sdfg.arrays[name])
        change[start] += size
        change[last[name] + 1] -= size
    for at, size in extra:
        change[at] += size
        change[at + 1] -= size
    live = peak = 0
    for delta in change:
        live += delta
        peak = max(peak, live)
    return MemoryFigure(int(resident), int(allocated), int(resident + peak))


def _topological(state):
    import networkx as nx
    try:
        return list(nx.topological_sort(state.nx))
    except nx.NetworkXUnfeasible:   # a cycle cannot be in a valid state; keep the order given
        return list(state.nodes())
