"""Element-wise and broadcasting ops: the gradient of an input that was
broadcast is summed over the axes the broadcast added or stretched."""
import math

import numpy as np

from workbench.training.rules import rule


def _bool(e, op_type, a, b):
    shape = np.broadcast_shapes(e.shape(a), e.shape(b))
    from onnx import TensorProto
    return e.op(op_type, [a, b], shape=shape, elem_type=TensorProto.BOOL)


def where(e, cond, a, b):
    shape = np.broadcast_shapes(e.shape(cond), e.shape(a), e.shape(b))
    like = a if e.is_float(a) and e.shape(a) else b
    return e.op("Where", [cond, a, b], like=like, shape=shape)


def _scaled(c, derivative):
    """dy * f'(x) for a unary op."""
    return [c.e.mul(c.dy(), derivative)]


@rule("Identity")
def identity(c):
    return [c.dy()]


@rule("Cast", "CastLike")
def cast(c):
    x = c.x(0)
    if not c.e.is_float(x):
        return [None]
    return [c.e.op("Cast", [c.dy()], like=x, to=c.e.elem_type(x))]


@rule("Add", "Sum")
def add(c):
    return [c.e.unbroadcast(c.dy(), c.shape(x)) if c.wants(i) else None
            for i, x in enumerate(c.node.input)]


@rule("Mean")
def mean(c):
    scaled = c.e.mul(c.dy(), c.e.scalar(1.0 / len(c.node.input), c.y()))
    return [c.e.unbroadcast(scaled, c.shape(x)) if c.wants(i) else None
            for i, x in enumerate(c.node.input)]


@rule("Sub")
def sub(c):
    e, dy = c.e, c.dy()
    return [e.unbroadcast(dy, c.shape(c.x(0))) if c.wants(0) else None,
            e.unbroadcast(e.unary("Neg", dy), c.shape(c.x(1))) if c.wants(1) else None]


@rule("Mul")
def mul(c):
    e, dy, a, b = c.e, c.dy(), c.x(0), c.x(1)
    return [e.unbroadcast(e.mul(dy, b), c.shape(a)) if c.wants(0) else None,
            e.unbroadcast(e.mul(dy, a), c.shape(b)) if c.wants(1) else None]


@rule("Div")
def div(c):
    e, dy, a, b = c.e, c.dy(), c.x(0), c.x(1)
    grads = [e.unbroadcast(e.div(dy, b), c.shape(a)) if c.wants(0) else None, None]
    if c.wants(1):  # d(a/b)/db = -y/b
        grads[1] = e.unbroadcast(e.unary("Neg", e.div(e.mul(dy, c.y()), b)), c.shape(b))
    return grads


@rule("Neg")
def neg(c):
    return [c.e.unary("Neg", c.dy())]


@rule("Relu")
def relu(c):
    e, x = c.e, c.x(0)
    return [where(e, _bool(e, "Greater", x, e.scalar(0, x)), c.dy(), e.scalar(0, x))]


@rule("LeakyRelu")
def leaky_relu(c):
    e, x = c.e, c.x(0)
    slope = where(e, _bool(e, "Greater", x, e.scalar(0, x)), e.scalar(1, x),
                  e.scalar(c.attr("alpha", 0.01), x))
    return _scaled(c, slope)


@rule("Elu")
def elu(c):
    e, x = c.e, c.x(0)
    alpha = e.scalar(c.attr("alpha", 1.0), x)
    slope = where(e, _bool(e, "Greater", x, e.scalar(0, x)), e.scalar(1, x), e.add(c.y(), alpha))
    return _scaled(c, slope)


@rule("Sigmoid")
def sigmoid(c):
    e, y = c.e, c.y()
    return _scaled(c, e.mul(y, e.sub(e.scalar(1, y), y)))


@rule("Tanh")
def tanh(c):
    e, y = c.e, c.y()
    return _scaled(c, e.sub(e.scalar(1, y), e.mul(y, y)))


@rule("Exp")
def exp(c):
    return _scaled(c, c.y())


@rule("Log")
def log(c):
    return [c.e.div(c.dy(), c.x(0))]


@rule("Sqrt")
def sqrt(c):
    e, y = c.e, c.y()
    return [e.div(e.mul(c.dy(), e.scalar(0.5, y)), y)]


@rule("Reciprocal")
def reciprocal(c):
    e, y = c.e, c.y()
    return [e.unary("Neg", e.mul(c.dy(), e.mul(y, y)))]


@rule("Abs")
def absolute(c):
    return _scaled(c, c.e.unary("Sign", c.x(0)))


@rule("Erf")
def erf(c):
    e, x = c.e, c.x(0)
    bell = e.unary("Exp", e.unary("Neg", e.mul(x, x)))
    return _scaled(c, e.mul(bell, e.scalar(2 / math.sqrt(math.pi), x)))


@rule("Softplus")
def softplus(c):
    return _scaled(c, c.e.unary("Sigmoid", c.x(0)))


@rule("Gelu")
def gelu(c):
    e, x = c.e, c.x(0)
    if c.attr("approximate", "none") == "tanh":
        # y = x/2 (1 + tanh(u)), u = k (x + 0.044715 x^3)
        k = math.sqrt(2 / math.pi)
        x2 = e.mul(x, x)
        u = e.mul(e.scalar(k, x), e.add(x, e.mul(e.scalar(0.044715, x), e.mul(x2, x))))
        t = e.unary("Tanh", u)
        du = e.mul(e.scalar(k, x), e.add(e.scalar(1, x), e.mul(e.scalar(3 * 0.044715, x), x2)))
        sech2 = e.sub(e.scalar(1, x), e.mul(t, t))
        slope = e.add(e.mul(e.scalar(0.5, x), e.add(e.scalar(1, x), t)),
                      e.mul(e.mul(e.scalar(0.5, x), x), e.mul(sech2, du)))
        return _scaled(c, slope)
    cdf = e.mul(e.scalar(0.5, x), e.add(e.scalar(1, x), e.unary(
        "Erf", e.mul(x, e.scalar(1 / math.sqrt(2), x)))))
    pdf = e.mul(e.unary("Exp", e.mul(e.mul(x, x), e.scalar(-0.5, x))),
                e.scalar(1 / math.sqrt(2 * math.pi), x))
    return _scaled(c, e.add(cdf, e.mul(x, pdf)))


@rule("Pow")
def power(c):
    e, dy, x, p = c.e, c.dy(), c.x(0), c.x(1)
    grads = [None, None]
    if c.wants(0):
        p_x = p if e.elem_type(p) == e.elem_type(x) else e.op("Cast", [p], like=x,
                                                               shape=c.shape(p),
                                                               to=e.elem_type(x))
        lower = e.binary("Pow", x, e.sub(p_x, e.scalar(1, x)))
        grads[0] = e.unbroadcast(e.mul(dy, e.mul(p_x, lower)), c.shape(x))
    if c.wants(1):
        grads[1] = e.unbroadcast(e.mul(dy, e.mul(c.y(), e.unary("Log", x))), c.shape(p))
    return grads


@rule("Clip")
def clip(c):
    e, x = c.e, c.x(0)
    low = c.x(1) if c.e.opset >= 11 else None
    high = c.x(2) if c.e.opset >= 11 else None
    if c.e.opset < 11:
        low = e.scalar(c.attr("min", -3.4028234663852886e38), x)
        high = e.scalar(c.attr("max", 3.4028234663852886e38), x)
    inside = None
    for bound, op_type in ((low, "GreaterOrEqual"), (high, "LessOrEqual")):
        if bound is None:
            continue
        test = _bool(e, op_type, x, bound)
        inside = test if inside is None else _bool(e, "And", inside, test)
    if inside is None:
        return [c.dy()]
    return [where(e, inside, c.dy(), e.scalar(0, x))]


@rule("HardSigmoid")
def hard_sigmoid(c):
    e, x = c.e, c.x(0)
    alpha = c.attr("alpha", 0.2)
    z = e.add(e.mul(x, e.scalar(alpha, x)), e.scalar(c.attr("beta", 0.5), x))
    inside = _bool(e, "And", _bool(e, "Greater", z, e.scalar(0, x)),
                   _bool(e, "Less", z, e.scalar(1, x)))
    return [where(e, inside, e.mul(c.dy(), e.scalar(alpha, x)), e.scalar(0, x))]


@rule("HardSwish")
def hard_swish(c):
    # PyTorch's: 0 below -3, x/3 + 1/2 up to 3, 1 above
    e, x = c.e, c.x(0)
    middle = e.add(e.mul(x, e.scalar(1 / 3, x)), e.scalar(0.5, x))
    slope = where(e, _bool(e, "Less", x, e.scalar(-3, x)), e.scalar(0, x),
                  where(e, _bool(e, "LessOrEqual", x, e.scalar(3, x)), middle, e.scalar(1, x)))
    return _scaled(c, slope)


@rule("Max", "Min")
def extreme(c):
    e, y, dy = c.e, c.y(), c.dy()
    grads, taken = [], None
    for i, x in enumerate(c.node.input):
        # the first input equal to the result takes the gradient (ties go to one input)
        hit = _bool(e, "Equal", x, y)
        if taken is not None:
            hit = _bool(e, "And", hit, e.op("Not", [taken], like=taken))
        grads.append(e.unbroadcast(where(e, hit, dy, e.scalar(0, y)), c.shape(x))
                     if c.wants(i) else None)
        taken = hit if taken is None else _bool(e, "Or", taken, hit)
    return grads


@rule("Where")
def where_rule(c):
    e, cond, dy = c.e, c.x(0), c.dy()
    zero = e.scalar(0, dy)
    return [None,
            e.unbroadcast(where(e, cond, dy, zero), c.shape(c.x(1))) if c.wants(1) else None,
            e.unbroadcast(where(e, cond, zero, dy), c.shape(c.x(2))) if c.wants(2) else None]


@rule("Expand")
def expand(c):
    return [c.e.unbroadcast(c.dy(), c.shape(c.x(0))), None]
