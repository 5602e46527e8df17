"""Fusion level: several operators in one pass over the data."""
from workbench.ops import fused, onepass  # noqa: F401 (registers the fused op types)
from transforms.fusion import conv_epilogue, dace_maps, elementwise_chain  # noqa: F401
from transforms.fusion import gemm_epilogue, onepass_layernorm, onepass_softmax  # noqa: F401
from transforms.fusion import qdq_movement, qlinear, rms_norm, row_epilogue  # noqa: F401
from transforms.fusion import layernorm_backward, softmax_backward, update_pass  # noqa: F401
from transforms.fusion import fill_scatter, layernorm_grad_epilogue, sibling_gemms  # noqa: F401
