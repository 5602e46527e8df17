"""Normalizations: statistics over some axes, then one element-wise map.

Each op is a list of reduction stages (see ``reduce.py``) over the axes it
normalizes, and an output expression of ``x``, the stages' results and the
op's parameters (scale, bias, ...). What differs between ops is only how
the input is seen (which axes are reduced) and how parameters line up with
it; ``normalize`` does the rest.
"""
import math

import dace

from workbench.ops.reduce import (MEAN, SHIFT, Grouping, Reduction, add_stages, attr_axis,
                                  names_in, refuse_float16)
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype

EXP_SUM = Reduction("0", "exp(x - m)", "+")
INV_STD = Reduction("0", "(x - mean) * (x - mean)", "+", "1 / sqrt(s / {n} + {epsilon})")
VARIANCE = Reduction("0", "(x - mean) * (x - mean)", "+", "s / {n}")

SOFTMAX = [("m", SHIFT), ("s", EXP_SUM)]
STANDARDIZE = [("mean", MEAN), ("inv_std", INV_STD)]


def normalize(call, x_view, axes, stages, output: str, params: dict = None, consts=None,
              targets: dict = None):
    """``y = output`` at every element of ``x`` seen with shape ``x_view``.

    ``stages`` reduce over ``axes``; ``params`` maps an expression name to
    (connector, view shape of the same rank as ``x_view``, size-1 dims
    broadcast); ``targets`` maps a stage name to the output it fills.
    Returns (sdfg, last state, stage name -> result array).
    """
    refuse_float16(call)
    x, y = call.input(0), call.output(0)
    params, targets, consts = params or {}, targets or {}, consts or {}
    grouping = Grouping(tuple(x_view), frozenset(axes))
    shapes = {x: x_view, y: x_view, **{t: grouping.kept_shape for t in targets.values()},
              **{conn: view for conn, view in params.values()}}
    sdfg, state = connector_sdfg(call, call.op_type.lower(), shapes)
    state, results = add_stages(sdfg, state, x, grouping, stages, targets, consts)
    if math.prod(x_view) == 0:
        return sdfg, state, results
    index = grouping.params()
    inputs = {"x": dace.Memlet(f"{x}[{grouping.x_index()}]")}
    inputs.update({name: dace.Memlet(f"{results[name]}[{grouping.group_index()}]")
                   for name in names_in(output, results)})
    for name, (conn, view) in params.items():
        bcast = ", ".join("0" if n == 1 else p for n, p in zip(view, index))
        inputs[name] = dace.Memlet(f"{conn}[{bcast}]")
    state = sdfg.add_state_after(state, "output")
    mapped_tasklet(state, "normalize", {p: f"0:{n}" for p, n in zip(index, x_view)}, inputs,
                   f"o = {output.format(**consts)}",
                   {"o": dace.Memlet(f"{y}[{grouping.x_index()}]")})
    return sdfg, state, results


@implements("Softmax", "LogSoftmax")
def softmax(call):
    """exp(x - max) / sum(exp(x - max)); LogSoftmax: x - max - log(sum)."""
    if np_dtype(call.dtype(call.input(0))).kind != "f":
        raise call.fail(f"{call.op_type} is defined for floating-point data only")
    shape = call.shape(call.input(0))
    axis = attr_axis(call, len(shape), -1)
    if call.node.opset >= 13:  # one axis
        view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
    else:  # coerced to 2-D at axis
        view = (math.prod(shape[:axis]), math.prod(shape[axis:]), 1)
    output = "exp(x - m) / s" if call.op_type == "Softmax" else "x - m - log(s)"
    return normalize(call, view, [1], SOFTMAX, output)[0]


@implements("LayerNormalization")
def layer_norm(call):
    """(x - mean) / sqrt(var + epsilon) * Scale + B over the axes from ``axis`` on."""
    x, scale, bias = call.input(0), call.input(1), call.input(2)
    shape = call.shape(x)
    axis = attr_axis(call, len(shape), -1)
    params = {"scale": (scale, _aligned(call.shape(scale), len(shape)))}
    output = "(x - mean) * inv_std * scale"
    if bias:
        params["bias"] = (bias, _aligned(call.shape(bias), len(shape)))
        output += " + bias"
    targets = {"mean": call.output(1), "inv_std": call.output(2)}
    return normalize(call, shape, range(axis, len(shape)), STANDARDIZE, output, params,
                     {"epsilon": call.attr("epsilon")},
                     {k: v for k, v in targets.items() if v})[0]


@implements("RMSNormalization")
def rms_norm(call):
    """x / sqrt(mean(x^2) + epsilon) * scale over the axes from ``axis`` on."""
    x, scale = call.input(0), call.input(1)
    shape = call.shape(x)
    axis = attr_axis(call, len(shape), -1)
    inv_rms = Reduction("0", "x * x", "+", "1 / sqrt(s / {n} + {epsilon})")
    return normalize(call, shape, range(axis, len(shape)), [("inv_rms", inv_rms)],
                     "x * inv_rms * scale",
                     {"scale": (scale, _aligned(call.shape(scale), len(shape)))},
                     {"epsilon": call.attr("epsilon")})[0]


def _aligned(shape, rank):
    """numpy broadcasting: align right, pad with size-1 dims."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def _channels(call, conn, view_rank):
    """A per-channel (C,) parameter seen against an (N, C, spatial) view."""
    return (conn, (1, call.shape(conn)[0], 1)[:view_rank])


@implements("InstanceNormalization")
def instance_norm(call):
    """Standardize each (n, c) over the spatial dims; scale and bias per channel."""
    x, scale, bias = call.input(0), call.input(1), call.input(2)
    n, c, *spatial = call.shape(x)
    return normalize(call, (n, c, math.prod(spatial)), [2], STANDARDIZE,
                     "(x - mean) * inv_std * scale + bias",
                     {"scale": _channels(call, scale, 3), "bias": _channels(call, bias, 3)},
                     {"epsilon": call.attr("epsilon")})[0]


@implements("GroupNormalization")
def group_norm(call):
    """Standardize each (n, group) over its channels and spatial dims; scale and
    bias are per group before opset 21, per channel from 21 on."""
    x, scale, bias = call.input(0), call.input(1), call.input(2)
    n, c, *spatial = call.shape(x)
    groups = call.attr("num_groups")
    view = (n, groups, c // groups, math.prod(spatial))
    per_group = call.node.opset < 21
    params = {p: (conn, (1, groups, 1 if per_group else c // groups, 1))
              for p, conn in (("scale", scale), ("bias", bias))}
    return normalize(call, view, [2, 3], STANDARDIZE, "(x - mean) * inv_std * scale + bias",
                     params, {"epsilon": call.attr("epsilon")})[0]


@implements("MeanVarianceNormalization")
def mean_variance_norm(call):
    """(x - mean) / (std + 1e-9) over ``axes`` (the schema's function body)."""
    shape = call.shape(call.input(0))
    axes = [a + len(shape) if a < 0 else a for a in call.attr("axes")]
    std = Reduction("0", "(x - mean) * (x - mean)", "+", "sqrt(s / {n})")
    return normalize(call, shape, axes, [("mean", MEAN), ("std", std)],
                     "(x - mean) / (std + 1e-9)")[0]


@implements("LpNormalization")
def lp_norm(call):
    """x / ||x||_p along ``axis`` (p is 1 or 2); 0 where the norm is 0."""
    shape = call.shape(call.input(0))
    p = call.attr("p")
    if p not in (1, 2):
        raise call.fail(f"p={p} (the spec allows 1 and 2)")
    norm = Reduction("0", "abs(x)", "+") if p == 1 else Reduction("0", "x * x", "+", "sqrt(s)")
    return normalize(call, shape, [attr_axis(call, len(shape), -1)], [("norm", norm)],
                     "0 if norm == 0 else x / norm")[0]


@implements("BatchNormalization")
def batch_norm(call):
    """(x - mean) / sqrt(var + epsilon) * scale + B per channel. In training mode
    mean and var are the batch's (population variance), and the running
    statistics blend them in with ``momentum``."""
    x, scale, bias, mean, var = (call.input(i) for i in range(5))
    n, c, *spatial = call.shape(x)
    view = (n, c, math.prod(spatial))
    output = "(x - mean) / sqrt(var + {epsilon}) * scale + bias"
    params = {p: _channels(call, conn, 3) for p, conn in (("scale", scale), ("bias", bias))}
    eps = {"epsilon": call.attr("epsilon")}
    training = call.attr("training_mode", 0) if call.node.opset >= 14 else bool(call.output(1))
    if not training:
        params.update(mean=_channels(call, mean, 3), var=_channels(call, var, 3))
        return normalize(call, view, [0, 2], [], output, params, eps)[0]
    if call.output(3) or call.output(4):
        raise call.fail("the saved mean/var outputs of training mode (opsets before 14)")
    sdfg, state, batch = normalize(call, view, [0, 2], [("mean", MEAN), ("var", VARIANCE)],
                                   output, params, eps)
    momentum = call.attr("momentum")
    for out, given, stat in ((call.output(1), mean, batch["mean"]),
                             (call.output(2), var, batch["var"])):
        if out:  # running = given * momentum + batch * (1 - momentum)
            state = sdfg.add_state_after(state, f"running_{out}")
            mapped_tasklet(state, "blend", {"c": f"0:{c}"},
                           {"r": dace.Memlet(f"{given}[c]"), "b": dace.Memlet(f"{stat}[0, c, 0]")},
                           f"o = r * {momentum} + b * (1 - {momentum})",
                           {"o": dace.Memlet(f"{out}[c]")})
    return sdfg
