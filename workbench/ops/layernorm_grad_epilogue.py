"""LayerNormGrad with an epilogue: the row kernel also runs what reads ``dx`` next.

LayerNormGradEpilogue (``transforms/fusion/layernorm_grad_epilogue.py``)
gives a LayerNormGrad node (``workbench/ops/layernorm_grad.py``) two more
attributes:

    code     an element-wise program (``name = expression`` lines) over the
             value ``dx`` and inputs ``x0..``, assigning outputs ``y0..``:
             the Dropout mask multiply that followed the kernel
    colsum   "" or the value (``dx`` or a ``yK``) whose column sums over all
             rows the node writes to its output ``db``: a dense layer's bias
             gradient, which a ReduceSum over the leading axes computed

``dx`` stays an output only if something else still reads it. An extra
input is read row-aligned (the input's shape), once per row (one value per
row), or as a contiguous suffix of a row (per-feature values, scalars).

The rows are cut into ``blocks`` contiguous pieces (OpenMP over them). Each
piece sums its rows' values into its own row of double partials; after the
loop the partials are added in piece order. The order of the additions
depends only on the shape, never on the thread count or timing, so the
result is reproducible; it differs from ReduceSum's float order by rounding
(the partials are double, so it is the closer one to the exact sum).
"""
import math

import dace

from workbench.ops.fused import program_lines
from workbench.ops.onepass import suffix_size
from workbench.ops.registry import connector_sdfg, moves_inside
from workbench.ops.simd import SIMD_MATH, substitute, to_cpp

MAX_BLOCKS = 16       # partial rows: enough pieces for the cores, few partials to add up
MIN_BLOCK_ROWS = 16   # a piece of fewer rows costs more in partials than it shares


def blocks(rows: int) -> int:
    return max(1, min(MAX_BLOCKS, rows // MIN_BLOCK_ROWS))


def layout(shape, axis: int, operand_shape):
    """How an extra input is read against rows of ``shape`` split at ``axis``: ("row", size)
    row-aligned, ("per_row", rows) one value per row, ("suffix", size) a contiguous
    suffix of a row (size 1: a scalar), or None."""
    rank = len(shape)
    if len(operand_shape) > rank:
        return None
    padded = (1,) * (rank - len(operand_shape)) + tuple(operand_shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    if padded == tuple(shape):
        return "row", n
    if padded == tuple(shape[:axis]) + (1,) * (rank - axis):
        return "per_row", rows
    size = suffix_size(tuple(operand_shape), tuple(shape[axis:]))
    return None if size is None else ("suffix", max(size, 1))


def _element(name: str, kind: str, size: int, n: int) -> str:
    """C++ for the element row ``r_``, column ``j_`` of connector ``name``."""
    if size == 1 and kind != "row":
        return name            # DaCe passes a one-element connector as a scalar
    if kind == "row":
        return f"{name}[o_ + j_]"
    if kind == "per_row":
        return f"{name}[r_]"
    return f"{name}[j_]" if size == n else f"{name}[j_ % {size}]"


def epilogue_kernel(call):
    """The LayerNormGrad expansion when ``code`` or ``colsum`` is set."""
    dy, xhat, scale, inv = (call.input(i) for i in range(4))
    shape = call.shape(dy)
    axis = call.attr("axis", -1) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    ctype = call.dtype(dy).ctype
    extras = [c for c in call.node.onnx_inputs[4:] if c]
    outs = [c for c in call.node.onnx_outputs if c]
    colsum = call.attr("colsum", "")
    size = suffix_size(call.shape(scale), shape[axis:])
    if size is None:
        raise call.fail(f"the scale {list(call.shape(scale))} does not broadcast as a suffix "
                        f"of a row of {list(shape[axis:])}")
    shapes = {dy: (rows, n), xhat: (rows, n), scale: (max(size, 1),), inv: (rows,)}
    names = {"dx": "d_"}
    for conn in extras:
        how = layout(shape, axis, call.shape(conn))
        if how is None:
            raise call.fail(f"'{conn}' of shape {list(call.shape(conn))} is not read row by row")
        kind, count = how
        shapes[conn] = (rows, n) if kind == "row" else (count,)
        names[conn] = _element("__" + conn, kind, count if kind != "row" else rows * n, n)
    for conn in outs:
        shapes[conn] = (n,) if conn == "db" else (rows, n)
        if conn not in ("dx", "db"):
            names[conn] = f"__{conn}[o_ + j_]"
    sdfg, state = connector_sdfg(call, "layernorm_grad_epilogue", shapes)

    body = []
    for target, expr in program_lines(call.attr("code", "") or ""):
        value = to_cpp(substitute(expr, names))
        body.append(f"{names[target]} = {value};" if target in outs else
                    f"const {ctype} {target} = {value};")
        if target == colsum:
            body.append(f"acc_[j_] += double({names.get(target, target)});")
    if "dx" in outs:
        body.insert(0, "__dx[o_ + j_] = d_;")
    if colsum == "dx":
        body.append("acc_[j_] += double(d_);")
    code = _kernel(ctype, rows, n, blocks(rows), _element("__scale", "suffix", max(size, 1), n),
                   _element("__inv", "per_row", rows, n), call, body, bool(colsum))

    tasklet = state.add_tasklet("rows", {f"__{c}" for c in (dy, xhat, scale)} | {"__inv"}
                                | {f"__{c}" for c in extras}, {f"__{c}" for c in outs}, code,
                                language=dace.Language.CPP, code_global=SIMD_MATH)
    for conn, inner in [(dy, dy), (xhat, xhat), (scale, scale), (inv, "inv")] + \
            [(c, c) for c in extras]:
        state.add_edge(state.add_read(conn), None, tasklet, f"__{inner}",
                       dace.Memlet.from_array(conn, sdfg.arrays[conn]))
    for conn in outs:
        state.add_edge(tasklet, f"__{conn}", state.add_write(conn), None,
                       dace.Memlet.from_array(conn, sdfg.arrays[conn]))
    return sdfg


def _kernel(ctype, rows, n, count, scale, inv, call, body, summed) -> str:
    c1, c2 = repr(float(call.attr("c1"))), repr(float(call.attr("c2")))
    inner = "\n            ".join(body)
    partials = (f"double* part_ = new double[{count * n}]();" if summed else "")
    own = f"double* acc_ = part_ + (long){n} * b_;" if summed else ""
    combine = (f"""
for (int j_ = 0; j_ < {n}; ++j_) {{
    double s_ = 0;
    for (int b_ = 0; b_ < {count}; ++b_) s_ += part_[(long){n} * b_ + j_];
    __db[j_] = {ctype}(s_);
}}
delete[] part_;""" if summed else "")
    return f"""{partials}
#pragma omp parallel for schedule(static)
for (int b_ = 0; b_ < {count}; ++b_) {{
    {own}
    const int lo_ = int((long){rows} * b_ / {count}), hi_ = int((long){rows} * (b_ + 1) / {count});
    for (int r_ = lo_; r_ < hi_; ++r_) {{
        const long o_ = (long)r_ * {n};
        double s1_ = 0, s2_ = 0;
        #pragma omp simd reduction(+: s1_, s2_)
        for (int j_ = 0; j_ < {n}; ++j_) {{
            const double g_ = double(__dy[o_ + j_]) * double({scale});
            s1_ += g_;
            s2_ += g_ * double(__xhat[o_ + j_]);
        }}
        const {ctype} m1_ = {ctype}({c1} * s1_), m2_ = {ctype}({c2} * s2_);
        const {ctype} q_ = {inv};
        #pragma omp simd
        for (int j_ = 0; j_ < {n}; ++j_) {{
            const {ctype} d_ = ((__dy[o_ + j_] * {scale} - m1_) - __xhat[o_ + j_] * m2_) * q_;
            {inner}
        }}
    }}
}}{combine}"""


@moves_inside("LayerNormGrad", impl=None)   # a node left to its default implementation
@moves_inside("LayerNormGrad", impl="pure")
def partial_traffic(call):
    """The double partials of the column sums: written once, read once when combined."""
    if not call.attr("colsum"):
        return 0
    shape = call.shape(call.input(0))
    axis = call.attr("axis", -1) % len(shape)
    return 2 * 8 * blocks(math.prod(shape[:axis])) * math.prod(shape[axis:])
