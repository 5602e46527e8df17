"""Local level: one operator's implementation."""
from transforms.local import dace_maps, expand, implementation, schedule, vectorize  # noqa: F401
