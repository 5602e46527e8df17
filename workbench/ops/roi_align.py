"""RoiAlign: average or max pooling of bilinear samples over regions of interest.

One parallel map over the output (roi n, channel c, bin ph, pw). Each bin
takes a grid of sampling points (``sampling_ratio`` per side, or
ceil(roi size / bins) when 0, decided per roi at run time) and reads the
four pixels around each point from the image of ``batch_indices[n]``. As
the spec's reference (and onnxruntime) do, ``max`` takes the maximum of
the four weighted corner values, and a point outside the image counts 0.
"""
import dace

from workbench.ops.flat_reads import at, flat_shapes, read_all
from workbench.ops.index_maps import check_shape, literal, op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype

MODES = ("avg", "max")
TRANSFORMS = ("half_pixel", "output_half_pixel")


@implements("RoiAlign")
def roi_align(call):
    x, rois, batch, y = call.input(0), call.input(1), call.input(2), call.output(0)
    mode = call.attr("mode", "avg")
    if mode not in MODES:
        raise call.fail(f"mode={mode!r} is neither 'avg' nor 'max'")
    transform = call.attr("coordinate_transformation_mode", "half_pixel")
    if transform not in TRANSFORMS:
        raise call.fail(f"coordinate_transformation_mode={transform!r} is none of "
                        f"{', '.join(TRANSFORMS)}")
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("RoiAlign is defined for floating-point images only")
    if len(call.shape(x)) != 4:
        raise call.fail(f"X of shape {list(call.shape(x))} is not (N, C, H, W)")
    _, nc, height, width = call.shape(x)
    nr = call.shape(batch)[0] if call.shape(batch) else 1
    if call.shape(rois) != (nr, 4):
        raise call.fail(f"rois {list(call.shape(rois))} is not ({nr}, 4)")
    ph, pw = int(call.attr("output_height", 1)), int(call.attr("output_width", 1))
    ratio = int(call.attr("sampling_ratio", 0))
    if ratio < 0:
        raise call.fail(f"sampling_ratio {ratio} is negative")
    check_shape(call, y, (nr, nc, ph, pw))
    if not nr * nc * ph * pw:
        raise call.fail("empty output")
    sdfg, state = op_sdfg(call, "roi_align", flat_shapes(call, x, rois, batch))
    scale = literal(float(call.attr("spatial_scale", 1.0)))
    shift = "0.5" if transform == "half_pixel" else "0.0"
    base = f"(__b * {nc} + c) * {height * width}"

    def pixel(row: str, col: str) -> str:
        return at(call, x, f"{base} + {row} * {width} + {col}")

    corners = [f"__hy * __hx * {pixel('__yl', '__xl')}", f"__hy * __lx * {pixel('__yl', '__xh')}",
               f"__ly * __hx * {pixel('__yh', '__xl')}", f"__ly * __lx * {pixel('__yh', '__xh')}"]
    if mode == "avg":
        value = " + ".join(corners)
        fold = "__acc = __acc + __v"
    else:
        value = f"max(max({corners[0]}, {corners[1]}), max({corners[2]}, {corners[3]}))"
        fold = "__acc = __v if __first else max(__acc, __v)\n        __first = False"

    def grid(extent: str, bins: int) -> str:
        return str(ratio) if ratio else f"int(ceil({extent} / {bins}))"
    code = f"""\
__b = {at(call, batch, 'n')}
__x0 = {at(call, rois, 'n * 4')} * {scale} - {shift}
__y0 = {at(call, rois, 'n * 4 + 1')} * {scale} - {shift}
__rw = {at(call, rois, 'n * 4 + 2')} * {scale} - {shift} - __x0
__rh = {at(call, rois, 'n * 4 + 3')} * {scale} - {shift} - __y0
{'' if transform == 'half_pixel' else '__rw = max(__rw, 1.0)'}
{'' if transform == 'half_pixel' else '__rh = max(__rh, 1.0)'}
__bh = __rh / {ph}
__bw = __rw / {pw}
__gh = {grid('__rh', ph)}
__gw = {grid('__rw', pw)}
__acc = 0.0
__first = True
for __iy in range(__gh):
    __sy = __y0 + i * __bh + (__iy + 0.5) * __bh / __gh
    for __ix in range(__gw):
        __sx = __x0 + j * __bw + (__ix + 0.5) * __bw / __gw
        __v = 0.0
        if __sy >= -1.0 and __sy <= {height} and __sx >= -1.0 and __sx <= {width}:
            __sy2 = max(__sy, 0.0)
            __sx2 = max(__sx, 0.0)
            __yl = int(__sy2)
            __xl = int(__sx2)
            __yh = __yl + 1
            __xh = __xl + 1
            if __yl >= {height - 1}:
                __yl = {height - 1}
                __yh = {height - 1}
                __sy2 = {float(height - 1)}
            if __xl >= {width - 1}:
                __xl = {width - 1}
                __xh = {width - 1}
                __sx2 = {float(width - 1)}
            __ly = __sy2 - __yl
            __lx = __sx2 - __xl
            __hy = 1.0 - __ly
            __hx = 1.0 - __lx
            __v = {value}
        {fold}
o = {'__acc / max(__gh * __gw, 1)' if mode == 'avg' else '__acc'}"""
    mapped_tasklet(state, "roi_align",
                   {"n": f"0:{nr}", "c": f"0:{nc}", "i": f"0:{ph}", "j": f"0:{pw}"},
                   read_all(call, x, rois, batch), code, {"o": dace.Memlet(f"{y}[n, c, i, j]")})
    return sdfg
