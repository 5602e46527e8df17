"""LRN: local response normalization across channels.

y[n, c, ...] = x[n, c, ...] / (bias + alpha / size * sum of x^2 over channels
c - floor((size-1)/2) .. c + ceil((size-1)/2), clipped to the tensor)^beta.
One parallel map over the output; each element sums its channel window
sequentially in double precision, reading its (n, :, spatial) column.
"""
import math

import dace

from workbench.ops.index_maps import check_shape, literal, op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("LRN")
def lrn(call):
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("LRN is defined for floating-point tensors only")
    if len(shape) < 3:
        raise call.fail(f"input of shape {list(shape)}: (N, C, d1, ...) expected")
    size = int(call.attr("size"))
    if size < 1:
        raise call.fail(f"size {size} is not positive")
    check_shape(call, y, shape)
    n, c, d = shape[0], shape[1], math.prod(shape[2:])
    if not n * c * d:
        raise call.fail(f"empty input of shape {list(shape)}")
    sdfg, state = op_sdfg(call, "lrn", {x: (n, c, d), y: (n, c, d)})
    alpha, beta, bias = (literal(float(call.attr(a))) for a in ("alpha", "beta", "bias"))
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    code = (f"__acc = 0.0\n"
            f"for __k in range(max(0, ch - {before}), min({c}, ch + {after + 1})):\n"
            f"    __acc = __acc + column[__k] * column[__k]\n"
            f"o = column[ch] / pow({bias} + {alpha} / {size} * __acc, {beta})")
    if c == 1:   # a one-element column reaches the tasklet as a scalar
        code = code.replace("column[__k]", "column").replace("column[ch]", "column")
    mapped_tasklet(state, "lrn", {"b": f"0:{n}", "ch": f"0:{c}", "s": f"0:{d}"},
                   {"column": dace.Memlet(f"{x}[b, 0:{c}, s]", volume=min(c, size))}, code,
                   {"o": dace.Memlet(f"{y}[b, ch, s]")})
    return sdfg
