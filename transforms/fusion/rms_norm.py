"""RMSNormFusion: an RMS norm written out as element-wise ops, as one row kernel.

T5, Llama-style decoders and most models after them normalize with
``w * x / sqrt(mean(x^2) + eps)``, and exporters write it out:
``Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(1, .) or Reciprocal ->
Mul(x, .) -> Mul(w, .)`` (or ``Div(x, sqrt)`` for the last two but one).
Run as written, the chain reads the rows three times and writes four
temporaries; element-wise fusion cannot join the reduction. One
RMSNormalization node with the ``onepass`` kernel (``workbench/ops/onepass.py``)
sums the squares in double in one sweep and scales in a second.

Rules:
1. Matches a ReduceMean (kept dimensions, its axes the trailing ones of x)
   of ``Pow(x, 2)`` or ``Mul(x, x)``, followed by Add of a scalar constant
   eps, Sqrt, and either Reciprocal or ``Div(1, .)`` then ``Mul`` by x, or
   ``Div(x, .)``; then a Mul by a scale that broadcasts as a contiguous
   suffix of a row and keeps x's shape.
2. Every tensor between the nodes is a transient written once and read
   only by the next node (in this state and every other); all of them and
   x, the scale and the output have one float type (float32 or float64).
3. Applying it puts one RMSNormalization (axis, epsilon; ``onepass``) in
   place of the chain; x, the scale and the output stay the same arrays.
"""
from dataclasses import dataclass, field

from transforms.fusion import program as prog
from transforms.fusion.chains import (between, constant_scalar, inputs_of, next_op, other_input,
                                      reduced_axes, replace_chain)
from transforms.graph import in_array, shape_text
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.ops.onepass import layernorm_onepass_supported
from workbench.ops.simd import FLOAT_TYPES
from workbench.transformation_api import Refusal, register


@dataclass
class Chain:
    roles: dict                 # role -> operator, in dataflow order
    x: object                   # the access node normalized
    scale: object = None        # the scale's access node
    out: object = None          # the access node the scale Mul writes
    axis: int = -1
    epsilon: float = 0.0
    internal: list = field(default_factory=list)   # access nodes between the operators


def _reduced_axis(mean, rank: int):
    """The first axis a ReduceMean reduces when it keeps dimensions and reduces the
    trailing ones, else None."""
    axes = reduced_axes(mean, rank)
    return axes[0] if axes and axes == list(range(axes[0], rank)) else None


def chain_of(sdfg, state, mean):
    """The ``Chain`` starting at ``mean`` (rules 1-2), a ``Refusal``, or None when the
    ReduceMean reads no square (not an RMS norm at all)."""
    sq = in_array(state, mean, mean.onnx_inputs[0])
    if not between(sdfg, state, sq) or not isinstance(state.in_edges(sq)[0].src, OnnxOp):
        return None
    square = state.in_edges(sq)[0].src
    feeds = inputs_of(state, square)
    if square.op_type == "Pow" and 0 in feeds and constant_scalar(square, 1) == 2.0:
        x = feeds[0]
    elif square.op_type == "Mul" and len(feeds) == 2 and feeds[0].data == feeds[1].data:
        x = feeds[0]
    else:
        return None
    name = f"{mean.onnx_name} of {square.onnx_name}"
    desc = sdfg.arrays[x.data]
    if desc.dtype not in FLOAT_TYPES:
        return Refusal(f"{name}: '{x.data}' is {desc.dtype.to_string()}, not float32/float64")
    shape = tuple(desc.shape)
    axis = _reduced_axis(mean, len(shape))
    if axis is None:
        return Refusal(f"{name}: the mean does not keep dimensions or reduces other than the "
                       f"trailing axes of '{x.data}' {shape_text(shape)}")
    chain = Chain({"square": square, "mean": mean}, x, axis=axis, internal=[sq])
    add = next_op(sdfg, state, mean, chain.internal)
    other = add is not None and add.op_type == "Add" and other_input(state, add, chain.internal[-1])
    if not other or constant_scalar(add, other[0]) is None or constant_scalar(add, other[0]) < 0:
        return Refusal(f"{name}: the mean is not followed by an Add of a constant epsilon "
                       f"that only it reads")
    chain.roles["add"], chain.epsilon = add, constant_scalar(add, other[0])
    sqrt = next_op(sdfg, state, add, chain.internal)
    if sqrt is None or sqrt.op_type != "Sqrt":
        return Refusal(f"{name}: mean + epsilon is not followed by a Sqrt only it feeds")
    chain.roles["sqrt"] = sqrt
    normalized = _normalize(sdfg, state, sqrt, chain)
    if normalized is None:
        return Refusal(f"{name}: x is not divided by the root (x / root, or x times its "
                       f"reciprocal)")
    return _scaled(sdfg, state, normalized, chain, name)


def _normalize(sdfg, state, sqrt, chain):
    """The operator that writes x / root (Mul or Div), in ``chain``, or None."""
    node = next_op(sdfg, state, sqrt, chain.internal)
    root = chain.internal[-1]
    if node is None:
        return None
    if node.op_type == "Div":
        feeds = inputs_of(state, node)
        if feeds.get(1) is root and feeds.get(0) is not None and feeds[0].data == chain.x.data:
            chain.roles["normalize"] = node
            return node
        if feeds.get(1) is not root or constant_scalar(node, 0) != 1.0:
            return None
    elif node.op_type != "Reciprocal":
        return None
    chain.roles["inverse"] = node
    mul = next_op(sdfg, state, node, chain.internal)
    other = mul is not None and mul.op_type == "Mul" and other_input(state, mul, chain.internal[-1])
    if not other or other[1].data != chain.x.data:
        return None
    chain.roles["normalize"] = mul
    return mul


def _scaled(sdfg, state, normalized, chain, name):
    shape = tuple(sdfg.arrays[chain.x.data].shape)
    mul = next_op(sdfg, state, normalized, chain.internal)
    other = mul is not None and mul.op_type == "Mul" and other_input(state, mul, chain.internal[-1])
    if not other:
        return Refusal(f"{name}: no Mul by a scale reads the normalized rows alone")
    scale, out = other[1], state.out_edges(mul)[0].dst
    if len(state.out_edges(mul)) != 1 or tuple(sdfg.arrays[out.data].shape) != shape:
        return Refusal(f"{name}: the scale Mul does not keep the shape {shape_text(shape)}")
    params = [tuple(sdfg.arrays[scale.data].shape)]
    dtypes = {sdfg.arrays[a.data].dtype for a in chain.internal + [scale, out, chain.x]}
    if len(dtypes) != 1:
        return Refusal(f"{name}: its tensors have more than one element type")
    if not layernorm_onepass_supported(shape, dtypes.pop(), chain.axis, params):
        return Refusal(f"{name}: the scale {shape_text(params[0])} does not broadcast as a "
                       f"suffix of a row of {shape_text(shape[chain.axis:])}")
    chain.roles["scale"], chain.scale, chain.out = mul, scale, out
    return chain


@register
class RMSNormFusion(OperatorTransformation):
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    level = "fusion"
    name = "RMSNormFusion"
    description = ("An RMS norm written out (Pow, ReduceMean, Add, Sqrt, Div, Mul, Mul) as one "
                   "RMSNormalization row kernel: one sweep for the sum of squares, one to scale")
    op_types = {"ReduceMean"}
    role = "mean"
    refusal = "{match.description}: no longer an RMS norm chain"

    def plan(self, sdfg, state, node, weights=None):
        return chain_of(sdfg, state, node)

    def roles(self, node, chain) -> dict:
        return dict(chain.roles)

    def describe(self, node, chain):
        return f"RMS norm {prog.fused_name(list(chain.roles.values()))} as one row kernel"

    def rewrite(self, sdfg, state, node, chain, weights=None):
        members = list(chain.roles.values())
        name = prog.fused_name(members)
        fused = OnnxOp(prog.unique_label(state, name), op_type="RMSNormalization",
                       onnx_name=name, opset=23,
                       attrs={"axis": chain.axis, "epsilon": chain.epsilon},
                       onnx_inputs=["X", "scale"], onnx_outputs=["Y"])
        fused.implementation = "onepass"
        replace_chain(sdfg, state, members, chain.internal, fused,
                      [("X", chain.x), ("scale", chain.scale)], [("Y", chain.out)])
