"""SoftmaxGrad: the backward pass of Softmax as one row kernel.

A workbench-internal op (domain ``workbench``) that SoftmaxBackwardFusion
(``transforms/fusion/softmax_backward.py``) makes of the chain the gradient
rule writes, ``dx = y * (g - sum(g * y, axis))``, where ``g`` is the
incoming gradient times the factors the fusion absorbed (a Dropout's mask
and its ``1 / (1 - ratio)``):

    inputs:  g (the gradient of y), y (Softmax's output), factors...
    output:  dx
    attribute: axis

A factor has ``g``'s shape or one element. One map runs over the rows (OpenMP
over them); each row is a C++ tasklet of two sweeps: the sum of ``g * y`` in
double, then ``dx``. The chain it replaces wrote and re-read three tensors
of the row's size (``g * y``, ``g - s``, and the masked gradient) per row.
"""
import math

import dace

from workbench.ops.onepass import row_map, softmax_view
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet

OP_TYPE = "SoftmaxGrad"
DOMAIN = "workbench"

ROW = """
double s_ = 0;
#pragma omp simd reduction(+: s_)
for (int j_ = 0; j_ < {n}; ++j_) s_ += double({g}) * double(y[j_ * {stride}]);
const {T} t_ = {T}(s_);
#pragma omp simd
for (int j_ = 0; j_ < {n}; ++j_) dx[j_ * {stride}] = y[j_ * {stride}] * ({g} - t_);"""


def row_code(ctype: str, n: int, stride: int, factors: dict) -> str:
    """C++ for one row; ``factors``: connector -> whether it is a whole row (else one
    element, a scalar connector)."""
    g = " * ".join([f"g[j_ * {stride}]"] + [f"{c}[j_ * {stride}]" if row else c
                                             for c, row in factors.items()])
    return ROW.format(T=ctype, n=n, stride=stride, g=f"({g})")


@implements(OP_TYPE, internal=True)
def softmax_grad(call):
    g, y, dx = call.input(0), call.input(1), call.output(0)
    shape = call.shape(g)
    outer, n, inner = softmax_view(shape, call.attr("axis", -1), 13)
    factors = [c for c in call.node.onnx_inputs[2:] if c]
    rows = {c: math.prod(call.shape(c)) > 1 for c in factors}
    view = (outer, n, inner)
    sdfg, state = connector_sdfg(call, "softmax_grad",
                                 {g: view, y: view, dx: view,
                                  **{c: (view if rows[c] else (1,)) for c in factors}})
    ranges, o, i = row_map(outer, inner)
    row = f"[{o}, 0:{n}, {i}]"
    inputs = {"g": dace.Memlet(f"{g}{row}"), "y": dace.Memlet(f"{y}{row}")}
    local = {}
    for k, c in enumerate(factors):
        local[f"f{k}"] = rows[c]
        inputs[f"f{k}"] = dace.Memlet(f"{c}{row}" if rows[c] else f"{c}[0]")
    code = row_code(call.dtype(g).ctype, n, inner, local)
    _, entry, _ = mapped_tasklet(state, "row", ranges, inputs, code,
                                 {"dx": dace.Memlet(f"{dx}{row}")}, language=dace.Language.CPP)
    entry.map.collapse = len(ranges)
    return sdfg
