"""``mbconv``: an EfficientNet-B0 MBConv block (expand ratio 6, 3x3) with squeeze-excite.

Input ``input`` [1, 40, 28, 28], output ``output`` [1, 40, 28, 28]::

    conv_pw   1x1 conv 40 -> 240 + bias (BatchNorm folded), SiLU
    conv_dw   3x3 depthwise conv (group 240, pads 1, stride 1) + bias, SiLU
    se        GlobalAveragePool -> 1x1 conv 240 -> 10 + bias -> SiLU
              -> 1x1 conv 10 -> 240 + bias -> Sigmoid -> Mul with the feature map
    conv_pwl  1x1 conv 240 -> 40 + bias (no activation)
    Add input (residual)

SiLU is written as the exporter writes it at opset 17: ``Sigmoid`` + ``Mul``.
Module names follow timm's ``InvertedResidual`` (``conv_pw``, ``conv_dw``,
``se.conv_reduce``, ``se.conv_expand``, ``conv_pwl``).
"""
from __future__ import annotations

import onnx

from ._common import GraphBuilder

SEED = 1003
C_IN, EXPANDED, SQUEEZED, SIZE = 40, 240, 10, 28
SILU_GAIN = 1.7  # SiLU halves the scale of its input roughly; keep activations of order 1

DOC = ("EfficientNet-B0 MBConv block with squeeze-excite: expand 1x1 40->240, SiLU, depthwise 3x3, "
       "SiLU, SE 240->10->240, project 1x1 240->40, residual; [1,40,28,28].")


def _silu(b: GraphBuilder, x: str, scope: str) -> str:
    return b.node("Mul", [x, b.node("Sigmoid", [x], scope)], scope)


def build() -> onnx.ModelProto:
    """Build the ``mbconv`` model (deterministic: same bytes on every call)."""
    b = GraphBuilder(SEED)
    h = b.conv("conv_pw", "input", C_IN, EXPANDED, 1, gain=SILU_GAIN)
    h = _silu(b, h, "/act1")
    h = b.conv("conv_dw", h, EXPANDED, EXPANDED, 3, group=EXPANDED, pad=1, gain=SILU_GAIN)
    h = _silu(b, h, "/act2")

    s = b.node("GlobalAveragePool", [h], "/se")
    s = b.conv("se.conv_reduce", s, EXPANDED, SQUEEZED, 1, gain=SILU_GAIN)
    s = _silu(b, s, "/se/act1")
    s = b.conv("se.conv_expand", s, SQUEEZED, EXPANDED, 1)
    s = b.node("Sigmoid", [s], "/se/gate")
    h = b.node("Mul", [h, s], "/se")

    h = b.conv("conv_pwl", h, EXPANDED, C_IN, 1)
    b.node("Add", [h, "input"], output="output")
    shape = (1, C_IN, SIZE, SIZE)
    return b.finish("mbconv", {"input": shape}, {"output": shape}, DOC)
