"""GemmEpilogueFusion: MatMul/Gemm and the element-wise operator after it, one node.

A GEMM writes its product, then BERT's bias Add reads it back and writes
another tensor of the same size. As a ``GemmEpilogue`` the product is
written by the GEMM (BLAS when the MatMul used BLAS) straight into the final
output, and the epilogue (bias, activation, residual, ...) runs over it in
place in one parallel sweep: the intermediate tensor disappears.

Rules (shared with ConvEpilogueFusion, see ``epilogue.py``):
1. The core is a MatMul, a Gemm (its bias ``beta * C`` moves into the
   epilogue), a MatMulStrided (a MatMul that reads or writes through strided
   views, from the layout level) or an earlier GemmEpilogue, of float32 or
   float64 data.
2. Its output is a transient read only by one element-wise operator (a
   fused one too) whose one output has the product's shape and dtype.
3. Repeated application absorbs a whole chain: MatMul -> Add -> Erf-GELU.
"""
from transforms.fusion.epilogue import EpilogueFusion
from workbench.transformation_api import register


@register
class GemmEpilogueFusion(EpilogueFusion):
    level = "fusion"
    name = "GemmEpilogueFusion"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Fuse a MatMul/Gemm with the bias/activation after it (one sweep, in place)"
    fused_type = "GemmEpilogue"
