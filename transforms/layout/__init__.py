"""Layout level: how tensors sit in memory (views instead of copies, strided GEMM operands)."""
from workbench.ops import layout_ops  # noqa: F401 (registers MatMulStrided)
from transforms.layout import (channels_last, concat, conv_gemm, conv_shifted, fold_consumer, fold_matmul, prepack,  # noqa: F401
                               reshape)
