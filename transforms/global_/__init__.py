"""Global level: the whole program's memory."""
from transforms.global_ import (constant_folding, cse, dead_code, identity, inplace,  # noqa: F401
                                persistent, recompute, state_fusion,
                                transient_reuse)
