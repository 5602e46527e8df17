"""ConvTranspose on oneDNN's deconvolution primitive (implementation ``onednn``).

A training program's input gradient of a strided Conv is a ConvTranspose of
dY with the Conv's own weights (``workbench/training/rules/pooling.py``);
decoders and UNets upsample with it. The pure implementation scatters every
product into a buffer; the library computes it as the backward-data pass of
a convolution, reading the ONNX weight layout (c, m/group, *k) through its
strides and packing it like a convolution's weights (once for constants,
on every call for a training program's parameters).
"""
from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv import _transpose_pads
from workbench.ops.conv_onednn import library_call, library_ready, reorder_traffic, strides_of
from workbench.ops.conv_wgrad import check_operands
from workbench.ops.registry import expand_as, implements, moves_inside


def deconv_desc(call) -> "onednn.DeconvDesc":
    """The ConvTranspose as the shim's descriptor (raises call.fail where it has none)."""
    x, w, b, y = call.input(0), call.input(1), call.input(2), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    nsp = check_operands(call, x, w, y, packed=True)
    group = int(call.attr("group", 1))
    strides = call.attr("strides") or [1] * nsp
    dil = call.attr("dilations") or [1] * nsp
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(xs[2:], strides, ws[2:], dil)]
    begin = _transpose_pads(call, xs, ws, full)
    d = onednn.DeconvDesc()
    d.nsp, d.groups = nsp, group
    size = onednn.set_size
    for f, v in (("n", xs[0]), ("c", xs[1]), ("m", ys[1])):
        size(d, f, v)
    for i in range(nsp):
        # oneDNN's output is full - pad_l - pad_r: output_padding makes pad_r smaller
        for f, v in (("in_", xs[2 + i]), ("out", ys[2 + i]), ("k", ws[2 + i]),
                     ("stride", strides[i]), ("dil", dil[i]), ("pad_l", begin[i]),
                     ("pad_r", full[i] - begin[i] - ys[2 + i])):
            size(d, f, v, i)
    for i, s in enumerate(strides_of(call, x)):
        size(d, "src_strides", s, i)
    for i, s in enumerate(strides_of(call, y)):
        size(d, "dst_strides", s, i)
    d.has_bias = int(b is not None)
    d.weights_vary = int(not call.node.constant_weights)
    return d


@implements("ConvTranspose", impl="onednn")
def conv_transpose_onednn(call):
    """On the library; where it has no kernel, the pure implementation."""
    try:
        library_ready(call)
        d = deconv_desc(call)
        b = call.input(2)
        operands = {"__x": call.input(0), "__w": call.input(1), **({"__b": b} if b else {})}
        return library_call(call, "deconvolution", d, operands, call.output(0),
                            "wb_dnnl_deconv", f"__x, __w, {'__b' if b else 'nullptr'}, __y")
    except UnsupportedCaseError:
        return expand_as(call)


@moves_inside("ConvTranspose", impl="onednn")
def reorder_bytes(call) -> int:
    """What the shim's reorders move around the call (see conv_onednn.reorder_traffic)."""
    try:
        return reorder_traffic(call, deconv_desc(call), call.input(0), call.output(0))
    except UnsupportedCaseError:
        return 0
