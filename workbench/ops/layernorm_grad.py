"""LayerNormGrad: the input gradient of LayerNormalization as one row kernel.

A workbench-internal op (domain ``workbench``) that LayerNormBackwardFusion
(``transforms/fusion/layernorm_backward.py``) makes of the chain the gradient
rule writes (``workbench/training/rules/normalization.py``):

    g  = dy * scale
    dx = ((g - c1 * sum(g)) - xhat * (c2 * sum(g * xhat))) * inv_std

with the sums over the normalized (trailing) axes of each row, and ``c1``,
``c2`` the constants the rule wrote (``1 / n``).

    inputs:  dy, xhat, scale, inv_std      output: dx
    attributes: axis, c1, c2 (and ``code``, ``colsum``: the consumers
    LayerNormGradEpilogue folds in, ``workbench/ops/layernorm_grad_epilogue.py``)

``dy``, ``xhat`` and ``dx`` have the input's shape; ``scale`` broadcasts as
a contiguous suffix of a row; ``inv_std`` holds one value per row. One map
runs over the rows (OpenMP over them); each row is a C++ tasklet of two
sweeps: both sums in double, then ``dx``. The chain it replaces wrote and
re-read five tensors of the input's size.
"""
import math

import dace

from workbench.ops.layernorm_grad_epilogue import epilogue_kernel
from workbench.ops.onepass import row_map, suffix_size
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet

OP_TYPE = "LayerNormGrad"
DOMAIN = "workbench"

ROW = """
double s1_ = 0, s2_ = 0;
#pragma omp simd reduction(+: s1_, s2_)
for (int j_ = 0; j_ < {n}; ++j_) {{
    const double g_ = double(dy[j_]) * double({scale});
    s1_ += g_;
    s2_ += g_ * double(xhat[j_]);
}}
const {T} m1_ = {T}({c1} * s1_), m2_ = {T}({c2} * s2_);
const {T} r_ = inv;
#pragma omp simd
for (int j_ = 0; j_ < {n}; ++j_) dx[j_] = ((dy[j_] * {scale} - m1_) - xhat[j_] * m2_) * r_;"""


@implements(OP_TYPE, internal=True)
def layernorm_grad(call):
    if call.attr("code") or call.attr("colsum"):
        return epilogue_kernel(call)   # LayerNormGradEpilogue's fused consumers
    dy, xhat, scale, inv, dx = (call.input(0), call.input(1), call.input(2), call.input(3),
                                call.output(0))
    shape = call.shape(dy)
    axis = call.attr("axis", -1) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    size = suffix_size(call.shape(scale), shape[axis:])
    if size is None:
        raise call.fail(f"the scale {list(call.shape(scale))} does not broadcast as a suffix "
                        f"of a row of {list(shape[axis:])}")
    sdfg, state = connector_sdfg(call, "layernorm_grad",
                                 {dy: (rows, n), xhat: (rows, n), dx: (rows, n),
                                  scale: (max(size, 1),), inv: (rows,)})
    ranges, r, _ = row_map(rows, 1)
    # a one-element scale is a scalar connector in C++
    index = "scale[j_]" if size == n else ("scale" if size <= 1 else f"scale[j_ % {size}]")
    code = ROW.format(T=call.dtype(dy).ctype, n=n, scale=index, c1=repr(float(call.attr("c1"))),
                      c2=repr(float(call.attr("c2"))))
    _, entry, _ = mapped_tasklet(
        state, "row", ranges,
        {"dy": dace.Memlet(f"{dy}[{r}, 0:{n}]"), "xhat": dace.Memlet(f"{xhat}[{r}, 0:{n}]"),
         "scale": dace.Memlet(f"{scale}[0:{max(size, 1)}]"), "inv": dace.Memlet(f"{inv}[{r}]")},
        code, {"dx": dace.Memlet(f"{dx}[{r}, 0:{n}]")}, language=dace.Language.CPP)
    entry.map.collapse = len(ranges)
    return sdfg
