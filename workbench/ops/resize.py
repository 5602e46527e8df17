"""Resize and Upsample: separable resampling with tap tables made at build time.

Along each axis, output index ``o`` reads a few input taps with weights
that depend only on the geometry (shapes, scales, roi and the modes), all
known at build time. ``axis_taps`` computes them with numpy, straight from
the spec's formulas; the program then sums, for every output element, the
input at the tap indices times one weight per axis.
"""
import math

import dace
import numpy as np

from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.index_maps import check_shape, whole, write_values
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype


def source_coordinate(ctm: str, o: np.ndarray, scale: float, length: int, out_len: int, roi):
    """x_original for output indices ``o`` (the spec's coordinate_transformation_mode)."""
    width = scale * length  # the output width before rounding to an integer
    if ctm == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset_ = length / 2 * (1 - out_len / width)
        return offset_ + (o + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out_len > 1 else np.full(o.shape, -0.5)
    if ctm == "align_corners":
        return o * (length - 1) / (width - 1) if width != 1 else np.zeros(o.shape)
    if ctm == "asymmetric":
        return o / scale
    if ctm == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            return np.full(o.shape, (end - start) * (length - 1) / 2 + start * (length - 1))
        return start * (length - 1) + o * (end - start) * (length - 1) / (width - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    raise ValueError(f"unknown nearest_mode {mode!r}")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def axis_taps(length: int, out_len: int, scale: float, roi, opts: dict):
    """(indices [out_len, n], weights [out_len, n], outside [out_len] or None) of one axis."""
    o = np.arange(out_len, dtype=np.float64)
    x = source_coordinate(opts["ctm"], o, scale, length, out_len, roi)
    outside = None
    if opts["ctm"] == "tf_crop_and_resize":
        outside = (x < 0) | (x > length - 1)
    if opts["mode"] == "nearest":
        idx = np.clip(_nearest(x, opts["nearest_mode"]), 0, length - 1)
        return idx.astype(np.int64)[:, None], np.ones((out_len, 1)), outside
    # Taps around x: the n nearest input positions, with the left one preferred at ties
    # (an integer x is seen as the right end of the cell before it).
    stretch = min(scale, 1.0) if opts["antialias"] else 1.0
    reach = 1 if opts["mode"] == "linear" else 2  # the kernel's support radius
    n = 2 - 2 * (math.floor(-reach / stretch) + 1)
    base = np.where(x == np.floor(x), x - 1, np.floor(x))
    taps = base[:, None] + np.arange(n)[None, :] - (n // 2 - 1)
    t = stretch * (taps - x[:, None])
    w = np.clip(1 - np.abs(t), 0, 1) if opts["mode"] == "linear" else _cubic(t, opts["a"])
    if stretch != 1.0:
        w = w / w.sum(axis=1, keepdims=True)
    if opts["exclude_outside"]:
        w = np.where((taps < 0) | (taps >= length), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, length - 1).astype(np.int64), w, outside


def resample(call, scales, roi, opts: dict):
    """Y[o] = sum over taps of prod_d weight_d[o_d, t_d] * X[index_0[o_0, t_0], ...]."""
    refuse_float16(call)
    x, y = call.input(0), call.output(0)
    xs, ys = call.shape(x), call.shape(y)
    if opts["mode"] != "nearest" and np_dtype(call.dtype(x)).kind != "f":
        raise call.fail(f"{opts['mode']} resizing of {np_dtype(call.dtype(x))} is not supported")
    if opts["antialias"] and opts["mode"] == "nearest":
        raise call.fail("antialias applies to linear and cubic modes only")
    sdfg, state = connector_sdfg(call, "resize")
    if 0 in ys:
        return sdfg
    wtype = dace.float64 if call.dtype(y) == dace.float64 else dace.float32
    tables = sdfg.add_state_before(state, "tables")
    out = [f"o{d}" for d in range(len(ys))]
    index, inputs = list(out), {"src": whole(x, xs)}
    factors, flags, taps = [], [], {}
    for d, (length, out_len) in enumerate(zip(xs, ys)):
        if _identity(length, out_len, scales[d], roi[d], opts):
            continue
        idx, w, outside = axis_taps(length, out_len, scales[d], roi[d], opts)
        tables_of_axis = [(f"index{d}", idx, dace.int64)]
        if opts["mode"] != "nearest":
            tables_of_axis.append((f"weight{d}", w.astype(np_dtype(wtype)), wtype))
        for name, values, dtype in tables_of_axis:
            sdfg.add_transient(name, values.shape, dtype)
            write_values(tables, name, values)
        at = f"[{out[d]}, t{d}]" if idx.shape[1] > 1 else f"[{out[d]}, 0]"
        if idx.shape[1] > 1:
            taps[f"t{d}"] = f"0:{idx.shape[1]}"
        inputs[f"i{d}"], index[d] = dace.Memlet(f"index{d}{at}"), f"i{d}"
        if opts["mode"] != "nearest":
            inputs[f"w{d}"], factors = dace.Memlet(f"weight{d}{at}"), factors + [f"w{d}"]
        if outside is not None and outside.any():
            sdfg.add_transient(f"outside{d}", outside.shape, dace.bool_)
            write_values(tables, f"outside{d}", outside)
            flags.append(d)
    y_at = f"{y}[{', '.join(out)}]"
    out_ranges = {o: f"0:{n}" for o, n in zip(out, ys)}
    code = " * ".join(factors + [f"src[{', '.join(index)}]"])
    if taps:
        init = sdfg.add_state_before(state, "init")
        parallel(mapped_tasklet(init, "init", out_ranges, {}, "v = 0",
                                {"v": dace.Memlet(y_at)}))
    mapped_reduction(state, "resample", out_ranges, taps, inputs, f"v = {code}",
                     {"v": dace.Memlet(y_at, wcr="lambda a, b: a + b" if taps else None)})
    if flags:  # tf_crop_and_resize: positions outside the input take extrapolation_value
        fill = sdfg.add_state_after(state, "extrapolate")
        outside = " or ".join(f"f{d}" for d in flags)
        parallel(mapped_tasklet(
            fill, "extrapolate", out_ranges,
            {"v": dace.Memlet(y_at), **{f"f{d}": dace.Memlet(f"outside{d}[{out[d]}]")
                                        for d in flags}},
            f"e = {float(opts['extrapolation'])} if ({outside}) else v", {"e": dace.Memlet(y_at)}))
    return sdfg


def _identity(length, out_len, scale, roi, opts) -> bool:
    return (length == out_len and math.isclose(scale, 1.0)
            and (opts["ctm"] != "tf_crop_and_resize"
                 or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))))


@implements("Resize")
def resize(call):
    x, y = call.input(0), call.output(0)
    xs, ys = call.shape(x), call.shape(y)
    rank = len(xs)
    axes = [a % rank for a in (call.attr("axes") or range(rank))]
    roi = [(0.0, 1.0)] * rank
    if call.node.opset < 11:  # Resize-10: scales only, Upsample's geometry
        scales = [float(s) for s in call.require_const(1, "scales").ravel()]
        return resample(call, scales, roi, _options(call, "asymmetric", "floor"))
    scales, sizes, roi_values = (_optional_const(call, k, what)
                                 for k, what in ((2, "scales"), (3, "sizes"), (1, "roi")))
    if roi_values is not None and roi_values.size:
        for i, a in enumerate(axes):
            roi[a] = (float(roi_values[i]), float(roi_values[len(axes) + i]))
    full, expected = [1.0] * rank, list(xs)
    if scales is not None and scales.size:
        for a, s in zip(axes, scales.ravel()):
            full[a] = float(s)
            expected[a] = int(np.floor(np.float32(xs[a]) * np.float32(s)))
    elif sizes is not None:
        sizes = [int(v) for v in sizes.ravel()]
        ratios = [n / xs[a] for a, n in zip(axes, sizes)]
        policy = call.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            common = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [common] * len(axes)
            sizes = [int(common * xs[a] + 0.5) for a in axes]  # round half up
        for a, r, n in zip(axes, ratios, sizes):
            full[a], expected[a] = r, n
    else:
        raise call.fail("neither scales nor sizes is given")
    check_shape(call, y, expected)
    return resample(call, full, roi, _options(call))


@implements("Upsample")
def upsample(call):
    """Deprecated Resize: asymmetric coordinates, nearest takes the floor."""
    scales = call.attr("scales") or list(call.require_const(1, "scales").ravel())
    rank = len(call.shape(call.input(0)))
    return resample(call, [float(s) for s in scales], [(0.0, 1.0)] * rank,
                    _options(call, "asymmetric", "floor"))


def _optional_const(call, position: int, what: str):
    if call.input(position) is None:
        return None
    return call.require_const(position, what)


def _options(call, ctm: str = None, nearest_mode: str = None) -> dict:
    mode = call.attr("mode", "nearest")
    return {"mode": {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode),
            "ctm": ctm or call.attr("coordinate_transformation_mode", "half_pixel"),
            "nearest_mode": nearest_mode or call.attr("nearest_mode", "round_prefer_floor"),
            "a": call.attr("cubic_coeff_a", -0.75), "antialias": bool(call.attr("antialias", 0)),
            "exclude_outside": bool(call.attr("exclude_outside", 0)),
            "extrapolation": call.attr("extrapolation_value", 0.0)}
