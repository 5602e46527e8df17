"""Local level: one operator's implementation."""
from transforms.local import (dace_maps, expand, implementation, library_kernels, schedule,  # noqa: F401
                              vectorize)
