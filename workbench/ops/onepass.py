"""One-pass row kernels: Softmax, LogSoftmax, LayerNormalization and RMSNormalization
(impl "onepass").

The pure implementations (normalization.py) run one map per statistic and
keep the statistics in arrays. Here one map runs over the rows (OpenMP over
them) and each row is one C++ tasklet that loops over its elements:

1. Softmax/LogSoftmax: a running max and sum in one sweep (per chunk of 64
   elements: the chunk's max and min, the sum rescaled once to the max, then
   the chunk's exponentials; loops without branches, vectorized as in
   ``simd.py``; masked chunks as ``EXP_FLOOR`` says), then one normalize
   sweep. No exponential is stored.
2. LayerNormalization: the sum and the sum of squares of ``x - x[0]`` in
   double in one sweep (shifting by a sample keeps the variance exact when
   the mean is large), then one normalize sweep.
3. RMSNormalization: the sum of squares in double in one sweep, then one
   scaling sweep (what RMSNormFusion makes of T5's and Llama's
   Pow/ReduceMean/Add/Sqrt/Div/Mul chains).

Cases these kernels do not cover (integer or float16 data, empty tensors, a
scale that does not broadcast as a contiguous suffix of the row) fall back
to the pure implementation, so choosing "onepass" never fails.
"""
import math

import dace
from dace.properties import CodeBlock

from workbench.ops.normalization import layer_norm, rms_norm, softmax
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet
from workbench.ops.symbolic_sizes import cpp_size, maybe
from workbench.ops.simd import FLOAT_TYPES, SIMD_MATH

CHUNK = 64
# Masked scores (x - max near -3.4e38: exporters add float's lowest to masked
# attention scores) send libmvec's vector exp to its scalar path for the whole vector:
# 8x128x128 took 1.3 ms instead of 0.15-0.20 with half of each row masked. Each chunk
# of a row is checked first: one whose every score is within EXP_FLOOR of the max runs
# the plain loop; one whose every score is below it adds 0 (the exponentials are under
# 2e-35 for float); a mixed one clamps the argument and takes 0 below the floor.
EXP_FLOOR = {"float": -80.0, "double": -700.0}

# The clamped argument of a mixed chunk. Written as a plain select, g++ turns
# exp(d < lo ? lo : d) into d < lo ? exp(lo) : exp(d), which calls the vector exp on the
# masked scores themselves (the slow path again: 8x128x128 with half masked, 1.98 ms, as
# if unclamped). Adding 0 * d keeps the select before the exp (0.11 ms); without
# -ffast-math the compiler may not fold it away. Where d is -inf or NaN the sum is NaN,
# and the select after the exp takes 0 (d < lo) or keeps NaN (d NaN) as before.
CLAMPED_EXP_ARG = "(d_ < {T}({lo}) ? {T}({lo}) : d_) + {T}(0) * d_"

# The head of both sweeps' chunk loop: the chunk's end, its highest and lowest score.
CHUNK_SCAN = """for (int c_ = 0; c_ < {n}; c_ += {chunk}) {{
    const int e_ = c_ + {chunk} < {n} ? c_ + {chunk} : {n};
    {T} hi_ = {x}[c_ * {stride}], lo_ = hi_;
    #pragma omp simd reduction(max: hi_) reduction(min: lo_)
    for (int j_ = c_; j_ < e_; ++j_) {{
        hi_ = {x}[j_ * {stride}] > hi_ ? {x}[j_ * {stride}] : hi_;
        lo_ = {x}[j_ * {stride}] < lo_ ? {x}[j_ * {stride}] : lo_;
    }}
"""

SOFTMAX_STATS = """
{T} m_ = {x}[0];
{T} s_ = 0;
""" + CHUNK_SCAN + """    const {T} cm_ = hi_ > m_ ? hi_ : m_;
    s_ *= std::exp(m_ - cm_);
    m_ = cm_;
    if (lo_ - m_ >= {T}({lo})) {{
        #pragma omp simd reduction(+: s_)
        for (int j_ = c_; j_ < e_; ++j_) s_ += std::exp({x}[j_ * {stride}] - m_);
    }} else if (hi_ - m_ >= {T}({lo})) {{
        #pragma omp simd reduction(+: s_)
        for (int j_ = c_; j_ < e_; ++j_) {{
            const {T} d_ = {x}[j_ * {stride}] - m_;
            const {T} f_ = std::exp(""" + CLAMPED_EXP_ARG + """);
            s_ += d_ < {T}({lo}) ? {T}(0) : f_;
        }}
    }}
}}
"""
SOFTMAX_OUT = {
    "Softmax": """const {T} r_ = {T}(1) / s_;
""" + CHUNK_SCAN + """    if (lo_ - m_ >= {T}({lo})) {{
        #pragma omp simd
        for (int j_ = c_; j_ < e_; ++j_) {y}[j_ * {stride}] = std::exp({x}[j_ * {stride}] - m_) * r_;
    }} else {{
        #pragma omp simd
        for (int j_ = c_; j_ < e_; ++j_) {{
            const {T} d_ = {x}[j_ * {stride}] - m_;
            const {T} f_ = std::exp(""" + CLAMPED_EXP_ARG + """);
            {y}[j_ * {stride}] = d_ < {T}({lo}) ? {T}(0) : f_ * r_;
        }}
    }}
}}""",
    "LogSoftmax": """const {T} l_ = m_ + std::log(s_);
#pragma omp simd
for (int j_ = 0; j_ < {n}; ++j_) {y}[j_ * {stride}] = {x}[j_ * {stride}] - l_;""",
}

LAYERNORM = """
const double k_ = {x}[0];
double s1_ = 0, s2_ = 0;
#pragma omp simd reduction(+: s1_, s2_)
for (int j_ = 0; j_ < {n}; ++j_) {{
    const double d_ = {x}[j_] - k_;
    s1_ += d_;
    s2_ += d_ * d_;
}}
const double md_ = s1_ / {n};
const double var_ = s2_ / {n} - md_ * md_;
const {T} mean_ = {T}(k_ + md_);
const {T} inv_ = {T}(1.0 / std::sqrt((var_ > 0 ? var_ : 0.0) + {eps}));
#pragma omp simd
for (int j_ = 0; j_ < {n}; ++j_) {y}[j_] = ({x}[j_] - mean_) * inv_ * {scale}{bias};
{stats}"""

RMSNORM = """
double s_ = 0;
#pragma omp simd reduction(+: s_)
for (int j_ = 0; j_ < {n}; ++j_) s_ += double({x}[j_]) * double({x}[j_]);
const {T} inv_ = {T}(1.0 / std::sqrt(s_ / {n} + {eps}));
#pragma omp simd
for (int j_ = 0; j_ < {n}; ++j_) {y}[j_] = {x}[j_] * inv_ * {scale};"""


def softmax_row(op_type: str, ctype: str, n: int, x: str, y: str, stride: int = 1) -> str:
    """C++ for one row: ``y`` = (Log)Softmax of ``x`` (row pointers, may be the same)."""
    fields = dict(T=ctype, n=cpp_size(n), stride=cpp_size(stride), chunk=CHUNK, x=x, y=y,
                  lo=EXP_FLOOR[ctype])
    return SOFTMAX_STATS.format(**fields) + SOFTMAX_OUT[op_type].format(**fields)


def layernorm_row(ctype: str, n: int, eps: float, x: str, y: str, scale: str, bias: str = None,
                  stats: str = "") -> str:
    """C++ for one row: ``y`` = LayerNorm of ``x``; ``scale``/``bias`` are element
    expressions of ``j_``; ``stats`` may store ``mean_`` and ``inv_``."""
    return LAYERNORM.format(T=ctype, n=cpp_size(n), eps=repr(float(eps)), x=x, y=y, scale=scale,
                            bias=f" + {bias}" if bias else "", stats=stats)


def softmax_view(shape, axis: int, opset: int) -> tuple:
    """(outer, n, inner): rows of ``n`` elements, ``inner`` apart."""
    axis = axis + len(shape) if axis < 0 else axis
    if opset >= 13:  # one axis
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    return math.prod(shape[:axis]), math.prod(shape[axis:]), 1  # coerced to 2-D at axis


def row_map(outer: int, inner: int):
    """Map ranges over rows (size-1 ones left out) and the row subset's outer/inner index."""
    ranges = {p: f"0:{n}" for p, n in (("o", outer), ("i", inner)) if maybe(n > 1)} \
        or {"o": "0:1"}
    return ranges, ("o" if "o" in ranges else "0"), ("i" if "i" in ranges else "0")


def softmax_onepass_supported(x_shape, dtype, axis: int, opset: int) -> bool:
    view = softmax_view(x_shape, axis, opset)
    # rows of one: nothing to fuse
    return dtype in FLOAT_TYPES and 0 not in view and maybe(view[1] > 1)


@implements("Softmax", "LogSoftmax", impl="onepass")
def softmax_onepass(call):
    x, y = call.input(0), call.output(0)
    dtype = call.dtype(x)
    view = softmax_view(call.shape(x), call.attr("axis", -1), call.node.opset)
    if not softmax_onepass_supported(call.shape(x), dtype, call.attr("axis", -1),
                                     call.node.opset):
        return softmax(call)
    outer, n, inner = view
    sdfg, state = connector_sdfg(call, f"{call.op_type.lower()}_onepass", {x: view, y: view})
    ranges, o, i = row_map(outer, inner)
    code = softmax_row(call.op_type, dtype.ctype, n, "x", "y", inner)
    tasklet, entry, _ = mapped_tasklet(
        state, "row", ranges, {"x": dace.Memlet(f"{x}[{o}, 0:{n}, {i}]")}, code,
        {"y": dace.Memlet(f"{y}[{o}, 0:{n}, {i}]")}, language=dace.Language.CPP)
    tasklet.code_global = CodeBlock(SIMD_MATH, dace.Language.CPP)
    entry.map.collapse = len(ranges)
    return sdfg


def suffix_size(param_shape, row_shape):
    """Size of a parameter that broadcasts against the row as a contiguous suffix, else None."""
    dims = list(param_shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    if len(dims) > len(row_shape) or (dims and tuple(dims) != tuple(row_shape[-len(dims):])):
        return None
    return math.prod(dims)


def layernorm_onepass_supported(x_shape, dtype, axis: int, param_shapes) -> bool:
    axis = axis + len(x_shape) if axis < 0 else axis
    row = x_shape[axis:]
    return (dtype in FLOAT_TYPES and 0 not in x_shape and math.prod(row) > 1
            and all(suffix_size(s, row) is not None for s in param_shapes))


@implements("LayerNormalization", impl="onepass")
def layer_norm_onepass(call):
    x, scale, bias, y = call.input(0), call.input(1), call.input(2), call.output(0)
    shape, dtype = call.shape(x), call.dtype(x)
    params = [call.shape(c) for c in (scale, bias) if c]
    if not layernorm_onepass_supported(shape, dtype, call.attr("axis", -1), params):
        return layer_norm(call)
    axis = call.attr("axis", -1) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    sizes = {c: suffix_size(call.shape(c), shape[axis:]) for c in (scale, bias) if c}
    stats = {"mean_": call.output(1), "inv_": call.output(2)}  # local -> output
    views = {x: (rows, n), y: (rows, n), **{c: (max(s, 1),) for c, s in sizes.items()},
             **{c: (rows,) for c in stats.values() if c}}
    sdfg, state = connector_sdfg(call, "layernorm_onepass", views)
    ranges, r, _ = row_map(rows, 1)
    inputs = {"x": dace.Memlet(f"{x}[{r}, 0:{n}]")}
    outputs = {"y": dace.Memlet(f"{y}[{r}, 0:{n}]")}
    index = {}
    for name, conn in (("scale", scale), ("bias", bias)):
        if conn:
            inputs[name] = dace.Memlet(f"{conn}[0:{max(sizes[conn], 1)}]")
            size = sizes[conn]
            # a one-element parameter is a scalar connector in C++
            index[name] = f"{name}[j_]" if size == n else (name if size <= 1 else
                                                           f"{name}[j_ % {size}]")
    lines = []
    for local, conn in stats.items():
        if conn:
            outputs[f"{local}out"] = dace.Memlet(f"{conn}[{r}]")
            lines.append(f"{local}out = {local};")
    code = layernorm_row(dtype.ctype, n, call.attr("epsilon", 1e-5), "x", "y", index["scale"],
                         index.get("bias"), "\n".join(lines))
    tasklet, _, _ = mapped_tasklet(state, "row", ranges, inputs, code, outputs,
                                   language=dace.Language.CPP)
    tasklet.code_global = CodeBlock(SIMD_MATH, dace.Language.CPP)
    return sdfg


@implements("RMSNormalization", impl="onepass")
def rms_norm_onepass(call):
    x, scale, y = call.input(0), call.input(1), call.output(0)
    shape, dtype = call.shape(x), call.dtype(x)
    if not layernorm_onepass_supported(shape, dtype, call.attr("axis", -1), [call.shape(scale)]):
        return rms_norm(call)
    axis = call.attr("axis", -1) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    size = suffix_size(call.shape(scale), shape[axis:])
    sdfg, state = connector_sdfg(call, "rmsnorm_onepass",
                                 {x: (rows, n), y: (rows, n), scale: (max(size, 1),)})
    ranges, r, _ = row_map(rows, 1)
    # a one-element scale is a scalar connector in C++
    index = "scale[j_]" if size == n else ("scale" if size <= 1 else f"scale[j_ % {size}]")
    code = RMSNORM.format(T=dtype.ctype, n=cpp_size(n),
                          eps=repr(float(call.attr("epsilon", 1e-5))),
                          x="x", y="y", scale=index)
    tasklet, _, _ = mapped_tasklet(
        state, "row", ranges, {"x": dace.Memlet(f"{x}[{r}, 0:{n}]"),
                               "scale": dace.Memlet(f"{scale}[0:{max(size, 1)}]")},
        code, {"y": dace.Memlet(f"{y}[{r}, 0:{n}]")}, language=dace.Language.CPP)
    tasklet.code_global = CodeBlock(SIMD_MATH, dace.Language.CPP)
    return sdfg
