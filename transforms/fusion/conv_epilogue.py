"""ConvEpilogueFusion: a Conv and the element-wise operator after it, one node.

MobileNet/EfficientNet blocks follow each convolution with SiLU (Sigmoid,
Mul) or a residual Add, each reading the convolution's output back from
memory. As a ``ConvEpilogue`` the convolution (its own implementation, bias
included) writes straight into the final output and the epilogue runs over
it in place in one parallel sweep.

Rules (shared with GemmEpilogueFusion, see ``epilogue.py``):
1. The core is a Conv or an earlier ConvEpilogue, of float32 or float64 data.
2. Its output is a transient read only by one element-wise operator (a
   fused one too, e.g. SiLU after ElementwiseChainFusion) whose one output
   has the product's shape and dtype.
"""
from transforms.fusion.epilogue import EpilogueFusion
from workbench.transformation_api import register


@register
class ConvEpilogueFusion(EpilogueFusion):
    level = "fusion"
    name = "ConvEpilogueFusion"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Fuse a Conv with the activation/residual after it (one sweep, in place)"
    fused_type = "ConvEpilogue"
