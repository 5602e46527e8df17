"""DaCe's own map transformations, kept as data: (name, pattern, description)."""
from dace.transformation import dataflow as df

from workbench.transform import DacePattern, register

WRAPPED = [
    ("MapTiling", df.MapTiling, "Tile a map (blocks of 32 per dimension) for cache reuse",
     {"tile_sizes": (32,)}),
    ("Vectorization", df.Vectorization, "Vectorize a map's innermost dimension (SIMD loads)",
     {"vector_len": 8}),
    ("MapInterchange", df.MapInterchange, "Swap two nested maps", {}),
    ("MapCollapse", df.MapCollapse, "Collapse nested maps into one for more parallelism", {}),
    ("MapExpansion", df.MapExpansion, "Split a multi-dimensional map into nested maps", {}),
    ("AccumulateTransient", df.AccumulateTransient,
     "Accumulate a map's reduction in a local transient (register) before writing", {}),
    ("TrivialMapElimination", df.TrivialMapElimination, "Remove maps over a single index", {}),
]


def _make(name, pattern, description, options):
    cls = type(name, (DacePattern,), {"level": "local", "name": name,
                                        "description": description, "pattern": pattern,
                                        "options": options})
    return register(cls)


for _row in WRAPPED:
    _make(*_row)
