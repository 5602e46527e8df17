"""Global level: the whole program's memory."""
from transforms.global_ import (cache_in_place, constant_folding, cse, dead_code,  # noqa: F401
                                identity, inplace,
                                persistent, recompute, recompute_block, state_fusion,
                                transient_reuse)
