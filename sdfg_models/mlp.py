"""``mlp``: a 784-1024-1024-10 multilayer perceptron with ReLU, batch 64.

Input ``input`` [64, 784], output ``output`` [64, 10]. Each ``nn.Linear`` is
written as the PyTorch exporter writes it at opset 17: ``Gemm(transB=1)`` with
the weight stored [out, in] (``fc1.weight``) and a bias (``fc1.bias``); the
activations are ``F.relu`` calls (``/Relu``, ``/Relu_1``). Weights are
He-scaled so that the output has a standard deviation of order 1.
"""
from __future__ import annotations

import onnx

from ._common import GraphBuilder, scope_of

SEED = 1001
BATCH = 64
LAYERS = (784, 1024, 1024, 10)

DOC = "MLP 784-1024-1024-10 with ReLU (Gemm transB=1 + Relu), batch 64, random He-scaled weights."


def _linear(b: GraphBuilder, module: str, x: str, n_in: int, n_out: int, gain: float,
            output: str | None = None) -> str:
    w = b.weight(f"{module}.weight", (n_out, n_in), fan_in=n_in, gain=gain)
    bias = b.bias(f"{module}.bias", n_out)
    return b.node("Gemm", [x, w, bias], scope_of(module), output=output,
                  alpha=1.0, beta=1.0, transB=1)


def build() -> onnx.ModelProto:
    """Build the ``mlp`` model (deterministic: same bytes on every call)."""
    b = GraphBuilder(SEED)
    x = "input"
    last = len(LAYERS) - 2
    for i, (n_in, n_out) in enumerate(zip(LAYERS, LAYERS[1:])):
        # ReLU layers get gain sqrt(2) (He); the last layer, followed by nothing, gain 1.
        gain = 1.0 if i == last else 2.0 ** 0.5
        x = _linear(b, f"fc{i + 1}", x, n_in, n_out, gain, output="output" if i == last else None)
        if i != last:
            x = b.node("Relu", [x])
    return b.finish("mlp", {"input": (BATCH, LAYERS[0])}, {"output": (BATCH, LAYERS[-1])}, DOC)
