"""``bert-layer``: one BERT-base encoder layer (HuggingFace ``BertLayer``), batch 1, seq 128.

Input ``hidden_states`` [1, 128, 768], output ``output`` [1, 128, 768]; hidden
768, 12 heads of 64, FFN 3072. The graph is written the way the PyTorch legacy
exporter (``torch.onnx.export(..., dynamo=False, opset_version=17)``) writes it:

* Q/K/V: ``MatMul(x, W[768, 768]) + Add(bias)``; the exporter stores the
  weight already transposed ([in, out]); here it keeps the readable name
  ``attention.self.query.weight`` instead of ``onnx::MatMul_123``;
* heads split by ``Reshape`` + ``Transpose(0, 2, 1, 3)`` (K: ``0, 2, 3, 1``),
  where every ``Reshape`` target comes from a shape chain
  ``Shape -> Gather(0), Gather(1) -> Unsqueeze -> Concat([.., .., 12, 64])``,
  so that an importer has to fold constants;
* scores ``MatMul`` -> ``Div`` by 8 (a ``Constant``) -> ``Add`` of a zero
  attention mask [1, 1, 1, 128] -> ``Softmax(axis=-1)`` -> ``MatMul`` V ->
  ``Transpose(0, 2, 1, 3)`` -> ``Reshape`` to [1, 128, 768];
* output dense, residual ``Add``, ``LayerNormalization(epsilon=1e-12)``;
* FFN 768 -> 3072 with exact GELU as ``Div(x, 1.4142135) -> Erf -> Add 1 ->
  Mul x -> Mul 0.5``, 3072 -> 768, residual ``Add``, ``LayerNormalization``.
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from ._common import GraphBuilder, scope_of

SEED = 1002
BATCH, SEQ, HIDDEN, HEADS, HEAD_DIM, FFN = 1, 128, 768, 12, 64, 3072
EPS = 1e-12
ATT = "/attention/self"

DOC = ("BERT-base encoder layer (HuggingFace BertLayer as exported by torch.onnx at opset 17): "
       "hidden 768, 12 heads x 64, FFN 3072 with Erf GELU, seq 128, batch 1.")


def _linear(b: GraphBuilder, module: str, x: str, n_in: int, n_out: int) -> str:
    """``nn.Linear`` as the exporter writes it for 3-D inputs: MatMul + Add(bias, .)."""
    scope = scope_of(module)
    w = b.weight(f"{module}.weight", (n_in, n_out), fan_in=n_in)
    bias = b.bias(f"{module}.bias", n_out)
    return b.node("Add", [bias, b.node("MatMul", [x, w], scope)], scope)


def _shape_keep2(b: GraphBuilder, x: str, tail: tuple[int, ...]) -> str:
    """``x.size()[:2] + tail`` as a Shape/Gather/Unsqueeze/Concat chain."""
    shape = b.node("Shape", [x], ATT)
    dims = []
    for axis in (0, 1):
        d = b.node("Gather", [shape, b.constant(axis, ATT, np.int64)], ATT, axis=0)
        dims.append(b.node("Unsqueeze", [d, b.constant([0], ATT, np.int64)], ATT))
    dims += [b.constant([t], ATT, np.int64) for t in tail]
    return b.node("Concat", dims, ATT, axis=0)


def _split_heads(b: GraphBuilder, x: str, perm: list[int]) -> str:
    """[1, 128, 768] -> [1, 12, 128, 64] (or K's [1, 12, 64, 128])."""
    r = b.node("Reshape", [x, _shape_keep2(b, x, (HEADS, HEAD_DIM))], ATT)
    return b.node("Transpose", [r], ATT, perm=perm)


def _self_attention(b: GraphBuilder, x: str) -> str:
    q = _linear(b, "attention.self.query", x, HIDDEN, HIDDEN)
    k = _linear(b, "attention.self.key", x, HIDDEN, HIDDEN)
    v = _linear(b, "attention.self.value", x, HIDDEN, HIDDEN)
    k = _split_heads(b, k, [0, 2, 3, 1])
    v = _split_heads(b, v, [0, 2, 1, 3])
    q = _split_heads(b, q, [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], ATT)
    scores = b.node("Div", [scores, b.constant(math.sqrt(HEAD_DIM), ATT)], ATT)
    mask = b.initializer("extended_attention_mask", np.zeros((BATCH, 1, 1, SEQ), np.float32))
    scores = b.node("Add", [scores, mask], ATT)
    probs = b.node("Softmax", [scores], ATT, axis=-1)
    ctx = b.node("MatMul", [probs, v], ATT)
    ctx = b.node("Transpose", [ctx], ATT, perm=[0, 2, 1, 3])
    return b.node("Reshape", [ctx, _shape_keep2(b, ctx, (HIDDEN,))], ATT)


def _add_norm(b: GraphBuilder, module: str, h: str, residual: str, output: str | None = None) -> str:
    """``LayerNorm(dense(h) + residual)`` (BertSelfOutput / BertOutput); dense done by caller."""
    scope = scope_of(module)
    h = b.node("Add", [h, residual], scope)
    ln = f"{module}.LayerNorm"
    gamma = b.initializer(f"{ln}.weight", 1.0 + 0.1 * b.rng.standard_normal(HIDDEN, dtype=np.float32))
    beta = b.bias(f"{ln}.bias", HIDDEN)
    return b.node("LayerNormalization", [h, gamma, beta], scope_of(ln), output=output,
                  axis=-1, epsilon=EPS)


def _gelu(b: GraphBuilder, x: str) -> str:
    scope = "/intermediate/intermediate_act_fn"
    t = b.node("Div", [x, b.constant(1.4142135381698608, scope)], scope)
    t = b.node("Erf", [t], scope)
    t = b.node("Add", [t, b.constant(1.0, scope)], scope)
    t = b.node("Mul", [x, t], scope)
    return b.node("Mul", [t, b.constant(0.5, scope)], scope)


def build() -> onnx.ModelProto:
    """Build the ``bert-layer`` model (deterministic: same bytes on every call)."""
    b = GraphBuilder(SEED)
    x = "hidden_states"
    ctx = _self_attention(b, x)
    att = _add_norm(b, "attention.output", _linear(b, "attention.output.dense", ctx, HIDDEN, HIDDEN), x)
    inter = _gelu(b, _linear(b, "intermediate.dense", att, HIDDEN, FFN))
    _add_norm(b, "output", _linear(b, "output.dense", inter, FFN, HIDDEN), att, output="output")
    shape = (BATCH, SEQ, HIDDEN)
    return b.finish("bert-layer", {"hidden_states": shape}, {"output": shape}, DOC)
