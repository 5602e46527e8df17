"""The training losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both see the scores as (N, C, D) (D: the spatial dims, flattened) and the
labels as (N, D). One parallel map over (n, d) picks ``-x[n, label, d]``
times the label's weight; a label equal to ``ignore_index`` contributes 0
with weight 0. ``reduction="none"`` writes that straight to the output;
``sum`` and ``mean`` keep the terms and their weights in transients and a
last state adds them up (in double), ``mean`` dividing by the sum of the
weights applied, as the spec says (the count of labels not ignored when
there are no weights). SoftmaxCrossEntropyLoss first takes the log-softmax
over C (into its second output when the node has one).

A label outside [0, C) that is not ``ignore_index`` has no defined result;
it is clamped into range for the reads, so no read leaves the arrays.
"""
import math

import dace

from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype

REDUCTIONS = ("none", "sum", "mean")


@implements("NegativeLogLikelihoodLoss")
def nll_loss(call):
    return _loss(call, scores=call.input(0))


@implements("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(call):
    return _loss(call, scores=call.input(0), log_softmax=True)


def _loss(call, scores: str, log_softmax: bool = False):
    refuse_float16(call)
    if np_dtype(call.dtype(scores)).kind != "f":
        raise call.fail(f"{call.op_type} is defined for floating-point scores only")
    reduction = call.attr("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise call.fail(f"reduction={reduction!r} is none of {', '.join(REDUCTIONS)}")
    labels, weight, loss = call.input(1), call.input(2), call.output(0)
    shape = call.shape(scores)
    if len(shape) < 2:
        raise call.fail(f"scores of shape {list(shape)}: need (N, C, d1, ...)")
    n, c, d = shape[0], shape[1], math.prod(shape[2:])
    if not n * c * d:
        raise call.fail(f"empty scores of shape {list(shape)}")
    view = {scores: (n, c, d), labels: (n, d)}
    if reduction == "none":
        view[loss] = (n, d)
    log_prob = call.output(1) if log_softmax else None
    if log_prob:
        view[log_prob] = (n, c, d)
    sdfg, state = connector_sdfg(call, call.op_type.lower(), view)
    dtype = call.dtype(scores)

    picked = scores
    if log_softmax:
        picked = log_prob
        if not log_prob:
            picked = "log_prob"
            sdfg.add_transient(picked, (n, c, d), dtype)
        _log_softmax(state, scores, picked, n, c, d)
        state = sdfg.add_state_after(state, "pick")

    ignore = call.attr("ignore_index")
    term, term_weight = (loss, None) if reduction == "none" else ("terms", "term_weights")
    if term_weight:
        sdfg.add_transient(term, (n, d), dtype)
        sdfg.add_transient(term_weight, (n, d), dtype)
    inputs = {"t": dace.Memlet(f"{labels}[n, d]"),
              "row": dace.Memlet(f"{picked}[n, 0:{c}, d]", volume=1)}
    weighted = "1"
    if weight:
        inputs["w"] = dace.Memlet(f"{weight}[0:{c}]", volume=1)
        weighted = "w[__k]"
    # Locals carry a __ prefix, as mapped_tasklet gives connectors: after inlining,
    # a local named like an array of the model would shadow it in C++.
    lines = [f"__k = 0 if t < 0 else ({c - 1} if t > {c - 1} else t)",
             f"__wt = {weighted}",
             "l = -row[__k] * __wt"]
    if ignore is not None:
        lines += [f"if t == {int(ignore)}:", "    __wt = 0", "    l = 0"]
    outputs = {"l": dace.Memlet(f"{term}[n, d]")}
    if term_weight:
        outputs["wo"] = dace.Memlet(f"{term_weight}[n, d]")
        lines.append("wo = __wt")
    mapped_tasklet(state, "pick", {"n": f"0:{n}", "d": f"0:{d}"}, inputs, "\n".join(lines),
                   outputs)
    if term_weight:
        state = sdfg.add_state_after(state, reduction)
        total = "__s / __ws" if reduction == "mean" else "__s"
        tasklet = state.add_tasklet(
            reduction, {"__l", "__w"}, {"__out"},
            f"__s = 0.0\n__ws = 0.0\n"
            f"for __i in range({n}):\n"
            f"    for __j in range({d}):\n"
            f"        __s = __s + __l[__i, __j]\n"
            f"        __ws = __ws + __w[__i, __j]\n"
            f"__out = {total}")
        state.add_edge(state.add_read(term), None, tasklet, "__l",
                       dace.Memlet(f"{term}[0:{n}, 0:{d}]"))
        state.add_edge(state.add_read(term_weight), None, tasklet, "__w",
                       dace.Memlet(f"{term_weight}[0:{n}, 0:{d}]"))
        state.add_edge(tasklet, "__out", state.add_write(loss), None,
                       dace.Memlet(f"{loss}[{', '.join('0' for _ in sdfg.arrays[loss].shape)}]"))
    return sdfg


def _log_softmax(state, x: str, out: str, n: int, c: int, d: int):
    """out[n, :, d] = x - max - log(sum(exp(x - max))) along C."""
    mapped_tasklet(state, "log_softmax", {"n": f"0:{n}", "d": f"0:{d}"},
                   {"line": dace.Memlet(f"{x}[n, 0:{c}, d]")},
                   f"__m = line[0]\n"
                   f"for __j in range(1, {c}):\n"
                   f"    __m = max(__m, line[__j])\n"
                   f"__s = 0.0\n"
                   f"for __j in range({c}):\n"
                   f"    __s = __s + exp(line[__j] - __m)\n"
                   f"__shift = __m + log(__s)\n"
                   f"for __j in range({c}):\n"
                   f"    lp[__j] = line[__j] - __shift",
                   {"lp": dace.Memlet(f"{out}[n, 0:{c}, d]")})
