"""FLOPs per ONNX operator, read off the SDFG's ``OnnxOp`` nodes.

A multiply-add counts as two FLOPs; element-wise and normalization ops count
a small fixed number per element (the paper's convention is "one per
arithmetic operation"; transcendental functions count one).
"""
import math
from collections import Counter

from workbench.ops.node import OnnxOp
from workbench.analysis.sizes import number

# FLOPs per output element for element-wise style ops.
PER_ELEMENT = {
    "Relu": 1, "Sigmoid": 4, "Tanh": 1, "Erf": 1, "Exp": 1, "Log": 1, "Sqrt": 1, "Neg": 1,
    "Abs": 1, "Reciprocal": 1, "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Pow": 1,
    "LeakyRelu": 2, "Elu": 3, "Selu": 4, "HardSigmoid": 3, "HardSwish": 4, "Softplus": 3,
}
PER_INPUT_ELEMENT = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8,
                     "GlobalAveragePool": 1, "GlobalMaxPool": 1, "BatchNormalization": 2}
# FLOPs per hidden unit and step for the gates of a recurrent layer (activations,
# biases, the state update), beyond its two products.
RECURRENT_GATES = {"LSTM": 24, "GRU": 20, "RNN": 4}
DATA_MOVEMENT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Gather",
                 "Identity", "Dropout", "Slice", "Split", "Expand", "Tile", "Cast"}


def onnx_nodes(sdfg):
    """(node, state) for every OnnxOp, in every state and nested SDFG."""
    return [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, OnnxOp)]


def _shapes(node, state, which):
    edges = state.in_edges(node) if which == "in" else state.out_edges(node)
    sdfg = state.parent
    conn = (lambda e: e.dst_conn) if which == "in" else (lambda e: e.src_conn)
    return {conn(e): tuple(number(s) for s in sdfg.arrays[e.data.data].shape) for e in edges}


def node_flops(node: OnnxOp, state) -> int:
    ins, outs = _shapes(node, state, "in"), _shapes(node, state, "out")
    out_elems = sum(math.prod(s) for s in outs.values())
    op = node.op_type
    conns = [c for c in node.onnx_inputs if c]
    if op == "MatMul":
        a, b = ins[conns[0]], ins[conns[1]]
        k = a[-1]
        return 2 * k * out_elems
    if op == "Gemm":
        a = ins[conns[0]]
        k = a[0] if node.attrs.get("transA", 0) else a[-1]
        return 2 * k * out_elems + (out_elems if len(conns) > 2 else 0)
    if op in ("Conv", "ConvTranspose"):
        w = ins[conns[1]]
        per_out = math.prod(w[1:])  # input channels per group x kernel
        return 2 * per_out * out_elems
    if op in RECURRENT_GATES:  # X @ W^T and H @ R^T for every step, then the gates
        x, w, r = ins[conns[0]], ins[conns[1]], ins[conns[2]]
        steps = x[0] * x[1]  # seq * batch in either layout
        directions, gate_rows, inputs = w
        hidden = r[2]
        return (2 * steps * directions * gate_rows * (inputs + hidden)
                + RECURRENT_GATES[op] * steps * directions * hidden)
    if op in PER_ELEMENT:
        return PER_ELEMENT[op] * out_elems
    if op in PER_INPUT_ELEMENT:
        return PER_INPUT_ELEMENT[op] * math.prod(ins[conns[0]])
    if op in DATA_MOVEMENT:
        return 0
    return out_elems


def total_flops(sdfg) -> int:
    return sum(node_flops(n, st) for n, st in onnx_nodes(sdfg))


def op_histogram(sdfg) -> dict:
    return dict(Counter(n.op_type for n, _ in onnx_nodes(sdfg)).most_common())
