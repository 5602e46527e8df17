"""The training optimizers of ai.onnx.preview.training: Momentum, Adagrad, Adam.

Each takes the learning rate R and the step count T (scalars), then n
tensors to optimize and their per-tensor state, grouped by kind (X1..Xn,
G1..Gn, V1..Vn[, H1..Hn]), and returns the updated tensors then the updated
states in the same grouping. Every tensor is one parallel element map
(its own state) reading R and T once per element; arithmetic in double.
"""
import re

import dace

from workbench.ops.index_maps import index_map, literal, op_sdfg, params
from workbench.ops.registry import implements, np_dtype

DOMAIN = "ai.onnx.preview.training"
MOMENTUM_MODES = ("standard", "nesterov")


@implements("Momentum", domain=DOMAIN)
def momentum(call):
    mode = call.attr("mode", "standard")
    if mode not in MOMENTUM_MODES:
        raise call.fail(f"mode={mode!r} is neither 'standard' nor 'nesterov'")
    alpha, beta, norm = (literal(float(call.attr(a))) for a in ("alpha", "beta",
                                                                "norm_coefficient"))
    step = "xn = x - r * vn" if mode == "standard" else f"xn = x - r * (__gr + {alpha} * vn)"
    code = [f"__gr = {norm} * x + g",
            f"vn = {alpha} * v + ({beta} if t > 0 else 1.0) * __gr",
            step]
    return _optimizer(call, ["x", "g", "v"], ["xn", "vn"], code)


@implements("Adagrad", domain=DOMAIN)
def adagrad(call):
    decay, eps, norm = (literal(float(call.attr(a))) for a in ("decay_factor", "epsilon",
                                                               "norm_coefficient"))
    code = [f"__ra = r / (1.0 + t * {decay})",
            f"__gr = {norm} * x + g",
            "hn = h + __gr * __gr",
            f"xn = x - __ra * __gr / (sqrt(hn) + {eps})"]
    return _optimizer(call, ["x", "g", "h"], ["xn", "hn"], code)


@implements("Adam", domain=DOMAIN)
def adam(call):
    alpha, beta, eps, norm, post = (literal(float(call.attr(a))) for a in (
        "alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"))
    code = [f"__gr = {norm} * x + g",
            f"vn = {alpha} * v + (1.0 - {alpha}) * __gr",
            f"hn = {beta} * h + (1.0 - {beta}) * __gr * __gr",
            f"__ra = r * sqrt(1.0 - pow({beta}, t)) / (1.0 - pow({alpha}, t)) if t > 0 else r",
            f"xn = (1.0 - {post}) * (x - __ra * (vn / (sqrt(hn) + {eps})))"]
    return _optimizer(call, ["x", "g", "v", "h"], ["xn", "vn", "hn"], code)


def _optimizer(call, kinds: list, results: list, code: list):
    """One element map per optimized tensor: ``code`` over the scalars ``r``, ``t`` and
    that tensor's ``kinds`` (its value, gradient, states) assigns ``results``."""
    ins = call.node.onnx_inputs
    outs = call.node.onnx_outputs
    groups = len(ins) - 2
    if groups <= 0 or groups % len(kinds) or not all(ins):
        raise call.fail(f"{len(ins)} inputs: R, T and {len(kinds)} groups of equal count "
                        "expected, none omitted")
    n = groups // len(kinds)
    if len(outs) > len(results) * n:
        raise call.fail(f"{len(outs)} outputs for {n} tensor(s): at most {len(results) * n}")
    r, t = ins[0], ins[1]
    for scalar, what in ((r, "R"), (t, "T")):
        if len(call.shape(scalar)) > 1 or (call.shape(scalar) or (1,))[0] != 1:
            raise call.fail(f"{what} of shape {list(call.shape(scalar))} is not a scalar")
    sdfg, state = op_sdfg(call, call.op_type.lower())
    first = True
    for i in range(n):
        tensors = [ins[2 + k * n + i] for k in range(len(kinds))]
        shape = call.shape(tensors[0])
        if any(call.shape(c) != shape for c in tensors):
            raise call.fail(f"tensor {i + 1}'s value, gradient and states differ in shape: "
                            f"{[list(call.shape(c)) for c in tensors]}")
        if np_dtype(call.dtype(tensors[0])).kind != "f":
            raise call.fail(f"{call.op_type} optimizes floating-point tensors only")
        index = ", ".join(params(len(shape))) or "0"
        reads = {"r": dace.Memlet(f"{r}[0]"), "t": dace.Memlet(f"{t}[0]")}
        reads.update({kind: dace.Memlet(f"{c}[{index}]") for kind, c in zip(kinds, tensors)})
        writes = {}
        for k, result in enumerate(results):
            position = k * n + i
            if position < len(outs) and outs[position]:
                writes[result] = dace.Memlet(f"{outs[position]}[{index}]")
        if not writes:
            continue
        body = "\n".join(_rename_locals(code, set(results) - set(writes)))
        if not first:
            state = sdfg.add_state_after(state, f"tensor_{i}")
        first = False
        index_map(state, f"update_{i}", shape or (1,), reads, body, writes)
    return sdfg


def _rename_locals(lines: list, unwritten: set) -> list:
    """Results without an output become tasklet locals; locals carry a ``__`` prefix: after
    inlining, one named like an array of the model would shadow it in C++."""
    out = []
    for line in lines:
        for name in unwritten:
            line = re.sub(rf"(?<![\w.]){name}\b", f"__{name}", line)
        out.append(line)
    return out
