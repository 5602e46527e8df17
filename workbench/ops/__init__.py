"""Operator implementations, registered per ONNX op type (see registry)."""
from workbench.ops import conv, elementwise, linalg, movement, normalization  # noqa: F401 (register)
from workbench.ops.registry import implementations_of, is_supported, supported_op_types

__all__ = ["implementations_of", "is_supported", "supported_op_types"]
