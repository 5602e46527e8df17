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
   overlap, in program order (states in order; the nodes of a state in the
   order the generated code runs them, DaCe's ``dfs_topological_sort``; a
   transient lives from the first node that touches it to the end of its
   last reader). It is what an allocator that frees each buffer after its
   last use would need for this order: the figure a recompute-or-keep
   choice in a training program changes. A nested SDFG's transients live
   while its node runs. Views alias their data and count nothing (a View's
   readers do not lengthen its array's life: an approximation).
"""
from dataclasses import dataclass

import dace
from dace import data as dt
from dace.sdfg import nodes

from workbench.analysis.sizes import number


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
        return number(desc.total_size) * desc.dtype.bytes
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
    return MemoryFigure(int(resident), int(allocated), int(resident + live_spans(sdfg).peak()))


@dataclass
class LiveSpans:
    """Each transient's lifetime in program order (steps), and the nested SDFGs'
    transients as one-step spans: what ``peak`` sums."""
    spans: dict          # array -> [first step, last step]
    sizes: dict          # array -> bytes
    extra: list          # (step, bytes) of nested SDFGs' transients
    steps: int
    position: dict       # node -> its step

    def peak(self, changed: dict = None, added=()) -> int:
        """The most transient bytes live at once; ``changed``: array -> (first, last)
        replacing its span (None: the array goes), ``added``: (first, last, bytes)."""
        changed = changed or {}
        delta = [0] * (self.steps + 2)
        spans = [(*changed.get(n, s), self.sizes[n]) for n, s in self.spans.items()
                 if changed.get(n, s) is not None]
        for first, last, size in spans + list(added) + [(a, a, b) for a, b in self.extra]:
            delta[first] += size
            delta[last + 1] -= size
        live = peak = 0
        for d in delta:
            live += d
            peak = max(peak, live)
        return peak


def live_spans(sdfg: dace.SDFG) -> LiveSpans:
    first, last, extra, position, users = {}, {}, [], {}, []
    step = 0
    for state in sdfg.states():
        for node in program_order(state):
            position[node] = step
            if isinstance(node, nodes.AccessNode):
                desc = sdfg.arrays.get(node.data)
                if desc is not None and _transient(desc):
                    first.setdefault(node.data, step)
                    users.append((node.data, state, node))
            elif isinstance(node, nodes.NestedSDFG):
                extra.append((step, sum(_bytes(d) for d in node.sdfg.arrays.values()
                                        if _transient(d))))
            step += 1
    for name, state, node in users:   # a buffer lives until its last reader is done
        ends = [position[node]] + [position[_end(state, e.dst)] for e in state.out_edges(node)]
        last[name] = max(last.get(name, 0), *ends)
    return LiveSpans({n: (s, last[n]) for n, s in first.items()},
                     {n: _bytes(sdfg.arrays[n]) for n in first}, extra, step, position)


def _end(state, node):
    """The node whose step ends ``node``'s work: a map's exit for its entry."""
    return state.exit_node(node) if isinstance(node, nodes.EntryNode) else node


def program_order(state) -> list:
    """The nodes of ``state`` in the order the generated code runs them (DaCe's code
    generator and the unit builds walk ``dfs_topological_sort``)."""
    from dace.sdfg.utils import dfs_topological_sort
    return list(dfs_topological_sort(state))


_KEPT = (dace.AllocationLifetime.Persistent, dace.AllocationLifetime.Global)


def init_sized(sdfg) -> bool:
    """Whether the program's initialization allocates a buffer whose size is symbolic: a
    caller that changes the sizes must initialize it again (exported run.py, generate)."""
    return bool(_init_sizes(sdfg))


def _init_sizes(sdfg) -> list:
    return [desc.total_size for owner in sdfg.all_sdfgs_recursive()
            for desc in owner.arrays.values()
            if desc.lifetime in _KEPT and dace.symbolic.issymbolic(desc.total_size)]


def init_covers(sdfg, symbol: str, upto: int) -> bool:
    """Whether every buffer the initialization allocates with ``symbol`` at ``upto`` is
    at least as large as at each size from 1 to ``upto``, and sized by no other symbol:
    the program may then be initialized once at ``upto`` and called at every size up to
    it (a decoding loop, whose past length moves every step)."""
    import sympy
    numeric = {"int_floor": lambda a, b: a // b, "int_ceil": lambda a, b: -(-a // b)}
    for size in _init_sizes(sdfg):
        if {str(s) for s in size.free_symbols} != {symbol}:
            return False
        sym = next(iter(size.free_symbols))
        f = sympy.lambdify([sym], size, modules=[numeric, "math"])
        top = f(upto)
        if any(f(v) > top for v in range(1, upto + 1)):
            return False
    return True
