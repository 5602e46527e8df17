"""Convolution over N, C, spatial... tensors (any number of spatial dims).

Two implementations of Conv: ``pure`` sums every (channel, kernel tap)
product straight into Y; ``im2col`` unfolds the input patches into a
transient matrix and multiplies it with the weights by BLAS GEMM, one GEMM
per (image, group). ConvTranspose scatters its products instead.
"""
import math

import dace
from dace.libraries.blas import Gemm

from workbench.build.settings import blas_implementation, transient_storage
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet
from workbench.ops.simd import substitute
from workbench.ops.symbolic_sizes import cpp_size, maybe
from workbench.ops.window import (image_ranges, padded_input, ranges, row_map, sliding_window,
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
    if _depthwise_2d(call):
        return conv_depthwise_rows(call)
    return conv_sum(call, bias=call.input(2))[0]


def _depthwise_2d(call, w_pos: int = 1) -> bool:
    xs, ws = call.shape(call.input(0)), call.shape(call.input(w_pos))
    ys = call.shape(call.output(0))
    # one-element memlets become scalars in C++: keep rows and tap lists longer than 1
    return (len(xs) == 4 and ws[1] == 1 and call.attr("group", 1) == xs[1] == ws[0]
            and 0 not in ys and maybe(ys[3] > 1) and ws[2] * ws[3] > 1)


def conv_depthwise_rows(call):
    """Depthwise 2-D Conv, one output row per OpenMP iteration: for every tap, one
    vectorized multiply-add of the padded input row into the output row (MobileNet and
    EfficientNet blocks spend most of their Conv time here; as a reduction map over
    channels and taps it ran scalar, 0.78 ms on EfficientNet's 240x28x28)."""
    sdfg, state = connector_sdfg(call, "conv_depthwise")
    depthwise_rows(call, sdfg, state, call.output(0))
    return sdfg


def depthwise_rows(call, sdfg, state, acc: str, w_pos: int = 1, b_pos: int = 2,
                   x_zero: int = 0, w_zero: tuple = None):
    """acc[n, m] = B[m] + the depthwise Conv of X[n, m] with W[m] (input ``w_pos``, bias
    ``b_pos``) in ``state``, summed in acc's type. For QLinearConv's exact int32 sums, the
    pads hold ``x_zero``, which every input value has subtracted, and every tap has ``w_zero``
    subtracted (its code and reads: a value, or a per-channel read indexed by ``m``)."""
    x, w, b = call.input(0), call.input(w_pos), call.input(b_pos)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(call.output(0))
    win = sliding_window(call, xs, ys, ws[2:])
    src = padded_input(sdfg, state, x, xs, win, str(x_zero))
    (kh, kw), (sh, sw), (dh, dw) = ws[2:], win.strides, win.dilations
    hp, wp = win.padded_shape()
    ctype, wo = sdfg.arrays[acc].dtype.ctype, cpp_size(ys[3])
    zero, zero_reads = w_zero or ("0", {})
    tap, value = f"taps[ky * {kw} + kx]", f"row[j_ * {sw}]"
    if w_zero is not None or x_zero:
        tap, value = f"({ctype})({tap}) - ({ctype})({zero})", f"(({ctype})({value}) - {x_zero})"
    first = "bias" if b is not None else "0"
    code = (f"#pragma omp simd\nfor (int j_ = 0; j_ < {wo}; ++j_) out[j_] = {first};\n"
            f"for (int ky = 0; ky < {kh}; ++ky)\n"
            f"  for (int kx = 0; kx < {kw}; ++kx) {{\n"
            f"    const {ctype} f = {tap};\n"
            f"    const {sdfg.arrays[src].dtype.ctype}* row = rows + ky * {cpp_size(dh * wp)}"
            f" + kx * {dw};\n"
            f"    #pragma omp simd\n"
            f"    for (int j_ = 0; j_ < {wo}; ++j_) out[j_] += f * {value};\n"
            f"  }}")
    height = (kh - 1) * dh + 1
    inputs = {"rows": dace.Memlet(f"{src}[n, m, o0 * {sh}:o0 * {sh} + {height}, 0:{wp}]"),
              "taps": dace.Memlet(f"{w}[m, 0, 0:{kh}, 0:{kw}]"), **zero_reads}
    if b is not None:
        inputs["bias"] = dace.Memlet(f"{b}[m]")
    _, entry, _ = mapped_tasklet(state, "depthwise", image_ranges(ys, ["o0"], ys[2:3], "m"),
                                 inputs, code, {"out": dace.Memlet(f"{acc}[n, m, o0, 0:{ys[3]}]")},
                                 language=dace.Language.CPP)
    entry.map.collapse = 3


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
                       storage=transient_storage())
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
    ws, ys = call.shape(w), call.shape(y)
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    group = call.attr("group", 1)
    cpg, mpg = ws[1], ys[1] // group
    taps, pixels = cpg * math.prod(ws[2:]), math.prod(ys[2:])
    if 1 in (mpg, taps, pixels):  # DaCe's Gemm refuses size-1 dims (depthwise, 1x1 maps)
        return conv_direct(call)
    sdfg, state = connector_sdfg(call, "conv_im2col", {
        w: (group, mpg, taps), y: (ys[0], group, mpg, pixels)})
    im2col_gemms(call, sdfg, state, call.dtype(x), impl)
    if b is not None:
        bias = sdfg.add_state_after(state, "bias")
        at = f"{y}[n, g, m, p]"
        parallel(mapped_tasklet(
            bias, "bias", image_ranges((ys[0], group), ["m", "p"], (mpg, pixels), "g"),
            {"v": dace.Memlet(f"{b}[g * {mpg} + m]"), "acc": dace.Memlet(at)}, "o = acc + v",
            {"o": dace.Memlet(at)}))
    return sdfg


def im2col_gemms(call, sdfg, state, dtype, impl: str, w_pos: int = 1, w: str = None,
                 y: str = None, fill: str = "0", value: str = "v", parts: list = None):
    """In ``state``, y[n, g] = w[g] @ cols[n, g], one BLAS GEMM per (image, group), ``w``
    seen as (G, M/G, taps) and ``y`` as (N, G, M/G, pixels); they default to the weight
    input (at ``w_pos``) and the output, or name other arrays of those shapes. Before it,
    cols[n, g, (c, k..), o..] = ``value`` of v = Xpadded[n, g*C/G + c, o*s + k*d] (the pads
    hold ``fill``), a transient of ``dtype``. ``parts``, (begin, end) ranges of the taps,
    split each GEMM in one per range, writing y[part] (``y`` then has a leading part dim)."""
    x, w, y = call.input(0), w or call.input(w_pos), y or call.output(0)
    xs, ws, ys = call.shape(x), call.shape(call.input(w_pos)), call.shape(call.output(0))
    group = call.attr("group", 1)
    cpg, mpg = ws[1], ys[1] // group
    taps, pixels = cpg * math.prod(ws[2:]), math.prod(ys[2:])
    win = sliding_window(call, xs, ys, ws[2:])
    cols = "cols"
    sdfg.add_transient(cols, (ys[0], group, taps, pixels), dtype, storage=transient_storage())
    unfold = sdfg.add_state_before(state, "unfold")
    src = padded_input(sdfg, unfold, x, xs, win, fill)
    # one vectorized loop per row of output pixels (strided along the input row)
    out, ker = spatial_vars("o", win.nsp), spatial_vars("k", win.nsp)
    width, step = ys[-1], win.strides[-1]
    at = win.taps(out[:-1] + ["0"], ker)
    at[-1] = f"{at[-1]}:{at[-1]} + {(width - 1) * step + 1}"
    row, column = _row_major(["c"] + ker, ws[1:]), _row_major(out[:-1] + ["0"], ys[2:])
    read = "v" if width == 1 else f"v[j_ * {step}]"
    row_map(unfold, "unfold", {"n": f"0:{ys[0]}", "g": f"0:{group}", "c": f"0:{cpg}",
                               **ranges(ker, ws[2:]), **ranges(out[:-1], ys[2:-1])},
            {"v": f"{src}[n, g * {cpg} + c, {', '.join(at)}]"},
            {"o": f"{cols}[n, g, {row}, {column}:{column} + {width}]"}, "o[j_]",
            substitute(value, {"v": read}), width, dtype)
    # One GEMM per (image, group), one after another: each is parallel in BLAS.
    entry, exit_ = state.add_map("gemms", {"n": f"0:{ys[0]}", "g": f"0:{group}"},
                                 dace.ScheduleType.Sequential)
    reads, write = (state.add_read(w), state.add_read(cols)), state.add_write(y)
    for part, (k0, k1) in enumerate(parts or [(0, taps)]):
        node = Gemm(f"gemm{part or ''}", alpha=1, beta=0)
        node.implementation = impl
        for read, conn, subset in zip(reads, ("_a", "_b"), (f"{w}[g, 0:{mpg}, {k0}:{k1}]",
                                                          f"{cols}[n, g, {k0}:{k1}, 0:{pixels}]")):
            state.add_memlet_path(read, entry, node, dst_conn=conn, memlet=dace.Memlet(subset))
        state.add_memlet_path(node, exit_, write, src_conn="_c", memlet=dace.Memlet(
            f"{y}[{f'{part}, ' if parts else ''}n, g, 0:{mpg}, 0:{pixels}]"))


def _row_major(names, extents) -> str:
    """Flat row-major index of ``names`` over ``extents``."""
    flat = names[0]
    for name, extent in zip(names[1:], extents[1:]):
        flat = f"({flat}) * {extent} + {name}"
    return flat


@implements("Conv", impl="shifted_gemm")
def conv_shifted_gemm(call):
    """Y[n] = sum over taps t of W[:, :, t] @ Xp[n, :, q + shift(t)], no im2col matrix.

    With stride 1, output (oy, ox) reads the padded input at (oy + ky*dy, ox + kx*dx).
    In the flattened padded image (row length Wp) that is column q + shift with
    q = oy*Wp + ox and shift = ky*dy*Wp + kx*dx, so each tap is one GEMM of the
    tap's weights (M x C) with a window of the padded input (C x Hout*Wp, leading
    dimension the padded image size), accumulated with beta = 1. The Wp - Wout
    columns past each output row are computed and dropped when the bias is
    added. Compared with im2col it never writes the K x P column matrix (9x the
    input for 3x3); each GEMM re-reads the padded input from cache instead.
    Falls back to im2col for strides, groups, non-2-D or larger batches.
    """
    refuse_float16(call)
    x, w, b, y = call.input(0), call.input(1), call.input(2), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    win = sliding_window(call, xs, ys, ws[2:])
    if (win.nsp != 2 or set(win.strides) != {1} or call.attr("group", 1) != 1 or ys[0] > 8
            or 0 in ys or math.prod(ws[2:]) == 1 or 1 in ws[:2]):
        return conv_im2col(call)
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    (batch, chans), m = xs[:2], ws[0]
    (hp, wp), (ho, wo) = win.padded_shape(), ys[2:]
    (kh, kw), (dh, dw) = ws[2:], win.dilations
    cols = ho * wp
    flat = hp * wp + (kw - 1) * dw  # the last tap's window runs past the image
    sdfg, state = connector_sdfg(call, "conv_shifted_gemm")
    dtype = call.dtype(x)
    xp, wt, acc = "x_flat", "w_taps", "y_rows"
    sdfg.add_transient(xp, (batch, chans, flat), dtype, storage=transient_storage())
    sdfg.add_transient(wt, (kh * kw, m, chans), dtype, storage=transient_storage())
    sdfg.add_transient(acc, (batch, m, cols), dtype, storage=transient_storage())
    prep = sdfg.add_state_before(state, "pad")
    row_map(prep, "pad_fill", {"n": f"0:{batch}", "c": f"0:{chans}"}, {},
             {"o": f"{xp}[n, c, 0:{flat}]"}, "o[j_]", "0", flat, dtype)
    copy = sdfg.add_state_after(prep, "pad_copy")
    bh, bw = win.begin
    start = f"(s0 + {bh}) * {wp} + {bw}"
    row_map(copy, "pad_copy", {"n": f"0:{batch}", "c": f"0:{chans}", "s0": f"0:{xs[2]}"},
             {"v": f"{x}[n, c, s0, 0:{xs[3]}]"},
             {"o": f"{xp}[n, c, {start}:{start} + {xs[3]}]"}, "o[j_]", "v[j_]", xs[3], dtype)
    parallel(mapped_tasklet(copy, "weight_taps", {"t0": f"0:{kh}", "t1": f"0:{kw}",
                                                  "m": f"0:{m}", "c": f"0:{chans}"},
                            {"v": dace.Memlet(f"{w}[m, c, t0, t1]")}, "o = v",
                            {"o": dace.Memlet(f"{wt}[t0 * {kw} + t1, m, c]")}))
    for n in range(batch):
        prev = None
        for t in range(kh * kw):
            shift = (t // kw) * dh * wp + (t % kw) * dw
            node = Gemm(f"tap{t}_n{n}", alpha=1, beta=0 if prev is None else 1)
            node.implementation = impl
            state.add_edge(state.add_read(wt), None, node, "_a",
                           dace.Memlet(f"{wt}[{t}, 0:{m}, 0:{chans}]"))
            state.add_edge(state.add_read(xp), None, node, "_b",
                           dace.Memlet(f"{xp}[{n}, 0:{chans}, {shift}:{shift + cols}]"))
            if prev is not None:
                state.add_edge(prev, None, node, "_cin", dace.Memlet(f"{acc}[{n}, 0:{m}, 0:{cols}]"))
            prev = state.add_access(acc)
            state.add_edge(node, "_c", prev, None, dace.Memlet(f"{acc}[{n}, 0:{m}, 0:{cols}]"))
    crop = sdfg.add_state_after(state, "bias")
    inputs = {"v": f"{acc}[n, m, o0 * {wp}:o0 * {wp} + {wo}]"}
    if b is not None:
        inputs["bias"] = f"{b}[m]"
    row_map(crop, "bias", {"n": f"0:{batch}", "m": f"0:{m}", "o0": f"0:{ho}"}, inputs,
             {"o": f"{y}[n, m, o0, 0:{wo}]"}, "o[j_]", "v[j_] + bias" if b else "v[j_]", wo,
             dtype)
    return sdfg

