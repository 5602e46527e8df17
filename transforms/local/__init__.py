"""Local level: one operator's implementation."""
from transforms.local import (dace_maps, expand, gemm_kernel, implementation,  # noqa: F401
                              library_kernels, schedule, vectorize)
