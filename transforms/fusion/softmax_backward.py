"""SoftmaxBackwardFusion: Softmax's backward pass, and the mask before it, as one row kernel.

The gradient rule of Softmax writes ``dx = y * (g - ReduceSum(g * y, axis))``:
a Mul, a ReduceSum, a Sub and a Mul, three of them writing a tensor of the
scores' size that the next one reads back. In attention with Dropout the
gradient ``g`` is itself the product of the incoming gradient, the mask and
``1 / (1 - ratio)``, two more such tensors. Element-wise fusion cannot join
the reduction. One ``SoftmaxGrad`` node (``workbench/ops/softmax_grad.py``)
reads the gradient, the mask and ``y`` and writes ``dx``, row by row.

Rules:
1. Matches a ReduceSum over one axis that keeps dimensions, of ``Mul(g, y)``
   (either order), followed by ``Sub(g, s)`` and ``Mul(y, .)`` (either
   order) reading the same ``g`` and ``y`` arrays; ``g``, ``y``, the
   products and ``dx`` have one shape and one float type (float32/float64).
2. Every tensor between the operators is a transient written once and read
   only by the next operator (``g * y``, the sum, the difference).
3. The mask: while ``g`` is a transient written by a Mul and read only by
   the chain's Mul and Sub, that Mul joins the kernel (at most 3): one of its
   inputs becomes ``g``, the other a factor, of ``g``'s shape or one element.
4. Applying it puts one SoftmaxGrad in place of the operators; ``g``, ``y``,
   the factors and ``dx`` stay the same arrays.
"""
from dataclasses import dataclass, field

from transforms.fusion import program as prog
from transforms.fusion.chains import (between, inputs_of, next_op, reduced_axes,
                                      replace_chain, writer_of)
from transforms.graph import in_array, shape_text, state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.ops.simd import FLOAT_TYPES
from workbench.ops.softmax_grad import DOMAIN, OP_TYPE
from workbench.transformation_api import Refusal, register

MAX_FACTORS = 3


@dataclass
class Chain:
    roles: dict                 # role -> operator, in dataflow order
    g: object = None            # access nodes: the gradient, Softmax's output, dx
    y: object = None
    out: object = None
    axis: int = -1
    factors: list = field(default_factory=list)
    internal: list = field(default_factory=list)   # access nodes between the operators


def chain_of(sdfg, state, total):
    """The ``Chain`` around the ReduceSum ``total`` (rules 1-3), a ``Refusal``, or None
    when it does not sum a product (not a softmax's backward pass at all)."""
    product = in_array(state, total, total.onnx_inputs[0])
    first = writer_of(state, product) if between(sdfg, state, product) else None
    if first is None or first.op_type != "Mul" or len(inputs_of(state, first)) != 2:
        return None
    chain = Chain({"product": first, "sum": total}, internal=[product])
    a, b = inputs_of(state, first)[0], inputs_of(state, first)[1]
    name = f"{total.onnx_name} of {first.onnx_name}"
    shape = tuple(sdfg.arrays[product.data].shape)
    axes = reduced_axes(total, len(shape))
    if axes is None or len(axes) != 1:
        return Refusal(f"{name}: the sum does not keep dimensions or is not over one axis")
    chain.axis = axes[0]
    sub = next_op(sdfg, state, total, chain.internal)
    feeds = inputs_of(state, sub) if sub is not None and sub.op_type == "Sub" else {}
    if feeds.get(1) is not chain.internal[-1] or feeds.get(0) is None or \
            feeds[0].data not in (a.data, b.data):
        return None
    chain.roles["difference"] = sub
    chain.g = feeds[0]
    chain.y = b if chain.g.data == a.data else a
    last = next_op(sdfg, state, sub, chain.internal)
    if last is None or last.op_type != "Mul" or \
            {x.data for x in inputs_of(state, last).values()} != \
            {chain.y.data, chain.internal[-1].data}:
        return Refusal(f"{name}: the difference is not multiplied by '{chain.y.data}'")
    chain.roles["gradient"] = last
    outs = state.out_edges(last)
    chain.out = outs[0].dst
    arrays = [chain.g, chain.y, chain.out]
    if len(outs) != 1 or any(tuple(sdfg.arrays[x.data].shape) != shape for x in arrays):
        return Refusal(f"{name}: the gradient, '{chain.y.data}' and the result do not all "
                       f"have the shape {shape_text(shape)}")
    dtypes = {sdfg.arrays[x.data].dtype for x in arrays + chain.internal}
    if len(dtypes) != 1 or dtypes.pop() not in FLOAT_TYPES:
        return Refusal(f"{name}: its tensors are not all float32 or all float64")
    _absorb_mask(sdfg, state, chain, shape)
    return chain


def _absorb_mask(sdfg, state, chain, shape) -> None:
    """Rule 3: the Muls that make ``g`` join, each leaving a factor."""
    readers = {chain.roles["product"], chain.roles["difference"]}
    for k in range(MAX_FACTORS):
        g = chain.g
        desc = sdfg.arrays[g.data]
        mul = writer_of(state, g)
        if (mul is None or mul.op_type != "Mul" or not desc.transient
                or len(state_accesses(state, g.data)) != 1
                or {e.dst for e in state.out_edges(g)} != readers
                or len(state.out_edges(g)) != len(readers)):
            return
        feeds = inputs_of(state, mul)
        if len(feeds) != 2 or sdfg.arrays[feeds[0].data].dtype != desc.dtype:
            return
        sizes = [_size(sdfg, feeds[p]) for p in (0, 1)]
        full = [tuple(sdfg.arrays[feeds[p].data].shape) == shape for p in (0, 1)]
        keep = 0 if full[0] else (1 if full[1] else None)
        other = 1 - keep if keep is not None else None
        if keep is None or not (full[other] or sizes[other] == 1) or \
                sdfg.arrays[feeds[other].data].dtype != desc.dtype:
            return
        chain.roles[f"mask{k}"] = mul
        chain.internal.append(g)
        chain.factors.append(feeds[other])
        chain.g = feeds[keep]
        readers = {mul}


def _size(sdfg, access) -> int:
    return int(sdfg.arrays[access.data].total_size)


@register
class SoftmaxBackwardFusion(OperatorTransformation):
    level = "fusion"
    name = "SoftmaxBackwardFusion"
    description = ("Softmax's backward pass (Mul, ReduceSum, Sub, Mul), with the Dropout mask "
                   "before it, as one row kernel: no product, sum or masked gradient stored")
    op_types = {"ReduceSum"}
    role = "sum"
    refusal = "{match.description}: no longer a softmax backward chain"

    def plan(self, sdfg, state, node, weights=None):
        return chain_of(sdfg, state, node)

    def roles(self, node, chain) -> dict:
        return dict(chain.roles)

    def describe(self, node, chain):
        mask = f" and {len(chain.factors)} mask factor(s)" if chain.factors else ""
        return (f"softmax backward {prog.fused_name(list(chain.roles.values()))}{mask} as one "
                f"row kernel")

    def rewrite(self, sdfg, state, node, chain, weights=None):
        members = list(chain.roles.values())
        name = prog.fused_name(members)
        factors = [f"f{k}" for k in range(len(chain.factors))]
        fused = OnnxOp(prog.unique_label(state, name), op_type=OP_TYPE, domain=DOMAIN,
                       onnx_name=name, opset=members[0].opset, attrs={"axis": chain.axis},
                       onnx_inputs=["g", "y"] + factors, onnx_outputs=["dx"])
        replace_chain(sdfg, state, members, chain.internal, fused,
                      list(zip(["g", "y"] + factors, [chain.g, chain.y] + chain.factors)),
                      [("dx", chain.out)])
