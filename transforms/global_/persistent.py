"""PersistentAllocation: allocate transients once, at initialization, not per call.

Rules:
1. Candidates are transient arrays (not views, not registers) of static
   size, in the program or in any SDFG nested in it, whose lifetime is
   still the default (allocated and freed around each use).
2. Every access node of the array runs once per call: outside any map, in
   an SDFG nested in no map (a buffer inside a parallel map is private to
   each iteration; one shared persistent buffer would be a data race).
3. One match sets all of them to ``AllocationLifetime.Persistent``: DaCe
   then allocates them in the program's init function and frees them at
   exit, so a call makes no malloc/free and touches warm pages.
Bytes moved stay the same.
"""
import dace
from dace import data as dt
from dace import symbolic

from transforms.graph import outside_maps
from workbench.errors import TransformationError
from workbench.transform import Transformation, register

_STORAGES = (dace.StorageType.Default, dace.StorageType.CPU_Heap)


def candidates(sdfg) -> list:
    """(owning SDFG, array name) for every array rule 1 and 2 allow."""
    out = []
    for owner in sdfg.all_sdfgs_recursive():
        accesses = {}
        for state in owner.states():
            for access in state.data_nodes():
                accesses.setdefault(access.data, []).append((state, access))
        for name, desc in owner.arrays.items():
            if (type(desc) is not dt.Array or not desc.transient or desc.storage not in _STORAGES
                    or desc.lifetime != dace.AllocationLifetime.Scope
                    or symbolic.issymbolic(desc.total_size, owner.constants)
                    or name not in accesses):
                continue
            if all(outside_maps(owner, state, access) for state, access in accesses[name]):
                out.append((owner, name))
    return out


@register
class PersistentAllocation(Transformation):
    level = "global"
    name = "PersistentAllocation"
    description = "Allocate transient buffers once at initialization instead of on every call"

    def find(self, sdfg):
        found = candidates(sdfg)
        if not found:
            return []
        size = sum(o.arrays[n].total_size * o.arrays[n].dtype.bytes for o, n in found)
        return [self.match({}, f"allocate {len(found)} buffers ({size / 1e6:.2f} MB) once",
                           {"all": True})]

    def apply(self, sdfg, match):
        found = candidates(sdfg)
        if not found:
            raise TransformationError("no transient is left to make persistent")
        for owner, name in found:
            owner.arrays[name].lifetime = dace.AllocationLifetime.Persistent
