"""Softmax and LayerNormalization as numpy-style bodies.

Both see their input reshaped to the axes they reduce over, so one body
covers every rank and axis.
"""
import math

import numpy as np

from workbench.ops.registry import implements, program_sdfg


def _axis(call, rank, default):
    axis = call.attr("axis", default)
    return axis + rank if axis < 0 else axis


@implements("Softmax", "LogSoftmax")
def softmax(call):
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    if call.node.opset >= 13:  # one axis; rows before it, columns after it
        axis = _axis(call, len(shape), -1)
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    else:  # opset < 13 coerces to 2-D at axis
        axis = _axis(call, len(shape), 1)
        outer, n, inner = math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    log = call.op_type == "LogSoftmax"

    kept = (outer, 1, inner)  # the frontend rejects keepdims; reshape instead

    def body(X, Y):
        m = np.reshape(np.max(X, axis=1), kept)
        e = np.exp(X - m)
        s = np.reshape(np.sum(e, axis=1), kept)
        Y[:] = e / s

    def log_body(X, Y):
        m = np.reshape(np.max(X, axis=1), kept)
        d = X - m
        s = np.reshape(np.sum(np.exp(d), axis=1), kept)
        Y[:] = d - np.log(s)

    return program_sdfg(call, log_body if log else body, {x: (outer, n, inner), y: (outer, n, inner)})


@implements("LayerNormalization")
def layer_norm(call):
    x, scale, bias, y = call.input(0), call.input(1), call.input(2), call.output(0)
    if call.output(1) or call.output(2):
        raise call.fail("the Mean/InvStdDev outputs (training mode) are not supported")
    shape = call.shape(x)
    axis = _axis(call, len(shape), -1)
    rows, cols = math.prod(shape[:axis]), math.prod(shape[axis:])
    for c in (scale, bias):
        if c is not None and math.prod(call.shape(c)) != cols:
            raise call.fail(f"Scale/B of shape {call.shape(c)} do not cover the normalized "
                            f"shape {shape[axis:]}")
    eps = float(call.attr("epsilon", 1e-5))

    def body(X, S, B, Y):
        mean = np.mean(X, axis=1)
        d = X - mean[:, np.newaxis]
        var = np.mean(d * d, axis=1)
        Y[:] = d / np.sqrt(var + eps)[:, np.newaxis] * S + B

    def body_no_bias(X, S, Y):
        mean = np.mean(X, axis=1)
        d = X - mean[:, np.newaxis]
        var = np.mean(d * d, axis=1)
        Y[:] = d / np.sqrt(var + eps)[:, np.newaxis] * S

    shapes = {x: (rows, cols), y: (rows, cols), scale: (cols,)}
    if bias is None:
        return program_sdfg(call, body_no_bias, shapes)
    return program_sdfg(call, body, {**shapes, bias: (cols,)})
