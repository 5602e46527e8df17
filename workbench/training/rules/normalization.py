"""LayerNormalization from the mean and inverse deviation its forward node
saves; BatchNormalization with fixed statistics (in training mode the
forward pass computes the batch's own statistics from ordinary ops, see
``workbench.training.forward``, and the element-wise rules differentiate it)."""
import numpy as np
from onnx import TensorProto

from workbench.training.rules import rule


def _mean_over(e, x, axes):
    shape = e.shape(x)
    count = int(np.prod([shape[a] for a in axes]))
    return e.mul(e.reduce_sum(x, axes, keepdims=True), e.scalar(1.0 / count, x))


def _as(e, name, like):
    if e.elem_type(name) == e.elem_type(like):
        return name
    return e.op("Cast", [name], like=like, shape=e.shape(name), to=e.elem_type(like))


def saved_output(c, index: int, shape, elem_type=TensorProto.FLOAT) -> str:
    """Output ``index`` of the forward node, added to it when the model left it off."""
    node, e = c.node, c.e
    while len(node.output) <= index:
        node.output.append("")
    if not node.output[index]:
        node.output[index] = e.fresh(f"{node.output[0]}_saved{index}")
        e.types[node.output[index]] = (elem_type, tuple(shape))
    return node.output[index]


@rule("LayerNormalization")
def layer_norm(c):
    e, x, dy = c.e, c.x(0), c.dy()
    shape = c.shape(x)
    rank = len(shape)
    axis = int(c.attr("axis", -1)) % rank
    stat_shape = tuple(shape[:axis]) + (1,) * (rank - axis)
    stash = int(c.attr("stash_type", TensorProto.FLOAT))
    mean, inv_std = (_as(e, saved_output(c, i, stat_shape, stash), x) for i in (1, 2))
    axes = list(range(axis, rank))
    xhat = e.mul(e.sub(x, mean), inv_std)
    grads = [None, None, None]
    if c.wants(1):
        grads[1] = e.unbroadcast(e.mul(dy, xhat), c.shape(c.x(1)))
    if c.wants(2):
        grads[2] = e.unbroadcast(dy, c.shape(c.x(2)))
    if c.wants(0):
        g = e.mul(dy, c.x(1))
        centred = e.sub(e.sub(g, _mean_over(e, g, axes)),
                        e.mul(xhat, _mean_over(e, e.mul(g, xhat), axes)))
        grads[0] = e.mul(centred, inv_std)
    return grads


@rule("BatchNormalization")
def batch_norm_fixed(c):
    e, x, dy = c.e, c.x(0), c.dy()
    shape = c.shape(x)
    if (c.attr("training_mode", 0) or any(c.y(i) for i in (1, 2))):
        raise c.fail("a training-mode BatchNormalization is rewritten before differentiation")
    eps = c.attr("epsilon", 1e-5)
    channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    scale, bias, mean, var = (e.reshape(c.x(i), channel) for i in (1, 2, 3, 4))
    inv = e.unary("Reciprocal", e.unary("Sqrt", e.add(var, e.scalar(eps, var))))
    axes = [0] + list(range(2, len(shape)))
    grads = [None] * 5
    if c.wants(0):
        grads[0] = e.mul(dy, e.mul(scale, inv))
    if c.wants(1):
        xhat = e.mul(e.sub(x, mean), inv)
        grads[1] = e.reshape(e.reduce_sum(e.mul(dy, xhat), axes, keepdims=True), c.shape(c.x(1)))
    if c.wants(2):
        grads[2] = e.reshape(e.reduce_sum(dy, axes, keepdims=True), c.shape(c.x(2)))
    del bias
    return grads
