"""LayerNormBackwardFusion: LayerNorm's input gradient as one row kernel.

The gradient rule of LayerNormalization (``workbench/training/rules/
normalization.py``) writes the input gradient as ten operators:

    g = dy * scale;  a = g - c1 * ReduceSum(g);  p = g * xhat
    b = xhat * (c2 * ReduceSum(p));  dx = (a - b) * inv_std

five of them writing a tensor of the input's size that the next ones read
back. One ``LayerNormGrad`` node (``workbench/ops/layernorm_grad.py``) reads
``dy``, ``xhat``, the scale and ``inv_std`` and writes ``dx``, row by row.
``xhat`` stays: the scale's gradient reads it too.

Rules:
1. Matches the Mul writing ``dx`` from ``Sub(a, b)`` and ``inv_std`` (either
   order), and walks back: ``a = Sub(g, Mul(ReduceSum(g), c1))``, ``b =
   Mul(xhat, Mul(ReduceSum(Mul(g, xhat)), c2))`` (products in either order),
   ``g = Mul(dy, scale)``; ``c1`` and ``c2`` are constant scalars.
2. Both sums keep dimensions and reduce the same trailing axes; ``dy``,
   ``xhat`` and ``dx`` have one shape, ``inv_std`` one value per row, the
   scale broadcasts as a contiguous suffix of a row; all are float32 or all
   float64.
3. Every tensor between the operators is a transient with one access node,
   written once and read only by operators of the chain.
4. Applying it puts one LayerNormGrad in place of the ten operators.
"""
from dataclasses import dataclass, field

from transforms.fusion import program as prog
from transforms.fusion.chains import (constant_scalar, inputs_of, reduced_axes, replace_chain,
                                      writer_of)
from transforms.graph import state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.layernorm_grad import DOMAIN, OP_TYPE
from workbench.ops.node import OnnxOp
from workbench.ops.onepass import suffix_size
from workbench.ops.simd import FLOAT_TYPES
from workbench.transformation_api import Refusal, register


@dataclass
class Chain:
    roles: dict = field(default_factory=dict)   # role -> operator
    arrays: dict = field(default_factory=dict)  # dy, xhat, scale, inv_std, dx -> access node
    internal: list = field(default_factory=list)
    axis: int = -1
    c1: float = 0.0
    c2: float = 0.0


def _step(state, chain, role, access, op_type):
    """The ``op_type`` operator writing ``access`` (an internal tensor), joined as ``role``."""
    op = writer_of(state, access, op_type)
    if op is None:
        return None
    chain.roles[role] = op
    chain.internal.append(access)
    return op


def _pair(state, node):
    feeds = inputs_of(state, node)
    return (feeds.get(0), feeds.get(1)) if len(feeds) == 2 else (None, None)


def _mean_of(state, chain, access, role):
    """(the tensor summed, its constant) for ``access = Mul(ReduceSum(t), c)``."""
    scale = _step(state, chain, f"{role}_scale", access, "Mul")
    if scale is None:
        return None, None
    feeds = inputs_of(state, scale)
    pos = next((p for p in (0, 1) if p in feeds and constant_scalar(scale, 1 - p) is not None),
               None)
    if pos is None:
        return None, None
    total = _step(state, chain, f"{role}_sum", feeds[pos], "ReduceSum")
    if total is None:
        return None, None
    return total, constant_scalar(scale, 1 - pos)


def chain_of(sdfg, state, last):
    """The ``Chain`` ending at the Mul ``last`` (rules 1-3), a ``Refusal``, or None when
    it is not the end of a LayerNorm input gradient."""
    chain = Chain(roles={"dx": last})
    x0, x1 = _pair(state, last)
    if x0 is None:
        return None
    diff = next((x for x in (x0, x1) if writer_of(state, x, "Sub")), None)
    if diff is None:
        return None
    inv = x1 if diff is x0 else x0
    sub2 = _step(state, chain, "difference", diff, "Sub")
    a, b = _pair(state, sub2)
    sub1 = a is not None and _step(state, chain, "centred", a, "Sub")
    mul6 = b is not None and _step(state, chain, "correction", b, "Mul")
    if not sub1 or not mul6:
        return None
    g, m1 = _pair(state, sub1)
    total1, c1 = _mean_of(state, chain, m1, "mean") if m1 is not None else (None, None)
    if total1 is None or inputs_of(state, total1).get(0) is not g:
        return None
    u, v = _pair(state, mul6)
    m2 = next((x for x in (u, v) if x is not None and writer_of(state, x, "Mul")
               and writer_of(state, x, "Mul").consts), None)
    xhat = v if m2 is u else u
    total2, c2 = _mean_of(state, chain, m2, "projection") if m2 is not None else (None, None)
    if total2 is None:
        return None
    p = inputs_of(state, total2).get(0)
    mul4 = p is not None and _step(state, chain, "product", p, "Mul")
    if not mul4 or {x.data for x in _pair(state, mul4) if x is not None} != {g.data, xhat.data}:
        return None
    mul2 = _step(state, chain, "gradient", g, "Mul")
    if not mul2:
        return None
    dy, scale = _pair(state, mul2)
    if dy is None:
        return None
    shape = tuple(sdfg.arrays[xhat.data].shape)
    if tuple(sdfg.arrays[dy.data].shape) != shape:
        dy, scale = scale, dy
    name = f"the LayerNorm gradient ending in {last.onnx_name}"
    outs = state.out_edges(last)
    chain.arrays = {"dy": dy, "xhat": xhat, "scale": scale, "inv_std": inv,
                    "dx": outs[0].dst if len(outs) == 1 else None}
    chain.c1, chain.c2 = c1, c2
    return _checked(sdfg, state, chain, shape, name, total1, total2)


def _checked(sdfg, state, chain, shape, name, total1, total2):
    """Rules 2 and 3 on a chain whose operators were found."""
    arrays = chain.arrays
    rank = len(shape)
    axes = reduced_axes(total1, rank)
    if not axes or axes != reduced_axes(total2, rank) or axes != list(range(axes[0], rank)):
        return Refusal(f"{name}: its sums do not keep dimensions over the same trailing axes")
    chain.axis = axes[0]
    row_stats = tuple(shape[:chain.axis]) + (1,) * (rank - chain.axis)
    if arrays["dx"] is None or any(tuple(sdfg.arrays[arrays[k].data].shape) != shape
                                   for k in ("dy", "dx")):
        return Refusal(f"{name}: dy, xhat and dx do not all have the shape {list(shape)}")
    if tuple(sdfg.arrays[arrays["inv_std"].data].shape) != row_stats:
        return Refusal(f"{name}: '{arrays['inv_std'].data}' is not one value per row")
    if suffix_size(tuple(sdfg.arrays[arrays["scale"].data].shape), shape[chain.axis:]) is None:
        return Refusal(f"{name}: the scale does not broadcast as a suffix of a row")
    dtypes = {sdfg.arrays[a.data].dtype for a in list(arrays.values()) + chain.internal}
    if len(dtypes) != 1 or dtypes.pop() not in FLOAT_TYPES:
        return Refusal(f"{name}: its tensors are not all float32 or all float64")
    members = set(chain.roles.values())
    for access in chain.internal:
        if (not sdfg.arrays[access.data].transient or len(state_accesses(state, access.data)) != 1
                or any(e.dst not in members for e in state.out_edges(access))):
            return Refusal(f"{name}: '{access.data}' is read outside the chain")
    return chain


@register
class LayerNormBackwardFusion(OperatorTransformation):
    level = "fusion"
    name = "LayerNormBackwardFusion"
    description = ("LayerNorm's input gradient (ten operators: two row sums and the "
                   "element-wise work around them) as one row kernel")
    op_types = {"Mul"}
    role = "dx"
    refusal = "{match.description}: no longer a LayerNorm gradient chain"

    def plan(self, sdfg, state, node, weights=None):
        return chain_of(sdfg, state, node)

    def roles(self, node, chain) -> dict:
        return dict(chain.roles)

    def describe(self, node, chain):
        return (f"LayerNorm input gradient {prog.fused_name(list(chain.roles.values()))} as one "
                f"row kernel")

    def rewrite(self, sdfg, state, node, chain, weights=None):
        members = list(chain.roles.values())
        name = prog.fused_name(members)
        fused = OnnxOp(prog.unique_label(state, name), op_type=OP_TYPE, domain=DOMAIN,
                       onnx_name=name, opset=node.opset,
                       attrs={"axis": chain.axis, "c1": chain.c1, "c2": chain.c2},
                       onnx_inputs=["dy", "xhat", "scale", "inv_std"], onnx_outputs=["dx"])
        replace_chain(sdfg, state, members, chain.internal, fused,
                      [(conn, chain.arrays[conn]) for conn in fused.onnx_inputs],
                      [("dx", chain.arrays["dx"])])
