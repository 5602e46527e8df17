"""CenterCropPad: each listed axis cropped or zero-padded to its new size, centred.

One map over the output; element ``y[i]`` reads ``x[i + start]`` with a
start per axis (the odd element of a crop or a pad goes to the end, as the
spec's reference does), and 0 where a padded axis falls outside ``x``.
"""
import dace

from workbench.ops.index_maps import element_map, offset, op_sdfg, size_of, whole
from workbench.ops.registry import implements


def starts(in_shape, out_shape) -> list:
    """Where output index 0 of each axis lies in the input (negative: padded)."""
    return [(n - m) // 2 if n >= m else -((m - n) // 2) for n, m in zip(in_shape, out_shape)]


@implements("CenterCropPad")
def center_crop_pad(call):
    x, y = call.input(0), call.output(0)
    in_shape, out_shape = call.shape(x), call.shape(y)
    rank = len(in_shape)
    sizes = [int(s) for s in call.require_const(1, "shape").ravel()]
    axes = call.attr("axes") or list(range(rank))
    axes = [a + rank if a < 0 else a for a in axes]
    if len(axes) != len(sizes) or any(not 0 <= a < rank for a in axes):
        raise call.fail(f"axes {call.attr('axes')} do not match shape {sizes} at rank {rank}")
    expected = list(in_shape)
    for a, s in zip(axes, sizes):
        expected[a] = s
    if tuple(expected) != tuple(out_shape):
        raise call.fail(f"output was given shape {out_shape} at import, but the spec gives "
                        f"{tuple(expected)}")
    size = size_of(in_shape)
    sdfg, state = op_sdfg(call, "center_crop_pad", {x: (size,)})
    begin = starts(in_shape, out_shape)
    source = [f"i{k} + {b}" if b > 0 else (f"i{k} - {-b}" if b < 0 else f"i{k}")
              for k, b in enumerate(begin)]
    inside = [f"{j} >= 0 and {j} < {n}" for j, n, m in zip(source, in_shape, out_shape) if m > n]
    read = f"src[{offset(source, in_shape)}]" if size else "0"
    code = f"({read} if {' and '.join(inside)} else 0)" if inside and size else read
    element_map(state, "center_crop_pad", y, out_shape, code,
                {"src": whole(x, (size,))} if size else {})
    return sdfg
