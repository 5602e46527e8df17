"""StateFusion: DaCe's own, merging consecutive states into one.

Rules (DaCe's ``StateFusion``): two states joined by an unconditional edge
with no assignments merge when no data race follows (what the first writes
the second only reads after it, through the same access nodes). Expanded
operators (Softmax, LayerNorm, Conv) leave several states in their nested
SDFGs; fewer states mean fewer barriers between parallel loops and let
the map-level rewrites see producer and consumer in one dataflow graph.
"""
from dace.transformation.interstate import StateFusion as DaceStateFusion

from workbench.transformation_api import DacePattern, register


@register
class StateFusion(DacePattern):
    level = "global"
    name = "StateFusion"
    description = "Merge consecutive states (fewer barriers, one dataflow graph)"
    pattern = DaceStateFusion
