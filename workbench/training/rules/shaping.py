"""Ops that move elements without arithmetic: their gradients move the
gradient's elements back (reshape, inverse transpose, slices of a Concat,
scatter-adds for Gather)."""
import numpy as np
from onnx import TensorProto

from workbench.training.rules import rule


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def same_elements(c):
    return [c.e.reshape(c.dy(), c.shape(c.x(0)))]


@rule("Transpose")
def transpose(c):
    rank = len(c.shape(c.x(0)))
    perm = c.attr("perm") or list(range(rank))[::-1]
    return [c.e.transpose(c.dy(), list(np.argsort(perm)))]


@rule("Concat")
def concat(c):
    e, dy = c.e, c.dy()
    axis = int(c.attr("axis")) % len(c.shape(dy))
    grads, start = [], 0
    for i, x in enumerate(c.node.input):
        size = c.shape(x)[axis]
        if c.wants(i):
            shape = list(c.shape(dy))
            shape[axis] = size
            grads.append(e.op("Slice", [dy, e.ints([start]), e.ints([start + size]),
                                        e.ints([axis])], like=dy, shape=shape))
        else:
            grads.append(None)
        start += size
    return grads


@rule("Split")
def split(c):
    e = c.e
    x = c.x(0)
    axis = int(c.attr("axis", 0)) % len(c.shape(x))
    pieces = [c.dy(i) for i in range(len(c.node.output))]
    return [e.op("Concat", pieces, like=x, axis=axis)]


@rule("Tile")
def tile(c):
    e, x, dy = c.e, c.x(0), c.dy()
    shape = c.shape(x)
    repeats = [int(r) for r in e.constant_value(c.x(1))]
    split_shape = [d for pair in zip(repeats, shape) for d in pair]
    summed = e.reduce_sum(e.reshape(dy, split_shape), range(0, 2 * len(shape), 2), keepdims=False)
    return [e.reshape(summed, shape), None]


@rule("Slice")
def slice_rule(c):
    e, x, dy = c.e, c.x(0), c.dy()
    shape = c.shape(x)
    rank = len(shape)
    starts = e.constant_value(c.x(1))
    ends = e.constant_value(c.x(2))
    axes = e.constant_value(c.x(3)) if c.x(3) else range(len(starts))
    steps = e.constant_value(c.x(4)) if c.x(4) else [1] * len(starts)
    pads = [0] * (2 * rank)
    grad = dy
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % rank
        taken = list(range(shape[axis]))[slice(int(start), int(end), int(step))]
        if not taken:
            return [e.zeros(x)] + [None] * 4
        if step == 1:
            pads[axis], pads[rank + axis] = taken[0], shape[axis] - taken[-1] - 1
            continue
        # a strided or reversed axis: scatter the rows back where they came from
        full = list(e.shape(grad))
        full[axis] = shape[axis]
        index_shape = [1] * rank
        index_shape[axis] = len(taken)
        index = e.expand(e.const(np.array(taken, np.int64).reshape(index_shape)), e.shape(grad))
        zeros = e.op("ConstantOfShape", [e.ints(full)], like=grad, shape=full,
                     value=_zero_tensor(e.elem_type(grad)))
        grad = e.op("ScatterElements", [zeros, index, grad], like=grad, shape=full, axis=axis)
    if any(pads):
        grad = e.op("Pad", [grad, e.ints(pads)], like=x, shape=shape)
    return [grad] + [None] * 4


@rule("Pad")
def pad(c):
    e, x, dy = c.e, c.x(0), c.dy()
    if (c.attr("mode", "constant") or "constant") != "constant":
        raise c.fail(f"mode {c.attr('mode')!r} (only constant padding)")
    shape = c.shape(x)
    rank = len(shape)
    pads = [int(p) for p in (e.constant_value(c.x(1)) if c.e.opset >= 11 else c.attr("pads"))]
    axes = [int(a) % rank for a in e.constant_value(c.x(3))] if c.x(3) else list(range(rank))
    if any(p < 0 for p in pads):
        raise c.fail("negative pads")
    n = len(axes)
    starts = [pads[i] for i in range(n)]
    ends = [pads[i] + shape[a] for i, a in enumerate(axes)]
    return [e.op("Slice", [dy, e.ints(starts), e.ints(ends), e.ints(axes)], like=x)] + [None] * 3


@rule("Gather")
def gather(c):
    """A scatter-add: every row the gather read gets the sum of its gradients
    (an embedding table's rows add up over the tokens that used them)."""
    e, data, indices, dy = c.e, c.x(0), c.x(1), c.dy()
    shape = c.shape(data)
    rank = len(shape)
    axis = int(c.attr("axis", 0)) % rank
    ishape = c.shape(indices)
    n_idx = int(np.prod(ishape)) if ishape else 1
    # the gathered axes first: dy is (pre, I..., post) -> (I..., pre, post)
    pre = list(range(axis))
    gathered = list(range(axis, axis + len(ishape)))
    post = list(range(axis + len(ishape), len(c.shape(dy))))
    moved = e.transpose(dy, gathered + pre + post)
    rest = [shape[i] for i in range(rank) if i != axis]
    rows = e.reshape(moved, [n_idx] + rest)
    index = e.reshape(indices, [n_idx, 1])
    if e.elem_type(index) != TensorProto.INT64:
        index = e.op("Cast", [index], like=index, elem_type=TensorProto.INT64,
                     to=TensorProto.INT64)
    size = e.const(np.array(shape[axis], np.int64))
    negative = e.op("Less", [index, e.const(np.array(0, np.int64))], like=index,
                    elem_type=TensorProto.BOOL)
    index = e.op("Where", [negative, e.add(index, size), index], like=index)
    table = [shape[axis]] + rest
    zeros = e.op("ConstantOfShape", [e.ints(table)], like=dy, shape=table,
                 value=_zero_tensor(e.elem_type(dy)))
    summed = e.op("ScatterND", [zeros, index, rows], like=dy, shape=table, reduction="add")
    back = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))
    return [e.transpose(summed, back), None]


def _zero_tensor(elem_type):
    from onnx import helper
    return helper.make_tensor("zero", elem_type, [1], [0])
