"""Convolution over N, C, spatial... tensors (any number of spatial dims).

Two implementations of Conv: ``pure`` sums every (channel, kernel tap)
product straight into Y; ``im2col`` unfolds the input patches into a
transient matrix and multiplies it with the weights by BLAS GEMM, one GEMM
per (image, group). ConvTranspose scatters its products instead.
"""
import math

import dace
from dace.libraries.blas import Gemm

from workbench.build.settings import blas_implementation
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet
from workbench.ops.window import (image_ranges, padded_input, ranges, sliding_window,
                                  spatial_vars)

_SUM = "lambda p, q: p + q"


def conv_sum(call, product: str = "v * f", fill: str = "0", inputs: dict = None,
             bias: str = None, acc_type=None, w_pos: int = 1):
    """acc[n, m, o] = B[m] + sum_{c, k} product(v, f), the tap's input and weight:
    v = X[n, g*C/G + c, o*s + k*d - pad] (g = m's group), f = W[m, c, k].

    W is input ``w_pos``. ``acc`` is Y itself, or a transient of ``acc_type`` (integer
    sums that the caller then requantizes). Returns (sdfg, last state, acc).
    """
    x, w, y = call.input(0), call.input(w_pos), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    win = sliding_window(call, xs, ys, ws[2:])
    group = call.attr("group", 1)
    cpg, mpg = ws[1], ys[1] // group  # input channels per group, outputs per group
    sdfg, state = connector_sdfg(call, "conv")
    acc = y
    if acc_type is not None:
        acc, _ = sdfg.add_transient("acc", ys, acc_type)
    if 0 in ys:
        return sdfg, state, acc
    src = padded_input(sdfg, state, x, xs, win, fill)
    out, ker = spatial_vars("o", win.nsp), spatial_vars("k", win.nsp)
    out_ranges = image_ranges(ys, out, channel="m")
    at = f"{acc}[n, m, {', '.join(out)}]"
    init = sdfg.add_state_before(state, "init")
    if bias is not None:
        parallel(mapped_tasklet(init, "bias", out_ranges, {"v": dace.Memlet(f"{bias}[m]")},
                                "o = v", {"o": dace.Memlet(at)}))
    else:
        parallel(mapped_tasklet(init, "zero", out_ranges, {}, "o = 0", {"o": dace.Memlet(at)}))
    taps = ", ".join(win.taps(out, ker))
    mapped_reduction(state, "conv", out_ranges, {"c": f"0:{cpg}", **ranges(ker, ws[2:])}, {
        "v": dace.Memlet(f"{src}[n, int(m / {mpg}) * {cpg} + c, {taps}]"),
        "f": dace.Memlet(f"{w}[m, c, {', '.join(ker)}]"), **(inputs or {})}, f"o = {product}",
        {"o": dace.Memlet(at, wcr=_SUM)})
    return sdfg, state, acc


@implements("Conv")
def conv_direct(call):
    refuse_float16(call)
    return conv_sum(call, bias=call.input(2))[0]


@implements("ConvTranspose")
def conv_transpose(call):
    """Y[n, g*M/G + m, i*s + k*d - pad] += X[n, g*C/G + c, i] * W[g*C/G + c, m, k].

    The products land in a zeroed buffer that holds every tap (``i*s + k*d``
    spans it); Y is then the window of it that the pads and output_padding
    select, plus the bias.
    """
    refuse_float16(call)
    x, w, b, y = call.input(0), call.input(1), call.input(2), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    nsp, group = len(xs) - 2, call.attr("group", 1)
    strides = call.attr("strides") or [1] * nsp
    dil = call.attr("dilations") or [1] * nsp
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(xs[2:], strides, ws[2:], dil)]
    begin = _transpose_pads(call, xs, ws, full)
    lo = [min(0, p) for p in begin]
    extent = [max(f, o + p) - l for f, o, p, l in zip(full, ys[2:], begin, lo)]
    cpg, mpg = xs[1] // group, ws[1]
    sdfg, state = connector_sdfg(call, "conv_transpose")
    if 0 in ys:
        return sdfg
    buf = "taps"
    sdfg.add_transient(buf, (ys[0], ys[1], *extent), call.dtype(y),
                       storage=dace.StorageType.CPU_Heap)
    sp, inp, ker = spatial_vars("s", nsp), spatial_vars("i", nsp), spatial_vars("k", nsp)
    zero = sdfg.add_state_before(state, "zero")
    parallel(mapped_tasklet(zero, "zero", image_ranges(ys, sp, extent, "m"), {}, "o = 0",
                            {"o": dace.Memlet(f"{buf}[n, m, {', '.join(sp)}]")}))
    at = ", ".join(f"{i} * {s} + {k} * {d} - {l}"
                   for i, k, s, d, l in zip(inp, ker, strides, dil, lo))
    mapped_reduction(state, "scatter", {"n": f"0:{ys[0]}", "g": f"0:{group}", "m": f"0:{mpg}"},
                     {"c": f"0:{cpg}", **ranges(inp, xs[2:]), **ranges(ker, ws[2:])}, {
                         "v": dace.Memlet(f"{x}[n, g * {cpg} + c, {', '.join(inp)}]"),
                         "f": dace.Memlet(f"{w}[g * {cpg} + c, m, {', '.join(ker)}]")},
                     "o = v * f", {"o": dace.Memlet(f"{buf}[n, g * {mpg} + m, {at}]", wcr=_SUM)})
    crop = sdfg.add_state_after(state, "crop")
    out = spatial_vars("o", nsp)
    shifted = ", ".join(f"{o} + {p - l}" for o, p, l in zip(out, begin, lo))
    inputs, code = {"v": dace.Memlet(f"{buf}[n, m, {shifted}]")}, "o = v"
    if b is not None:
        inputs["bias"], code = dace.Memlet(f"{b}[m]"), "o = v + bias"
    parallel(mapped_tasklet(crop, "crop", image_ranges(ys, out, channel="m"), inputs, code,
                            {"o": dace.Memlet(f"{y}[n, m, {', '.join(out)}]")}))
    return sdfg


def _transpose_pads(call, xs, ws, full) -> list:
    """Begin pads of ConvTranspose: given, or derived from the output shape (spec formulas)."""
    nsp = len(xs) - 2
    auto = call.attr("auto_pad", "NOTSET")
    if call.attr("output_shape") or auto in ("SAME_UPPER", "SAME_LOWER"):
        out = call.attr("output_shape") or [i * s for i, s in
                                            zip(xs[2:], call.attr("strides") or [1] * nsp)]
        adj = call.attr("output_padding") or [0] * nsp
        total = [f + a - o for f, a, o in zip(full, adj, out[-nsp:])]
        return [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    if auto == "VALID":
        return [0] * nsp
    return (call.attr("pads") or [0] * (2 * nsp))[:nsp]


@implements("Conv", impl="im2col")
def conv_im2col(call):
    """Y[n, g] = W[g] @ cols[n, g]: cols[(c, k..), o..] = Xpadded[n, g*C/G + c, o*s + k*d]."""
    refuse_float16(call)
    x, w, b, y = call.input(0), call.input(1), call.input(2), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    group = call.attr("group", 1)
    cpg, mpg = ws[1], ys[1] // group
    taps, pixels = cpg * math.prod(ws[2:]), math.prod(ys[2:])
    if 1 in (mpg, taps, pixels):  # DaCe's Gemm refuses size-1 dims (depthwise, 1x1 maps)
        return conv_direct(call)
    win = sliding_window(call, xs, ys, ws[2:])
    sdfg, state = connector_sdfg(call, "conv_im2col", {
        w: (group, mpg, taps), y: (ys[0], group, mpg, pixels)})
    cols = "cols"
    sdfg.add_transient(cols, (ys[0], group, taps, pixels), call.dtype(x),
                       storage=dace.StorageType.CPU_Heap)
    unfold = sdfg.add_state_before(state, "unfold")
    src = padded_input(sdfg, unfold, x, xs, win, "0")
    out, ker = spatial_vars("o", win.nsp), spatial_vars("k", win.nsp)
    row, column = _row_major(["c"] + ker, ws[1:]), _row_major(out, ys[2:])
    parallel(mapped_tasklet(
        unfold, "unfold", {"n": f"0:{ys[0]}", "g": f"0:{group}", "c": f"0:{cpg}",
                           **ranges(ker, ws[2:]), **ranges(out, ys[2:])},
        {"v": dace.Memlet(f"{src}[n, g * {cpg} + c, {', '.join(win.taps(out, ker))}]")},
        "o = v", {"o": dace.Memlet(f"{cols}[n, g, {row}, {column}]")}))
    # One GEMM per (image, group), one after another: each is parallel in BLAS.
    entry, exit_ = state.add_map("gemms", {"n": f"0:{ys[0]}", "g": f"0:{group}"},
                                 dace.ScheduleType.Sequential)
    node = Gemm("gemm", alpha=1, beta=0)
    node.implementation = impl
    state.add_memlet_path(state.add_read(w), entry, node, dst_conn="_a",
                          memlet=dace.Memlet(f"{w}[g, 0:{mpg}, 0:{taps}]"))
    state.add_memlet_path(state.add_read(cols), entry, node, dst_conn="_b",
                          memlet=dace.Memlet(f"{cols}[n, g, 0:{taps}, 0:{pixels}]"))
    state.add_memlet_path(node, exit_, state.add_write(y), src_conn="_c",
                          memlet=dace.Memlet(f"{y}[n, g, 0:{mpg}, 0:{pixels}]"))
    if b is not None:
        bias = sdfg.add_state_after(state, "bias")
        at = f"{y}[n, g, m, p]"
        parallel(mapped_tasklet(
            bias, "bias", image_ranges((ys[0], group), ["m", "p"], (mpg, pixels), "g"),
            {"v": dace.Memlet(f"{b}[g * {mpg} + m]"), "acc": dace.Memlet(at)}, "o = acc + v",
            {"o": dace.Memlet(at)}))
    return sdfg


def _row_major(names, extents) -> str:
    """Flat row-major index of ``names`` over ``extents``."""
    flat = names[0]
    for name, extent in zip(names[1:], extents[1:]):
        flat = f"({flat}) * {extent} + {name}"
    return flat
