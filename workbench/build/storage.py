"""Put large transients on the heap before code generation.

Expanded library nodes leave transients inside nested SDFGs whose storage is
Register (or Default, which DaCe resolves to Register inside a map). When
such an array is larger than ``compiler.max_stack_array_size`` or has a
symbolic size, DaCe's CPU code generator allocates it on the heap anyway
and warns "allocated on heap instead of Register". Saying CPU_Heap up front
generates the same allocation without the warning.

Only for CPU programs: on a GPU, Default inside a kernel means GPU memory.
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
