"""Local level: one operator's implementation."""
from transforms.local import conv_library, dace_maps, expand, implementation, schedule, vectorize  # noqa: F401
