"""Convolution and pooling over NCHW tensors (any number of spatial dims)."""
import math

import dace
import numpy as np

from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, program_sdfg


def conv_geometry(call, x_shape, w_shape, y_shape):
    """Strides, dilations and begin pads per spatial dim (auto_pad resolved)."""
    nsp = len(x_shape) - 2
    strides = call.attr("strides") or [1] * nsp
    dil = call.attr("dilations") or [1] * nsp
    pads = call.attr("pads") or [0] * (2 * nsp)
    auto = call.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for d in range(nsp):
            k = (w_shape[2 + d] - 1) * dil[d] + 1
            total = max(0, (y_shape[2 + d] - 1) * strides[d] + k - x_shape[2 + d])
            pads.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        begin = pads
    elif auto == "VALID":
        begin = [0] * nsp
    else:
        begin = pads[:nsp]
    return strides, dil, begin


@implements("Conv")
def conv_direct(call):
    """Y[n, m, o..] = B[m] + sum_{c, k..} X[n, g*C/G + c, o*s + k*d - p] * W[m, c, k..]."""
    x, w, b, y = call.input(0), call.input(1), call.input(2), call.output(0)
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    nsp = len(xs) - 2
    strides, dil, begin = conv_geometry(call, xs, ws, ys)
    group = call.attr("group", 1)
    cpg, mpg = ws[1], ys[1] // group  # input channels per group, outputs per group
    sdfg, state = connector_sdfg(call, "conv")
    # Zero-padded copy of X so the inner loop needs no bounds checks.
    padded = [xs[2 + d] + begin[d] + max(0, (ys[2 + d] - 1) * strides[d]
                                          + (ws[2 + d] - 1) * dil[d] + 1 - xs[2 + d] - begin[d])
              for d in range(nsp)]
    src = x
    sp = [f"s{d}" for d in range(nsp)]
    if any(p != n for p, n in zip(padded, xs[2:])):
        src = "xpad"
        sdfg.add_transient(src, (xs[0], xs[1], *padded), call.dtype(x),
                           storage=dace.StorageType.CPU_Heap)
        pad_state = sdfg.add_state_before(state, "pad")
        mapped_tasklet(pad_state, "zero", {"n": f"0:{xs[0]}", "c": f"0:{xs[1]}",
                                              **{s: f"0:{p}" for s, p in zip(sp, padded)}},
                                     {}, "o = 0", {"o": dace.Memlet(f"{src}[n, c, {', '.join(sp)}]")})
        copy_state = sdfg.add_state_after(pad_state, "copy")
        shifted = ", ".join(f"{s} + {begin[d]}" for d, s in enumerate(sp))
        mapped_tasklet(copy_state, "copy", {"n": f"0:{xs[0]}", "c": f"0:{xs[1]}",
                                               **{s: f"0:{n}" for s, n in zip(sp, xs[2:])}},
                                      {"v": dace.Memlet(f"{x}[n, c, {', '.join(sp)}]")}, "o = v",
                                      {"o": dace.Memlet(f"{src}[n, c, {shifted}]")})
    init = sdfg.add_state_before(state, "bias")
    out = [f"o{d}" for d in range(nsp)]
    ker = [f"k{d}" for d in range(nsp)]
    out_ranges = {"n": f"0:{ys[0]}", "m": f"0:{ys[1]}", **{o: f"0:{n}" for o, n in zip(out, ys[2:])}}
    y_idx = f"{y}[n, m, {', '.join(out)}]"
    if b is not None:
        mapped_tasklet(init, "bias", out_ranges, {"v": dace.Memlet(f"{b}[m]")}, "o = v",
                                {"o": dace.Memlet(y_idx)})
    else:
        mapped_tasklet(init, "zero", out_ranges, {}, "o = 0", {"o": dace.Memlet(y_idx)})
    x_sp = ", ".join(f"{o} * {strides[d]} + {k} * {dil[d]}" for d, (o, k) in enumerate(zip(out, ker)))
    ranges = {**out_ranges, "c": f"0:{cpg}", **{k: f"0:{n}" for k, n in zip(ker, ws[2:])}}
    mapped_tasklet(state, "conv", ranges, {
        "v": dace.Memlet(f"{src}[n, int(m / {mpg}) * {cpg} + c, {x_sp}]"),
        "f": dace.Memlet(f"{w}[m, c, {', '.join(ker)}]")}, "o = v * f",
        {"o": dace.Memlet(y_idx, wcr="lambda p, q: p + q")})
    return sdfg


@implements("GlobalAveragePool", "GlobalMaxPool")
def global_pool(call):
    x, y = call.input(0), call.output(0)
    xs = call.shape(x)
    rows, cols = xs[0] * xs[1], math.prod(xs[2:])

    def mean_body(X, Y):
        Y[:] = np.mean(X, axis=1)

    def max_body(X, Y):
        Y[:] = np.max(X, axis=1)

    body = mean_body if call.op_type == "GlobalAveragePool" else max_body
    return program_sdfg(call, body, {x: (rows, cols), y: (rows,)})
