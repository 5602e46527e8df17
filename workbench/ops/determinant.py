"""Det: the determinant of each square matrix in a batch, by LU with partial pivoting.

One parallel map over the batch; each iteration eliminates its matrix in a
double-precision scratch copy of its own (a heap vector: a large matrix
would not fit a thread's stack), so the input stays untouched, and
multiplies the pivots, negating on each row swap.
"""
import math

import dace

from workbench.ops.index_maps import check_shape, op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("Det")
def det(call):
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("Det is defined for floating-point matrices only")
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise call.fail(f"input of shape {list(shape)}: (..., n, n) expected")
    m = shape[-1]
    batch = math.prod(shape[:-2])
    check_shape(call, y, tuple(shape[:-2]) or (1,))   # a 0-d tensor is stored as (1,)
    if not batch:
        raise call.fail(f"empty batch of shape {list(shape)}")
    sdfg, state = op_sdfg(call, "det", {x: (batch, m * m), y: (batch,)})
    code = f"""
std::vector<double> a(src, src + {m * m});
double d = 1.0;
for (int k = 0; k < {m}; ++k) {{
    int p = k;
    for (int i = k + 1; i < {m}; ++i)
        if (fabs(a[i * {m} + k]) > fabs(a[p * {m} + k])) p = i;
    if (a[p * {m} + k] == 0.0) {{ d = 0.0; break; }}
    if (p != k) {{
        for (int j = 0; j < {m}; ++j) {{
            double t = a[k * {m} + j]; a[k * {m} + j] = a[p * {m} + j]; a[p * {m} + j] = t;
        }}
        d = -d;
    }}
    d *= a[k * {m} + k];
    for (int i = k + 1; i < {m}; ++i) {{
        double f = a[i * {m} + k] / a[k * {m} + k];
        for (int j = k + 1; j < {m}; ++j) a[i * {m} + j] -= f * a[k * {m} + j];
    }}
}}
o = d;
"""
    if m == 1:  # one-element rows reach the tasklet as scalars
        code = "o = src;"
    mapped_tasklet(
        state, "det", {"b": f"0:{batch}"}, {"src": dace.Memlet(f"{x}[b, 0:{m * m}]")}, code,
        {"o": dace.Memlet(f"{y}[b]")},
        language=dace.Language.CPP)
    return sdfg
