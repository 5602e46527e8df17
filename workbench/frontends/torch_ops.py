"""PyTorch's operators for the ONNX ops the training reference runs
(``torch_graph.TorchGraph``): one function per op type, ``fn(graph, node, args,
attrs)`` returning a tensor or a list of them, in ``OPS``."""
import numpy as np
from onnx import helper, numpy_helper

from workbench.errors import BadInputError


def _ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


def _axes(args, attrs, index=1):
    if len(args) > index and args[index] is not None:
        return _ints(args[index])
    return attrs.get("axes")


def _conv_padding(F, x, attrs, kernel, dilations=None):
    n = len(kernel)
    pads = attrs.get("pads") or [0] * (2 * n)
    auto = attrs.get("auto_pad", "NOTSET")
    strides = attrs.get("strides") or [1] * n
    dilations = dilations or attrs.get("dilations") or [1] * n
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        ends = []
        for i in range(n):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small = total // 2
            begin, end = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
            pads.append(begin)
            ends.append(end)
        pads = pads + ends
    if pads[:n] == pads[n:]:
        return x, list(pads[:n])
    flat = []
    for i in reversed(range(n)):
        flat += [pads[i], pads[n + i]]
    return F.pad(x, flat), [0] * n


def _conv(g, node, args, attrs):
    F = g.torch.nn.functional
    x, w, b = args[0], args[1], args[2] if len(args) > 2 else None
    kernel = list(w.shape[2:])
    x, padding = _conv_padding(F, x, attrs, kernel)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(kernel)]
    return fn(x, w, b, stride=attrs.get("strides") or 1, padding=padding,
              dilation=attrs.get("dilations") or 1, groups=attrs.get("group", 1))


def _pool(g, node, args, attrs):
    F = g.torch.nn.functional
    x = args[0]
    kernel = attrs["kernel_shape"]
    n = len(kernel)
    pads = attrs.get("pads") or [0] * (2 * n)
    strides = attrs.get("strides") or [1] * n
    ceil = bool(attrs.get("ceil_mode", 0))
    if pads[:n] != pads[n:]:
        raise BadInputError(f"{node.name}: asymmetric pooling pads in the PyTorch reference")
    if node.op_type == "MaxPool":
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        return fn(x, kernel, strides, pads[:n], dilation=attrs.get("dilations") or 1,
                  ceil_mode=ceil)
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    return fn(x, kernel, strides, pads[:n], ceil_mode=ceil,
              count_include_pad=bool(attrs.get("count_include_pad", 0)))


def _batch_norm(g, node, args, attrs):
    F = g.torch.nn.functional
    x, scale, bias, mean, var = args[:5]
    if g.batchnorm == "batch":
        # running statistics are copied: the reference must not move the model's buffers
        mean, var = mean.detach().clone(), var.detach().clone()
        g.buffers[node.input[3]], g.buffers[node.input[4]] = mean, var
        return F.batch_norm(x, mean, var, scale, bias, training=True,
                            momentum=1.0 - attrs.get("momentum", 0.9),
                            eps=attrs.get("epsilon", 1e-5))
    return F.batch_norm(x, mean, var, scale, bias, training=False, eps=attrs.get("epsilon", 1e-5))


def _layer_norm(g, node, args, attrs):
    F = g.torch.nn.functional
    x = args[0]
    axis = attrs.get("axis", -1) % x.dim()
    return F.layer_norm(x, x.shape[axis:], args[1], args[2] if len(args) > 2 else None,
                        eps=attrs.get("epsilon", 1e-5))


def _gemm(g, node, args, attrs):
    a, b = args[0], args[1]
    a = a.t() if attrs.get("transA", 0) else a
    b = b.t() if attrs.get("transB", 0) else b
    y = attrs.get("alpha", 1.0) * (a @ b)
    if len(args) > 2 and args[2] is not None:
        y = y + attrs.get("beta", 1.0) * args[2]
    return y


def _slice(g, node, args, attrs):
    x = args[0]
    starts, ends = _ints(args[1]), _ints(args[2])
    axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(len(starts)))
    steps = _ints(args[4]) if len(args) > 4 and args[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= x.dim()
        picked = list(range(x.shape[a]))[slice(s, e, st)]
        if st > 0:
            index[a] = slice(picked[0], picked[-1] + 1, st) if picked else slice(0, 0)
        else:
            index[a] = g.torch.tensor(picked, dtype=g.torch.long)
            flips.append(a)
    out = x
    for a, sel in enumerate(index):
        if isinstance(sel, slice):
            out = out[(slice(None),) * a + (sel,)]
        else:
            out = out.index_select(a, sel)
    return out


def _reduce(fn):
    def run(g, node, args, attrs):
        x = args[0]
        axes = _axes(args, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim()))
        return fn(x, dim=[a % x.dim() for a in axes], keepdim=keep)
    return run


def _split(g, node, args, attrs):
    x = args[0]
    axis = attrs.get("axis", 0) % x.dim()
    sizes = _ints(args[1]) if len(args) > 1 and args[1] is not None else attrs.get("split")
    if not sizes:
        n = len(node.output)
        sizes = [-(-x.shape[axis] // n)] * n
        sizes[-1] = x.shape[axis] - sum(sizes[:-1])
    return list(g.torch.split(x, sizes, dim=axis))


def _gather(g, node, args, attrs):
    x, idx = args
    axis = attrs.get("axis", 0) % x.dim()
    idx = idx.long()
    idx = g.torch.where(idx < 0, idx + x.shape[axis], idx)
    out = x.index_select(axis, idx.reshape(-1))
    return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def _reshape(g, node, args, attrs):
    x, shape = args[0], _ints(args[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _unsqueeze(g, node, args, attrs):
    x = args[0]
    axes = sorted(a % (x.dim() + len(_axes(args, attrs))) for a in _axes(args, attrs))
    for a in axes:
        x = x.unsqueeze(a)
    return x


def _squeeze(g, node, args, attrs):
    x = args[0]
    axes = _axes(args, attrs)
    if axes is None:
        return x.squeeze()
    for a in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(a)
    return x


def _cast(g, node, args, attrs):
    import torch
    to = helper.tensor_dtype_to_np_dtype(attrs["to"])
    return args[0].to({np.dtype("float32"): torch.float32, np.dtype("float64"): torch.float64,
                       np.dtype("int64"): torch.int64, np.dtype("int32"): torch.int32,
                       np.dtype("bool"): torch.bool, np.dtype("float16"): torch.float16}[to])


def _clip(g, node, args, attrs):
    x = args[0]
    low = args[1] if len(args) > 1 and args[1] is not None else attrs.get("min")
    high = args[2] if len(args) > 2 and args[2] is not None else attrs.get("max")
    return g.torch.clamp(x, low, high)


def _pad(g, node, args, attrs):
    F = g.torch.nn.functional
    x = args[0]
    pads = _ints(args[1])
    n = x.dim()
    axes = _ints(args[3]) if len(args) > 3 and args[3] is not None else list(range(n))
    full = [0] * (2 * n)
    for i, a in enumerate(axes):
        full[a % n], full[n + a % n] = pads[i], pads[len(axes) + i]
    flat = []
    for a in reversed(range(n)):
        flat += [full[a], full[n + a]]
    value = float(args[2]) if len(args) > 2 and args[2] is not None else 0.0
    return F.pad(x, flat, value=value)


def _softmax(log):
    def run(g, node, args, attrs):
        F = g.torch.nn.functional
        fn = F.log_softmax if log else F.softmax
        return fn(args[0], dim=attrs.get("axis", -1))
    return run


def _gelu(g, node, args, attrs):
    return g.torch.nn.functional.gelu(args[0], approximate=attrs.get("approximate", "none"))


def _dropout(g, node, args, attrs):
    return args[0]


def _concat(g, node, args, attrs):
    return g.torch.cat(args, dim=attrs["axis"])


def _transpose(g, node, args, attrs):
    x = args[0]
    return x.permute(attrs.get("perm") or list(range(x.dim()))[::-1])


def _where(g, node, args, attrs):
    return g.torch.where(args[0], args[1], args[2])


def _elementwise(name):
    def run(g, node, args, attrs):
        torch = g.torch
        F = torch.nn.functional
        x = args[0]
        table = {
            "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
            "Erf": torch.erf, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
            "Reciprocal": torch.reciprocal, "Abs": torch.abs, "Neg": torch.neg,
            "Softplus": F.softplus, "Identity": lambda v: v, "Not": torch.logical_not,
            "HardSwish": F.hardswish,
            "LeakyRelu": lambda v: F.leaky_relu(v, attrs.get("alpha", 0.01)),
            "Elu": lambda v: F.elu(v, attrs.get("alpha", 1.0)),
            "HardSigmoid": lambda v: torch.clamp(attrs.get("alpha", 0.2) * v
                                                 + attrs.get("beta", 0.5), 0, 1),
        }
        return table[name](x)
    return run


def _binary(name):
    def run(g, node, args, attrs):
        torch = g.torch
        table = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
                 "Pow": torch.pow, "MatMul": torch.matmul, "Equal": torch.eq,
                 "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
                 "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or}
        a, b = args
        if name == "Div" and not a.is_floating_point():
            return torch.div(a, b, rounding_mode="trunc")
        return table[name](a, b)
    return run


def _variadic(name):
    def run(g, node, args, attrs):
        out = args[0]
        for x in args[1:]:
            out = {"Sum": lambda p, q: p + q, "Mean": lambda p, q: p + q,
                   "Max": g.torch.maximum, "Min": g.torch.minimum}[name](out, x)
        return out / len(args) if name == "Mean" else out
    return run


def _global_average(g, node, args, attrs):
    x = args[0]
    return x.mean(dim=list(range(2, x.dim())), keepdim=True)


def _expand(g, node, args, attrs):
    x, shape = args[0], _ints(args[1])
    target = list(np.broadcast_shapes(tuple(x.shape), tuple(shape)))
    return x.expand(target)


def _tile(g, node, args, attrs):
    return args[0].repeat(_ints(args[1]))


def _flatten(g, node, args, attrs):
    x = args[0]
    axis = attrs.get("axis", 1) % (x.dim() or 1)
    lead = int(np.prod(x.shape[:axis])) if axis else 1
    return x.reshape(lead, -1)


def _constant(g, node, args, attrs):
    import torch
    value = attrs.get("value")
    array = numpy_helper.to_array(value) if value is not None else np.asarray(
        next(v for k, v in attrs.items() if k.startswith("value")))
    return torch.from_numpy(np.array(array, copy=True))


def _shape(g, node, args, attrs):
    return g.torch.tensor(list(args[0].shape), dtype=g.torch.int64)


def _gather_elements(g, node, args, attrs):
    x, idx = args
    axis = attrs.get("axis", 0) % x.dim()
    idx = idx.long()
    return g.torch.gather(x, axis, g.torch.where(idx < 0, idx + x.shape[axis], idx))


def _constant_of_shape(g, node, args, attrs):
    value = attrs.get("value")
    array = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return g.torch.full(_ints(args[0]), array.reshape(-1)[0].item(),
                        dtype=g.torch.from_numpy(array).dtype)


def _range(g, node, args, attrs):
    start, limit, delta = (a.item() for a in args)
    return g.torch.arange(start, limit, delta, dtype=args[0].dtype)


OPS = {
    "Conv": _conv, "MaxPool": _pool, "AveragePool": _pool, "GlobalAveragePool": _global_average,
    "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm, "Gemm": _gemm,
    "Slice": _slice, "ReduceSum": _reduce(lambda x, dim, keepdim: x.sum(dim=dim, keepdim=keepdim)),
    "ReduceMean": _reduce(lambda x, dim, keepdim: x.mean(dim=dim, keepdim=keepdim)),
    "Split": _split, "Gather": _gather, "Reshape": _reshape, "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze, "Cast": _cast, "Clip": _clip, "Pad": _pad,
    "Softmax": _softmax(False), "LogSoftmax": _softmax(True), "Gelu": _gelu,
    "Dropout": _dropout, "Concat": _concat, "Transpose": _transpose, "Where": _where,
    "Expand": _expand, "Tile": _tile, "Flatten": _flatten, "Constant": _constant,
    "Shape": _shape, "GatherElements": _gather_elements, "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    **{n: _elementwise(n) for n in ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt",
                                     "Reciprocal", "Abs", "Neg", "Softplus", "Identity", "Not",
                                     "HardSwish", "LeakyRelu", "Elu", "HardSigmoid")},
    **{n: _binary(n) for n in ("Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Equal", "Less",
                                "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or")},
    **{n: _variadic(n) for n in ("Sum", "Mean", "Max", "Min")},
}
