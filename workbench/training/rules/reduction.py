"""Reductions and the softmax family."""
from workbench.training.rules import rule


def reduce_axes(c) -> list:
    x = c.x(0)
    rank = len(c.shape(x))
    if c.x(1):
        axes = [int(a) for a in c.e.constant_value(c.x(1))]
    else:
        axes = c.attr("axes")
    if not axes:
        return [] if c.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(int(a) % rank for a in axes)


def _spread(c, axes):
    """dy broadcast back over the reduced axes."""
    e, x = c.e, c.x(0)
    shape = c.shape(x)
    kept = [1 if i in axes else d for i, d in enumerate(shape)]
    return e.expand(e.reshape(c.dy(), kept), shape)


@rule("ReduceSum")
def reduce_sum(c):
    return [_spread(c, reduce_axes(c)), None]


@rule("ReduceMean")
def reduce_mean(c):
    e, x = c.e, c.x(0)
    axes = reduce_axes(c)
    count = 1
    for a in axes:
        count *= c.shape(x)[a]
    spread = _spread(c, axes)
    return [e.mul(spread, e.scalar(1.0 / count, x)) if count != 1 else spread, None]


def _axis(c) -> int:
    return int(c.attr("axis", -1)) % len(c.shape(c.x(0)))


@rule("Softmax")
def softmax(c):
    e, y, dy = c.e, c.y(), c.dy()
    inner = e.reduce_sum(e.mul(dy, y), [_axis(c)], keepdims=True)
    return [e.mul(y, e.sub(dy, inner))]


@rule("LogSoftmax")
def log_softmax(c):
    e, y, dy = c.e, c.y(), c.dy()
    total = e.reduce_sum(dy, [_axis(c)], keepdims=True)
    return [e.sub(dy, e.mul(e.unary("Exp", y), total))]
