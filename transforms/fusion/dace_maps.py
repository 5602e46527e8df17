"""DaCe's own fusion transformations on expanded maps, kept as data.

They apply after ExpandToMaps has turned operators into maps:
(name, pattern, description, options).
"""
from dace.transformation import dataflow as df

from workbench.transformation_api import DacePattern, register

WRAPPED = [
    ("MapFusion", df.MapFusion,
     "Fuse a producer map into its consumer map over the same range (no intermediate array)",
     {}),
    ("OTFMapFusion", df.OTFMapFusion,
     "Fuse a producer map into its consumer by recomputing it on the fly where it is read", {}),
    ("TaskletFusion", df.TaskletFusion,
     "Merge two tasklets connected by a scalar into one tasklet (after map fusion)", {}),
]


def _make(name, pattern, description, options):
    cls = type(name, (DacePattern,), {"level": "fusion", "name": name,
                                        "description": description, "pattern": pattern,
                                        "options": options})
    return register(cls)


for _row in WRAPPED:
    _make(*_row)
