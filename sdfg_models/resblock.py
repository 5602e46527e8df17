"""``resblock``: a ResNet basic block, 64 channels, 56x56, batch 1.

Input ``input`` [1, 64, 56, 56], output ``output`` [1, 64, 56, 56]::

    conv1 (3x3, pad 1, bias = folded BatchNorm) -> Relu
    -> conv2 (3x3, pad 1, bias) -> Add input -> Relu

Node and weight names follow torchvision's ``BasicBlock`` as exported by
PyTorch (``/conv1/Conv``, ``conv1.weight``, ``/relu/Relu``, ``/Add``,
``/relu_1/Relu``), with the BatchNorms already folded into the convolutions.
"""
from __future__ import annotations

import onnx

from ._common import GraphBuilder

SEED = 1004
CHANNELS, SIZE = 64, 56

DOC = "ResNet basic block: Conv3x3+bias -> Relu -> Conv3x3+bias -> Add input -> Relu; [1,64,56,56]."


def build() -> onnx.ModelProto:
    """Build the ``resblock`` model (deterministic: same bytes on every call)."""
    b = GraphBuilder(SEED)
    c = CHANNELS
    h = b.conv("conv1", "input", c, c, 3, pad=1, gain=2.0 ** 0.5)
    h = b.node("Relu", [h], "/relu")
    h = b.conv("conv2", h, c, c, 3, pad=1)
    h = b.node("Add", [h, "input"])
    b.node("Relu", [h], "/relu_1", output="output")
    shape = (1, c, SIZE, SIZE)
    return b.finish("resblock", {"input": shape}, {"output": shape}, DOC)
