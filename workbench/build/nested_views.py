"""Views inside nested SDFGs get names no other SDFG of the program uses.

DaCe 1.0.2's CPU code generator records a declared pointer by name only,
across the nested functions it generates while generating their caller: a
View inside a nested SDFG (one kept as a function: a control flow body,
see importer/control_flow.py) named like a View the caller declared already
(``input``, ``output``: connector names of inlined operators) is assigned
but never declared, and the C++ does not compile ("'input' was not
declared in this scope"). Renaming such Views changes nothing else.
"""
from collections import Counter

import dace


def distinct_nested_view_names(program: dace.SDFG) -> int:
    """Rename Views of nested SDFGs whose names another SDFG of ``program`` uses; how many."""
    sdfgs = list(program.all_sdfgs_recursive())
    uses = Counter(name for s in sdfgs for name in s.arrays)
    taken = set(uses)
    renamed = 0
    for sdfg in sdfgs:
        if sdfg is program:
            continue
        for name, desc in list(sdfg.arrays.items()):
            if not isinstance(desc, dace.data.View) or uses[name] < 2:
                continue
            new, k = f"{name}_n{sdfg.cfg_id}", 1
            while new in taken:
                new, k = f"{name}_n{sdfg.cfg_id}_{k}", k + 1
            taken.add(new)
            sdfg.replace(name, new)
            uses[name] -= 1
            renamed += 1
    return renamed
