"""Operator implementations, registered per ONNX op type (see registry)."""
from workbench.ops import conv, elementwise, linalg, movement, normalization  # noqa: F401 (register)
from workbench.ops import conv_onednn, deconv_onednn  # noqa: F401 (register)
from workbench.ops import matmul_onednn, pool_onednn  # noqa: F401 (register)
from workbench.ops import cast, logic  # noqa: F401 (register)
from workbench.ops import along_axis, reduce  # noqa: F401 (register)
from workbench.ops import attention, pool, quantize_linear, quantized, quantized_gemm  # noqa: F401 (register)
from workbench.ops import recurrent, resize  # noqa: F401 (register)
from workbench.ops import einsum, indexing, scatter, shape_ops, slicing  # noqa: F401 (register)
from workbench.ops import affine_grid, bits, center_crop_pad, col2im, dft  # noqa: F401 (register)
from workbench.ops import deform_conv, grid_sample, losses  # noqa: F401 (register)
from workbench.ops import causal_conv, data_dependent, determinant, flex_attention  # noqa: F401 (register)
from workbench.ops import gated_activations, lrn, onnx_ml, optimizers  # noqa: F401 (register)
from workbench.ops import linear_attention  # noqa: F401 (register)
from workbench.ops import roi_align, signal_windows, stft, tensor_scatter  # noqa: F401 (register)
# Workbench-internal op types that transformations create; imported here so a
# saved SDFG holding them expands without the transformation library.
from workbench.ops import cache_append, fused, layout_ops, onepass  # noqa: F401 (register)
from workbench.ops import layernorm_grad, multi_sweep, softmax_grad  # noqa: F401 (register)
from workbench.ops.registry import implementations_of, is_supported, supported_op_types

__all__ = ["implementations_of", "is_supported", "supported_op_types"]
