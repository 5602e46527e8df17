"""Convolutions and pools.

Conv's input gradient is a ConvTranspose of dY with the same weights; its
weight gradient is again a convolution, of the input (batch and channels
swapped) with dY as the kernel, strides and dilations exchanged, per group
(oneDNN runs both as a convolution's backward passes:
workbench/ops/deconv_onednn.py, conv_wgrad.py).
MaxPool sends dY to the positions its Indices output names (a scatter-add:
overlapping windows can pick the same element); AveragePool spreads dY over
each window divided by that window's count, as a depthwise ConvTranspose.
"""
import numpy as np
from onnx import TensorProto

from workbench.training.rules import rule
from workbench.training.rules.normalization import saved_output


def window(c, spatial, kernel):
    """strides, dilations, pads (begins + ends) with auto_pad made explicit."""
    n = len(kernel)
    strides = list(c.attr("strides") or [1] * n)
    dilations = list(c.attr("dilations") or [1] * n)
    pads = list(c.attr("pads") or [0] * (2 * n))
    auto = c.attr("auto_pad", "NOTSET") or "NOTSET"
    out = c.shape(c.y())[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(n):
            total = max(0, (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
                        - spatial[i])
            small = total // 2
            pads[i], pads[n + i] = ((small, total - small) if auto == "SAME_UPPER"
                                    else (total - small, small))
    elif auto == "VALID":
        pads = [0] * (2 * n)
    return strides, dilations, pads


def transpose_back(e, dy, weights, spatial, strides, dilations, pads, group, like):
    """The gradient, onto an input of size ``spatial``, of the Conv(x, weights) that
    made dy: a ConvTranspose of dy with ``weights``, which oneDNN runs as the
    convolution's backward-data pass (a Conv with the kernel turned around took
    turning copies of the weights each step, and strided, 4x the work on dY spread
    with zeros: ResNet-18's b8 step 287.8-291.1 ms against 293.2-303.6).
    """
    n = len(spatial)
    kernel = e.shape(weights)[2:]
    out = e.shape(dy)[2:]
    pads = list(pads)
    padding = []
    for i in range(n):
        full = strides[i] * (out[i] - 1) + (kernel[i] - 1) * dilations[i] + 1
        extra = spatial[i] - (full - pads[i] - pads[n + i])
        if extra < 0:   # the last windows reached past the end (ceil mode): crop more
            pads[n + i] -= extra
            extra = 0
        padding.append(extra)
    attrs = dict(strides=strides, dilations=dilations, pads=pads, group=group)
    if any(padding):
        attrs["output_padding"] = padding
    shape = (e.shape(dy)[0], e.shape(like)[1]) + tuple(spatial)
    return e.op("ConvTranspose", [dy, weights], like=like, shape=shape, **attrs)


@rule("Conv")
def conv(c):
    e, x, w, dy = c.e, c.x(0), c.x(1), c.dy()
    xs, ws = c.shape(x), c.shape(w)
    spatial, kernel = xs[2:], ws[2:]
    strides, dilations, pads = window(c, spatial, kernel)
    group = int(c.attr("group", 1))
    n = len(spatial)
    grads = [None, None, None]
    if c.wants(2):
        grads[2] = e.reshape(e.reduce_sum(dy, [0] + list(range(2, 2 + n)), keepdims=False),
                             c.shape(c.x(2)))
    if c.wants(0):
        grads[0] = transpose_back(e, dy, w, spatial, strides, dilations, pads, group, x)
    if c.wants(1):
        batch, chans = xs[0], xs[1]
        per_group = chans // group
        # input: (C/G, G*N, *S), channel g*N + n holding x[n, g*C/G + c]; one Transpose
        # where there is one group, which a library convolution reads in place
        if group == 1:
            xt = e.transpose(x, [1, 0] + list(range(2, 2 + n)))
        else:
            split = e.reshape(x, (batch, group, per_group) + tuple(spatial))
            xt = e.reshape(e.transpose(split, [2, 1, 0] + list(range(3, 3 + n))),
                           (per_group, group * batch) + tuple(spatial))
        kernel_t = e.transpose(dy, [1, 0] + list(range(2, 2 + n)))   # (Co, N, *O)
        grads[1] = weight_correlation(e, xt, kernel_t, w, strides, dilations, pads, group)
    return grads


def weight_correlation(e, signal, taps, w, strides, dilations, pads, group):
    """A weight's gradient as a Conv: ``signal`` (A, G*N, *S) correlated with ``taps``
    (B, N, *T), the forward pass's strides and dilations exchanged, cropped to the
    kernel of ``w`` and turned from (A, B, *K) to (B, A, *K)."""
    n = len(strides)
    kernel = e.shape(w)[2:]
    ss, ts = e.shape(signal)[2:], e.shape(taps)[2:]
    reach = [(ss[i] + pads[i] + pads[n + i] - (ts[i] - 1) * strides[i] - 1) // dilations[i] + 1
             for i in range(n)]
    lead = (e.shape(signal)[0], e.shape(taps)[0])
    full = e.op("Conv", [signal, taps], like=w, shape=lead + tuple(reach), strides=dilations,
                dilations=strides, pads=list(pads), group=group)
    if tuple(reach) != tuple(kernel):
        full = e.op("Slice", [full, e.ints([0] * n), e.ints(kernel), e.ints(range(2, 2 + n))],
                    like=w, shape=lead + tuple(kernel))
    return e.transpose(full, [1, 0] + list(range(2, 2 + n)))


@rule("MaxPool")
def max_pool(c):
    e, x, dy = c.e, c.x(0), c.dy()
    if c.attr("storage_order", 0):
        raise c.fail("storage_order=1 (column-major indices)")
    indices = saved_output(c, 1, c.shape(dy))
    e.types[indices] = (TensorProto.INT64, tuple(c.shape(dy)))
    size = int(np.prod(c.shape(x)))
    flat = e.op("ConstantOfShape", [e.ints([size])], like=x, shape=(size,),
                value=_zero(e.elem_type(x)))
    count = int(np.prod(c.shape(dy)))
    scattered = e.op("ScatterElements", [flat, e.reshape(indices, [count]), e.reshape(dy, [count])],
                     like=x, shape=(size,), axis=0, reduction="add")
    return [e.reshape(scattered, c.shape(x))]


@rule("AveragePool")
def average_pool(c):
    e, x, dy = c.e, c.x(0), c.dy()
    xs = c.shape(x)
    kernel = list(c.attr("kernel_shape"))
    if any(d != 1 for d in (c.attr("dilations") or [])):
        raise c.fail("dilated average pooling")
    strides, _, pads = window(c, xs[2:], kernel)
    counts = window_counts(xs[2:], e.shape(dy)[2:], kernel, strides, pads,
                           bool(c.attr("count_include_pad", 0)))
    scaled = e.mul(dy, e.const(1.0 / counts.astype(e.np_dtype(x))))
    ones = e.const(np.ones((xs[1], 1) + tuple(kernel), dtype=e.np_dtype(x)))
    return [transpose_back(e, scaled, ones, xs[2:], strides, [1] * len(kernel), pads, xs[1], x)]


def window_counts(spatial, out, kernel, strides, pads, include_pad: bool) -> np.ndarray:
    """How many elements each pooling window averaged (1, 1, *out)."""
    n = len(spatial)
    per_axis = []
    for i in range(n):
        start = np.arange(out[i]) * strides[i] - pads[i]
        end = start + kernel[i]
        low, high = (-pads[i], spatial[i] + pads[n + i]) if include_pad else (0, spatial[i])
        per_axis.append(np.minimum(end, high) - np.maximum(start, low))
    counts = per_axis[0]
    for axis in per_axis[1:]:
        counts = np.multiply.outer(counts, axis)
    return counts.reshape((1, 1) + tuple(out))


@rule("GlobalAveragePool")
def global_average_pool(c):
    e, x = c.e, c.x(0)
    xs = c.shape(x)
    spread = e.expand(c.dy(), xs)
    return [e.mul(spread, e.scalar(1.0 / int(np.prod(xs[2:])), x))]


def _zero(elem_type):
    from onnx import helper
    return helper.make_tensor("zero", elem_type, [1], [0])


@rule("ConvTranspose")
def conv_transpose(c):
    """A ConvTranspose is the adjoint of the Conv with its weights, strides, pads and
    dilations: dX is that Conv of dY; dW correlates dY with the input as a Conv
    (batch and channels swapped), per group."""
    e, x, w, dy = c.e, c.x(0), c.x(1), c.dy()
    xs, ws, ys = c.shape(x), c.shape(w), c.shape(dy)
    n = len(xs) - 2
    kernel = ws[2:]
    if c.attr("output_shape") or (c.attr("auto_pad", "NOTSET") or "NOTSET") != "NOTSET":
        raise c.fail("output_shape or auto_pad (give explicit pads)")
    strides = list(c.attr("strides") or [1] * n)
    dilations = list(c.attr("dilations") or [1] * n)
    pads = list(c.attr("pads") or [0] * (2 * n))
    group = int(c.attr("group", 1))
    grads = [None, None, None]
    if c.wants(2):
        grads[2] = e.reshape(e.reduce_sum(dy, [0] + list(range(2, 2 + n)), keepdims=False),
                             c.shape(c.x(2)))
    if c.wants(0):
        grads[0] = e.op("Conv", [dy, w], like=x, shape=xs, strides=strides, dilations=dilations,
                        pads=pads, group=group)
    if c.wants(1):
        batch, per_out = xs[0], ws[1]
        # input: (Co/G, G*N, *O), channel g*N + n holding dy[n, g*Co/G + co]
        split = e.reshape(dy, (batch, group, per_out) + tuple(ys[2:]))
        dyt = e.reshape(e.transpose(split, [2, 1, 0] + list(range(3, 3 + n))),
                        (per_out, group * batch) + tuple(ys[2:]))
        xt = e.transpose(x, [1, 0] + list(range(2, 2 + n)))        # (Ci, N, *I)
        ends = [max(0, (kernel[i] - 1) * dilations[i] + (xs[2 + i] - 1) * strides[i] + 1
                    - ys[2 + i] - pads[i]) for i in range(n)]
        grads[1] = weight_correlation(e, dyt, xt, w, strides, dilations, pads[:n] + ends,
                                      group)
    return grads


@rule("Resize")
def resize(c):
    """Every Resize mode is linear in X and separable by axis: dX is dY multiplied
    along each resized axis by the transpose of that axis's interpolation matrix,
    which the reference implementation computes at build time from a basis."""
    e, x, dy = c.e, c.x(0), c.dy()
    xs, ys = c.shape(x), c.shape(dy)
    if c.attr("antialias", 0):
        raise c.fail("antialias (not separable as written here)")
    grad = dy
    for axis in [a for a in range(len(xs)) if xs[a] != ys[a]]:
        matrix = _interpolation_matrix(c, axis)            # (out, in)
        rank = len(xs)
        last = [a for a in range(rank) if a != axis] + [axis]
        moved = e.transpose(grad, last)
        shape = list(e.shape(moved))
        shape[-1] = xs[axis]
        product = e.op("MatMul", [moved, e.const(matrix.astype(e.np_dtype(x)))], like=x,
                       shape=shape)
        grad = e.transpose(product, list(np.argsort(last)))
    return [grad, None, None, None]


def _interpolation_matrix(c, axis: int) -> np.ndarray:
    """(out, in) weights of ``axis``: the node's Resize run on a basis of that axis."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    e = c.e
    xs, ys = c.shape(c.x(0)), c.shape(c.y())
    size_in, size_out = xs[axis], ys[axis]
    basis_shape = [1] * len(xs)
    basis_shape[axis] = size_in
    basis = np.eye(size_in).reshape([size_in] + basis_shape) if axis else None
    if basis is None:
        raise c.fail("resizing the batch axis")
    inputs = ["x", "", "", ""]
    inits = []
    scales = e.constant_value(c.x(2)) if c.x(2) else None
    if scales is not None and np.size(scales):
        one_axis = np.ones(len(xs) + 1, np.float32)
        one_axis[axis + 1] = float(np.asarray(scales).reshape(-1)[axis])
        inits.append(numpy_helper.from_array(one_axis, "scales"))
        inputs[2] = "scales"
    else:
        sizes = np.array([size_in] + [1] * len(xs), np.int64)
        sizes[axis + 1] = size_out
        inits.append(numpy_helper.from_array(sizes, "sizes"))
        inputs[3] = "sizes"
    attrs = {a.name: helper.get_attribute_value(a) for a in c.node.attribute}
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "basis", [helper.make_tensor_value_info(
        "x", onnx_double(), [size_in] + basis_shape)], [helper.make_tensor_value_info(
            "y", onnx_double(), None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(e.opset, 13))])
    out = ReferenceEvaluator(model).run(None, {"x": basis})[0]   # (in, ..., out at axis, ...)
    return np.moveaxis(out.reshape(size_in, -1), 0, 1).reshape(size_out, size_in) \
        if out.reshape(size_in, -1).shape[1] == size_out else _fail_shape(c)


def onnx_double():
    return TensorProto.DOUBLE


def _fail_shape(c):
    raise c.fail("the interpolation basis did not come out with the output's size")
