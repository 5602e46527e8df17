"""Pooling: MaxPool, AveragePool, LpPool and the global pools.

A window pool is a reduction over a map of (output position, kernel tap)
with a write-conflict resolution (max or sum) into the output, reading a
padded copy of X (see window.py); AveragePool and LpPool then finish each
output element in a second map.
"""
import math

import dace
import numpy as np

from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import (connector_sdfg, implements, is_row_major, mapped_tasklet,
                                    np_dtype)
from workbench.ops.symbolic_sizes import cpp_size, maybe, surely
from workbench.ops.window import (image_ranges, padded_input, ranges, sliding_window,
                                  spatial_vars)

_MAX = "lambda a, b: max(a, b)"
_MIN = "lambda a, b: min(a, b)"
_SUM = "lambda a, b: a + b"


def _lowest(dtype) -> str:
    """The identity of max for ``dtype``, as tasklet code."""
    np_type = np_dtype(dtype)
    return "-inf" if np_type.kind == "f" else str(np.iinfo(np_type).min)


class _Pool:
    """Names and ranges of one window pool node, shared by its maps."""

    def __init__(self, call):
        refuse_float16(call)
        self.call = call
        self.x, self.y = call.input(0), call.output(0)
        self.xs, self.ys = call.shape(self.x), call.shape(self.y)
        self.win = sliding_window(call, self.xs, self.ys, call.attr("kernel_shape"))
        nsp = self.win.nsp
        self.out, self.ker = spatial_vars("o", nsp), spatial_vars("k", nsp)
        self.out_ranges = image_ranges(self.ys, self.out)
        self.ker_ranges = ranges(self.ker, self.win.kernel)
        self.sdfg, self.state = connector_sdfg(call, call.op_type.lower())

    def at(self, array: str, spatial) -> str:
        return f"{array}[n, c, {', '.join(spatial)}]"

    def y_at(self) -> str:
        return self.at(self.y, self.out)

    def reduce(self, src: str, code: str, wcr: str, identity: str):
        """``y`` of ``code`` over every tap, combined with ``wcr`` starting at ``identity``."""
        init = self.sdfg.add_state_before(self.state, "init")
        parallel(mapped_tasklet(init, "init", self.out_ranges, {}, f"o = {identity}",
                                {"o": dace.Memlet(self.y_at())}))
        taps = self.win.taps(self.out, self.ker)
        mapped_reduction(self.state, "window", self.out_ranges, self.ker_ranges,
                         {"v": dace.Memlet(self.at(src, taps))}, code,
                         {"y": dace.Memlet(self.y_at(), wcr=wcr)})

    def finish(self, code: str, inputs: dict = None, label: str = "finish"):
        """Map over the output: ``o = code`` reading ``y`` (its reduced value)."""
        state = self.sdfg.add_state_after(self.state, label)
        self.state = state
        parallel(mapped_tasklet(state, label, self.out_ranges,
                                {"y": dace.Memlet(self.y_at()), **(inputs or {})}, f"o = {code}",
                                {"o": dace.Memlet(self.y_at())}))


@implements("MaxPool")
def max_pool(call):
    """Y[n, c, o] = max_k X[n, c, o * s + k * d - pad] over taps inside X."""
    if (call.output(1) is not None and not call.attr("storage_order", 0)
            and len(call.shape(call.input(0))) == 4 and is_row_major(call._desc(call.input(0)))):
        return _max_and_index_rows(call)
    p = _Pool(call)
    lowest = _lowest(call.dtype(p.x))
    src = padded_input(p.sdfg, p.state, p.x, p.xs, p.win, lowest)
    p.reduce(src, "y = v", _MAX, lowest)
    if call.output(1) is not None:
        _argmax(p, src)
    return p.sdfg


def _max_and_index_rows(call):
    """A 2-D MaxPool with Indices (a training program saves them for its backward pass)
    in one pass: per (image, channel, output row), for each tap in scan order, a vector
    loop over the windows it falls inside keeps a strictly larger value and its flat
    index (so the first maximal tap, the smallest index, wins). The general form copies
    X padded, reduces it, then scans it again for the index: 20 ms of ResNet-18's b8
    training step (10.9 ms with one scalar loop per window, 3.6 ms so)."""
    refuse_float16(call)
    x, y, ind = call.input(0), call.output(0), call.output(1)
    xs, ys = call.shape(x), call.shape(y)
    win = sliding_window(call, xs, ys, call.attr("kernel_shape"))
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = win.kernel, win.strides, win.dilations, win.begin
    h, w, wo, ph, pw = (cpp_size(v) for v in (xs[2], xs[3], ys[3], ph, pw))
    ctype = call.dtype(x).ctype
    lowest = _lowest(call.dtype(x))
    lowest = f"-std::numeric_limits<{ctype}>::infinity()" if lowest == "-inf" else lowest
    # taps in scan order, each over the row's windows it falls inside (a vector loop):
    # a strictly larger value (or the first tap in X) takes the place
    code = (f"const long base_ = ((long)n * {cpp_size(xs[1])} + c) * {h};\n"
            f"for (int j_ = 0; j_ < {wo}; ++j_) {{ out[j_] = {lowest}; index[j_] = -1; }}\n"
            f"for (int ky = 0; ky < {kh}; ++ky) {{\n"
            f"  const long iy = (long)o0 * {sh} + ky * {dh} - {ph};\n"
            f"  if (iy < 0 || iy >= {h}) continue;\n"
            f"  for (int kx = 0; kx < {kw}; ++kx) {{\n"
            f"    const long shift = (long)kx * {dw} - {pw};\n"
            f"    const long lo = shift >= 0 ? 0 : (-shift + {sw} - 1) / {sw};\n"
            f"    const long last = {w} - 1 - shift;\n"
            f"    const long hi = last < 0 ? 0 : std::min<long>({wo}, last / {sw} + 1);\n"
            f"    const {ctype}* row = plane + iy * {w} + shift;\n"
            f"    const long at = (base_ + iy) * {w} + shift;\n"
            f"    #pragma omp simd\n"
            f"    for (long j_ = lo; j_ < hi; ++j_) {{\n"
            f"      const {ctype} v_ = row[j_ * {sw}];\n"
            f"      const bool take = (v_ > out[j_]) | (index[j_] < 0);\n"
            f"      out[j_] = take ? v_ : out[j_];\n"
            f"      index[j_] = take ? at + j_ * {sw} : index[j_];\n"
            f"    }}\n  }}\n}}")
    sdfg, state = connector_sdfg(call, "max_pool_index")
    _, entry, _ = mapped_tasklet(
        state, "max_index", image_ranges(ys, ["o0"], ys[2:3]),
        {"plane": dace.Memlet(f"{x}[n, c, 0:{xs[2]}, 0:{xs[3]}]")}, code,
        {"out": dace.Memlet(f"{y}[n, c, o0, 0:{ys[3]}]"),
         "index": dace.Memlet(f"{ind}[n, c, o0, 0:{ys[3]}]")},
        language=dace.Language.CPP)
    entry.map.collapse = 3
    return sdfg


def _argmax(p: _Pool, src: str):
    """Indices: the first tap (in scan order) that holds the max, as a flat index into X.

    The smallest row-major index among the maximal taps is the first one;
    storage_order=1 asks for the column-major index of the same element.
    """
    ind = p.call.output(1)
    nsp, xs = p.win.nsp, p.xs
    taps = p.win.taps(p.out, p.ker)
    pos = [f"({t} - {b})" for t, b in zip(taps, p.win.begin)]
    row_major = f"(n * {xs[1]} + c)"
    for d in range(nsp):
        row_major = f"({row_major} * {xs[2 + d]} + {pos[d]})"
    state = p.sdfg.add_state_after(p.state, "argmax")
    init = p.sdfg.add_state_before(state, "argmax_init")
    parallel(mapped_tasklet(init, "argmax_init", p.out_ranges, {},
                            f"o = {np.iinfo(np.int64).max}", {"o": dace.Memlet(p.at(ind, p.out))}))
    mapped_reduction(state, "argmax", p.out_ranges, p.ker_ranges,
                     {"v": dace.Memlet(p.at(src, taps)), "m": dace.Memlet(p.y_at())},
                     f"i = {row_major} if ({p.win.inside(p.out, p.ker)}) and v == m "
                     f"else {np.iinfo(np.int64).max}",
                     {"i": dace.Memlet(p.at(ind, p.out), wcr=_MIN)})
    if p.call.attr("storage_order", 0) == 1:
        reorder = p.sdfg.add_state_after(state, "storage_order")
        at = p.at(ind, p.out)
        parallel(mapped_tasklet(reorder, "storage_order", p.out_ranges, {"r": dace.Memlet(at)},
                                f"o = {_column_major('r', xs)}", {"o": dace.Memlet(at)}))


def _column_major(r: str, xs) -> str:
    """The row-major flat index ``r`` into X, with the spatial dims counted column-major.

    (n, c) keep their place: index = (n * C + c) * S + sum_d pos_d * prod(spatial[:d]).
    """
    spatial = xs[2:]
    size = math.prod(spatial)
    digits = _digits(f"({r} % {size})", spatial)
    terms = [f"{digits[d]} * {math.prod(spatial[:d])}" for d in range(len(spatial))]
    return f"({r} / {size}) * {size} + " + " + ".join(terms)


def _digits(r: str, shape) -> list:
    """Tasklet code for the per-dim indices of row-major flat index ``r`` into ``shape``."""
    digits, rest = [], r
    for n in reversed(shape):
        digits.insert(0, f"(({rest}) % {n})")
        rest = f"(({rest}) / {n})"
    return digits


@implements("AveragePool")
def average_pool(call):
    """Y = sum of the taps / the number of taps inside X (or inside X and its pads)."""
    p = _Pool(call)
    src = padded_input(p.sdfg, p.state, p.x, p.xs, p.win, "0")
    p.reduce(src, "y = v", _SUM, "0")
    include_pad = bool(call.attr("count_include_pad", 0))
    # Taps that count, per output position: a small reduction of its own.
    count = "tap_count"
    p.sdfg.add_transient(count, p.ys[2:] or (1,), dace.int64)
    spatial = ", ".join(p.out) or "0"
    count_state = p.sdfg.add_state_before(p.state, "count")
    count_init = p.sdfg.add_state_before(count_state, "count_init")
    parallel(mapped_tasklet(count_init, "count_init", ranges(p.out, p.ys[2:]), {}, "o = 0",
                            {"o": dace.Memlet(f"{count}[{spatial}]")}))
    mapped_reduction(count_state, "count", ranges(p.out, p.ys[2:]), p.ker_ranges,
                     {}, f"o = 1 if ({p.win.inside(p.out, p.ker, include_pad)}) else 0",
                     {"o": dace.Memlet(f"{count}[{spatial}]", wcr=_SUM)})
    p.finish("y / k", {"k": dace.Memlet(f"{count}[{spatial}]")})
    return p.sdfg


@implements("LpPool")
def lp_pool(call):
    """Y = (sum over taps inside X of |x|^p)^(1/p); the pads add zeros."""
    p = _Pool(call)
    power = call.attr("p", 2)
    src = padded_input(p.sdfg, p.state, p.x, p.xs, p.win, "0")
    p.reduce(src, f"y = pow(abs(v), {power})", _SUM, "0")
    p.finish(f"pow(y, {1.0 / power})")
    return p.sdfg


@implements("MaxUnpool")
def max_unpool(call):
    """Y = 0, then MaxPool's values go back where its Indices say.

    Indices count positions in the unpooled shape the attributes imply; a larger
    output_shape holds that block at its start (as the reference does).
    """
    refuse_float16(call)
    x, ind, y = call.input(0), call.input(1), call.output(0)
    xs, ys = call.shape(x), call.shape(y)
    nsp = len(xs) - 2
    strides = call.attr("strides") or [1] * nsp
    pads = call.attr("pads") or [0] * (2 * nsp)
    implied = tuple(xs[:2]) + tuple((n - 1) * s - pads[d] - pads[nsp + d] + k for d, (n, s, k) in
                                    enumerate(zip(xs[2:], strides, call.attr("kernel_shape"))))
    if any(i > o for i, o in zip(implied, ys)):
        raise call.fail(f"output shape {ys} is smaller than the unpooled shape {implied}")
    count, size = math.prod(xs), math.prod(ys)
    sdfg, state = connector_sdfg(call, "max_unpool", {x: (count,), ind: (count,), y: (size,)})
    if size:
        parallel(mapped_tasklet(state, "zero", {"i": f"0:{size}"}, {}, "o = 0",
                                {"o": dace.Memlet(f"{y}[i]")}))
    if count and size:
        position = "k"
        if implied != tuple(ys):
            position = "0"
            for digit, n in zip(_digits("k", implied), ys):
                position = f"({position}) * {n} + {digit}"
        scatter = sdfg.add_state_after(state, "scatter")
        mapped_tasklet(scatter, "scatter", {"i": f"0:{count}"},
                       {"v": dace.Memlet(f"{x}[i]"), "k": dace.Memlet(f"{ind}[i]")},
                       f"o[{position}] = v",
                       {"o": dace.Memlet(f"{y}[0:{size}]", volume=1, dynamic=True)})
    return sdfg


@implements("GlobalAveragePool", "GlobalMaxPool")
def global_pool(call):
    """One OpenMP iteration per (image, channel): a vectorized loop over its spatial row.

    (As ``np.mean`` through DaCe's frontend this was a Reduce node whose pure
    expansion adds every element atomically: 0.95 ms on EfficientNet's 240x28x28.)
    A NaN anywhere in the row gives NaN, as in onnxruntime.
    """
    refuse_float16(call)
    x, y = call.input(0), call.output(0)
    xs = call.shape(x)
    rows, cols = xs[0] * xs[1], math.prod(xs[2:])
    # Indexed in X's own shape: DaCe 1.0.2 cannot inline a reshaped connector here
    sdfg, state = connector_sdfg(call, "global_pool")
    if surely(rows == 0):
        return sdfg
    spatial = ", ".join(["n", "c"] + [f"0:{d}" for d in xs[2:]])
    first = ", ".join(["n", "c"] + ["0" for _ in xs[2:]])
    ctype = call.dtype(x).ctype
    if surely(cols == 0):
        code = "out = 0;" if call.op_type == "GlobalAveragePool" else "out = -INFINITY;"
    elif call.op_type == "GlobalAveragePool":
        code = (f"{ctype} acc = 0;\n#pragma omp simd reduction(+:acc)\n"
                f"for (int j_ = 0; j_ < {cpp_size(cols)}; ++j_) acc += row[j_];\n"
                f"out = acc / {cpp_size(cols)};")
    else:
        code = (f"{ctype} acc = row[0];\nfor (int j_ = 1; j_ < {cpp_size(cols)}; ++j_)\n"
                f"  acc = (row[j_] > acc || row[j_] != row[j_] || acc != acc) ? "
                f"(acc != acc ? acc : row[j_]) : acc;\nout = acc;")
    # a row of a symbolic length is a pointer, also at a length of 1
    inputs = {"row": dace.Memlet(f"{x}[{spatial}]")} if maybe(cols > 1) else {}
    if surely(cols == 1):
        inputs, code = {"v": dace.Memlet(f"{x}[{first}]")}, "out = v;"
    _, entry, _ = mapped_tasklet(state, "global_pool", {"n": f"0:{xs[0]}", "c": f"0:{xs[1]}"},
                                 inputs, code, {"out": dace.Memlet(f"{y}[{first}]")},
                                 language=dace.Language.CPP)
    entry.map.collapse = 2
    return sdfg
