"""PersistentAllocation: allocate transients once, at initialization, not per call.

Rules:
1. Candidates are transient arrays (not views, not registers) of static
   size, in the program or in any SDFG nested in it, whose lifetime is
   still the default (allocated and freed around each use). In the program
   itself a size of its symbols counts as static: the initialization takes
   the symbols, and every caller initializes it again at another size
   (the session loads a program per size; ``run.py`` and ``generate`` ask
   ``analysis.memory.init_sized``).
2. Every access node of the array runs once per call: outside any map, in
   an SDFG nested in no map (a buffer inside a parallel map is private to
   each iteration; one shared persistent buffer would be a data race).
3. One match sets all of them to ``AllocationLifetime.Persistent``: DaCe
   then allocates them in the program's init function and frees them at
   exit, so a call makes no malloc/free and touches warm pages.
Bytes moved stay the same.
"""
import dace

from workbench.build.storage import persistent_candidates as candidates
from workbench.errors import TransformationError
from workbench.importer.symbolic import dim_text, user_name
from workbench.transformation_api import Transformation, register


@register
class PersistentAllocation(Transformation):
    level = "global"
    same_bytes = True   # the lifetime of buffers, not the bytes moved
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    name = "PersistentAllocation"
    description = "Allocate transient buffers once at initialization instead of on every call"

    def find(self, sdfg):
        found = candidates(sdfg)
        if not found:
            return []
        size = sum(o.arrays[n].total_size * o.arrays[n].dtype.bytes for o, n in found)
        try:
            what = f"({float(size) / 1e6:.2f} MB) once"
        except TypeError:   # sized by the program's symbols: allocated when it starts
            what = (f"once per size of {', '.join(sorted(user_name(s) for s in sdfg.free_symbols))}"
                    f" ({dim_text(size)} bytes)")
        return [self.match({}, f"allocate {len(found)} buffers {what}", {"all": True})]

    def apply(self, sdfg, match):
        found = candidates(sdfg)
        if not found:
            raise TransformationError("no transient is left to make persistent")
        for owner, name in found:
            owner.arrays[name].lifetime = dace.AllocationLifetime.Persistent
