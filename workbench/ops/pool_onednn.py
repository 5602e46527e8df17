"""MaxPool, AveragePool and the global pools on oneDNN (implementation ``onednn``).

One shim call (``wb_dnnl_pool``) per node, reading and writing the arrays at
their own strides, so a pool between two convolutions keeps channels-last
data as it lies (ChannelsLast). MaxPool's optional Indices output is not
offered: the node keeps its own implementation then.
"""
import dace

from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv_onednn import library_call, library_ready, strides_of
from workbench.ops.registry import expand_as, implements
from workbench.ops.window import sliding_window


def pool_desc(call) -> onednn.PoolDesc:
    """The call's pooling as the shim's descriptor (raises call.fail when it has none)."""
    x, y = call.input(0), call.output(0)
    xs, ys = call.shape(x), call.shape(y)
    nsp = len(xs) - 2
    if not 1 <= nsp <= 3:
        raise call.fail(f"oneDNN pools have 1 to 3 spatial dimensions, not {nsp}")
    if call.dtype(x) != dace.float32:
        raise call.fail("the oneDNN implementation is float32 only")
    if call.output(1) is not None:
        raise call.fail("oneDNN's pooling gives no Indices output")
    d = onednn.PoolDesc()
    d.nsp = nsp
    size = onednn.set_size
    size(d, "n", xs[0])
    size(d, "c", xs[1])
    if call.op_type.startswith("Global"):
        kernel, strides, dil, begin, end = xs[2:], [1] * nsp, [1] * nsp, [0] * nsp, [0] * nsp
    else:
        win = sliding_window(call, xs, ys, call.attr("kernel_shape"))
        kernel, strides, dil, begin, end = (win.kernel, win.strides, win.dilations, win.begin,
                                            win.end)
    include_pad = call.op_type == "AveragePool" and call.attr("count_include_pad", 0) == 1
    for i in range(nsp):
        for f, v in (("in_", xs[2 + i]), ("out", ys[2 + i]), ("k", kernel[i]),
                     ("stride", strides[i]), ("dil", dil[i]), ("pad_l", begin[i])):
            size(d, f, v, i)
        # oneDNN wants the end pad that makes exactly ys windows (ceil_mode's last window
        # reaches past ONNX's pads); such taps are skipped by max and exclude-pad averages
        reach = (ys[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        try:
            needed = max(reach - xs[2 + i] - begin[i], 0)
        except TypeError:   # sympy: the sign changes with the size (its parity, after strides)
            if include_pad:
                raise call.fail("an AveragePool counting pads whose end pad depends on a "
                                "symbolic size") from None
            import sympy
            needed = sympy.Max(reach - xs[2 + i] - begin[i], 0)   # set on each call
        if needed != end[i] and include_pad:
            raise call.fail("an AveragePool counting pads with ceil_mode windows past the pads")
        size(d, "pad_r", needed, i)
    for i, s in enumerate(strides_of(call, x)):
        size(d, "src_strides", s, i)
    for i, s in enumerate(strides_of(call, y)):
        size(d, "dst_strides", s, i)
    if call.op_type in ("MaxPool", "GlobalMaxPool"):
        d.algorithm = onednn.POOL["max"]
    else:
        d.algorithm = onednn.POOL["avg_include_pad" if include_pad else "avg_exclude_pad"]
    if 0 in xs or 0 in ys:
        raise call.fail("an empty tensor")
    return d


@implements("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", impl="onednn")
def pool_onednn(call):
    """On the library; the pure implementation where it has none (see conv_onednn)."""
    try:
        library_ready(call)
        return library_call(call, "pooling", pool_desc(call), {"__x": call.input(0)},
                            call.output(0), "wb_dnnl_pool", "__x, __y")
    except UnsupportedCaseError:
        return expand_as(call)
