"""Local level: one operator's implementation."""
from transforms.local import dace_maps, expand, implementation  # noqa: F401
