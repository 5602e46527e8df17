"""Put large transients on the heap before code generation.

Expanded library nodes leave transients inside nested SDFGs whose storage is
Register (or Default, which DaCe resolves to Register inside a map). When
such an array is larger than ``compiler.max_stack_array_size`` or has a
symbolic size, DaCe's CPU code generator allocates it on the heap anyway
and warns "allocated on heap instead of Register". Saying CPU_Heap up front
generates the same allocation without the warning.

Only for CPU programs: on a GPU, Default inside a kernel means GPU memory.

Also here: which transients may live for the whole program instead of one
call (``persistent_candidates``), used by the PersistentAllocation
transformation on the graph and by every CPU build on the buffers that
operator expansions add (padded inputs, accumulators): allocating those per
call cost a malloc and fresh page faults each time (0.2 ms for a 0.9 MB
padded image in EfficientNet's depthwise Conv).
"""
import dace
from dace import data, dtypes, symbolic
from dace.config import Config

_MOVABLE = (dtypes.StorageType.Default, dtypes.StorageType.Register)


def heap_for_large_transients(sdfg: dace.SDFG) -> list:
    """Set CPU_Heap on large or symbolic-size transient arrays; their names."""
    limit = Config.get("compiler", "max_stack_array_size")
    moved = []
    for owner in sdfg.all_sdfgs_recursive():
        for name, desc in owner.arrays.items():
            if (not desc.transient or type(desc) is not data.Array
                    or desc.storage not in _MOVABLE):
                continue   # views and references borrow someone else's memory
            size = desc.total_size * desc.dtype.bytes
            if symbolic.issymbolic(size, owner.constants) or (size > limit) == True:  # noqa: E712
                desc.storage = dtypes.StorageType.CPU_Heap
                moved.append(f"{owner.name}.{name}")
    return moved


_HEAP = (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap)


def runs_once_per_call(sdfg, state, node) -> bool:
    """Whether ``node`` runs once per call: in no map scope, and its SDFG nested
    in no map either (what a persistent buffer or an OpenMP map needs)."""
    if state.scope_dict()[node] is not None:
        return False
    parent = sdfg.parent_nsdfg_node
    if parent is None or sdfg.parent is None:
        return True
    return runs_once_per_call(sdfg.parent_sdfg, sdfg.parent, parent)


def persistent_candidates(sdfg, nested_only: bool = False) -> list:
    """(owning SDFG, array name) of transient arrays of static size, on the heap, with
    the default (per-use) lifetime, every access of which runs once per call (a buffer
    inside a parallel map is private to each iteration; a shared one would race). In the
    program itself a size of its symbols is taken too: the initialization takes the
    symbols, and every caller initializes again at another size (``init_sized``)."""
    out = []
    for owner in sdfg.all_sdfgs_recursive():
        if nested_only and owner is sdfg:
            continue
        # a nested program's symbols are expressions of the caller's, unknown at init
        static = owner.constants if owner is not sdfg else {
            **owner.constants, **{s: 1 for s in sdfg.free_symbols}}
        accesses = {}
        for state in owner.states():
            for access in state.data_nodes():
                accesses.setdefault(access.data, []).append((state, access))
        for name, desc in owner.arrays.items():
            if (type(desc) is not data.Array or not desc.transient or desc.storage not in _HEAP
                    or desc.lifetime != dtypes.AllocationLifetime.Scope
                    or symbolic.issymbolic(desc.total_size, static)
                    or name not in accesses):
                continue
            if all(runs_once_per_call(owner, state, access) for state, access in accesses[name]):
                out.append((owner, name))
    return out


def persistent_expansion_buffers(sdfg) -> int:
    """Allocate the buffers inside expanded operators once, at initialization; how many."""
    found = persistent_candidates(sdfg, nested_only=True)
    for owner, name in found:
        owner.arrays[name].lifetime = dtypes.AllocationLifetime.Persistent
    return len(found)
