"""Element-wise arithmetic and activations, kept as data: op type -> tasklet expression.

Expressions are Python tasklet code over ``x`` (unary), ``a``/``b``
(binary) or ``v0..vN`` (variadic), written to ``y``; DaCe turns them into
C++ or CUDA, so C arithmetic rules apply: integer ``/`` truncates toward
zero and ``%`` takes the dividend's sign, as ONNX Div and Mod(fmod=1) want.
``{name}`` fields are filled from the node's attributes. Broadcasting,
dtypes and empty tensors are handled once, in ``broadcast_map``: each op
becomes a single map over the output, which the fusion transformations can
merge. Comparisons, logic and casts live in ``logic.py`` and ``cast.py``.
"""
import dace

from workbench.ops.registry import implements, mapped_tasklet

_SOFTPLUS = "(x + log1p(exp(-x)) if x > 0 else log1p(exp(x)))"  # no overflow for large |x|

UNARY = {
    "Relu": "0 if x < 0 else x",   # NaN stays NaN, as onnxruntime has it (max gives 0)
    "Sigmoid": "1 / (1 + exp(-x))",
    "Tanh": "tanh(x)",
    "Erf": "erf(x)",
    "Exp": "exp(x)",
    "Log": "log(x)",
    "Sqrt": "sqrt(x)",
    "Neg": "-x",
    "Abs": "abs(x)",
    "Sign": "sign(x)",
    "Reciprocal": "1 / x",
    "Floor": "floor(x)",
    "Ceil": "ceil(x)",
    "Round": "nearbyint(x)",  # the default rounding mode: half to even
    "Sin": "sin(x)", "Cos": "cos(x)", "Tan": "tan(x)",
    "Asin": "asin(x)", "Acos": "acos(x)", "Atan": "atan(x)",
    "Sinh": "sinh(x)", "Cosh": "cosh(x)",
    "Asinh": "asinh(x)", "Acosh": "acosh(x)", "Atanh": "atanh(x)",
    "Softplus": _SOFTPLUS,
    "Softsign": "x / (1 + abs(x))",
    "Mish": f"x * tanh({_SOFTPLUS})",
    "LeakyRelu": "x if x >= 0 else {alpha} * x",
    "ThresholdedRelu": "x if x > {alpha} else 0",
    "Elu": "x if x >= 0 else {alpha} * (exp(x) - 1)",
    "Celu": "max(0, x) + min(0, {alpha} * (exp(x / {alpha}) - 1))",
    "Selu": "{gamma} * (x if x > 0 else {alpha} * (exp(x) - 1))",
    "HardSigmoid": "max(0, min(1, {alpha} * x + {beta}))",
    "HardSwish": "x * max(0, min(1, x / 6 + 0.5))",
    "Shrink": "x + {bias} if x < -{lambd} else (x - {bias} if x > {lambd} else 0)",
}

# The output has the first input's type (Pow: the base's, whatever the exponent's).
BINARY = {
    "Add": "a + b",
    "Sub": "a - b",
    "Mul": "a * b",
    "Div": "a / b",
    "Pow": "pow(a, b)",
    "PRelu": "a if a >= 0 else b * a",
}

# Joined left to right over v0..vN.
VARIADIC = {
    "Sum": " + ",
    "Max": "max",
    "Min": "min",
}

GELU = {
    "none": "0.5 * x * (1 + erf(x * 0.7071067811865476))",  # 1/sqrt(2)
    "tanh": "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))",  # sqrt(2/pi)
}

# Mod: the result takes the divisor's sign (fmod=0) or the dividend's (fmod=1).
# ``r`` is C's remainder (``REMAINDER``), which already has the dividend's sign.
MOD = {
    ("int", 0): "r + b if r != 0 and (r < 0) != (b < 0) else r",
    ("int", 1): "r",
    ("unsigned", 0): "r",
    ("unsigned", 1): "r",
    ("float", 0): "copysign(0.0, b) if r == 0 else (r + b if (r < 0) != (b < 0) else r)",
    ("float", 1): "r",
}
REMAINDER = {"int": "a % b", "unsigned": "a % b", "float": "fmod(a, b)"}


def broadcast_map(call, code: str, names: list, out_name: str = "y", let: dict = None,
                  cpp: bool = False) -> dace.SDFG:
    """One SDFG with one map over the output computing ``out_name = code``.

    ``names`` bind the present inputs in order (an input left unnamed is
    only carried, e.g. CastLike's target); ``let`` gives local values the
    expression reads, computed first. ``cpp``: ``code`` is C++ statements
    that assign ``out_name`` themselves (``let`` unused).
    """
    for conn, desc in {**call.inputs, **call.outputs}.items():
        if desc.dtype == dace.float16:
            # dace::half on CPU converts to and from float by value, not bits.
            raise call.fail(f"float16 tensor '{conn}': DaCe 1.0.2's CPU half type is not usable")
    sdfg = dace.SDFG("elementwise")
    state = sdfg.add_state()
    conns_in = [c for c in call.node.onnx_inputs if c]
    conn_out = call.output(0)
    for conn in conns_in + [conn_out]:
        desc = call._desc(conn)
        sdfg.add_array(conn, desc.shape, desc.dtype)
    out_shape = call.shape(conn_out)
    if 0 in out_shape:
        return sdfg  # nothing to compute; a map over an empty range is invalid
    params = [f"i{k}" for k in range(len(out_shape))]
    ranges = {p: f"0:{n}" for p, n in zip(params, out_shape)}
    memlets_in = {}
    for name, conn in zip(names, conns_in):
        memlets_in[name] = dace.Memlet(f"{conn}[{_index(call.shape(conn), out_shape, params)}]")
    lines = [f"{k} = {v}" for k, v in (let or {}).items()] + [f"{out_name} = {code}"]
    _, entry, _ = mapped_tasklet(
        state, call.op_type, ranges, memlets_in, code if cpp else "\n".join(lines),
        {out_name: dace.Memlet(f"{conn_out}[{', '.join(params)}]")},
        language=dace.Language.CPP if cpp else dace.Language.Python)
    # OpenMP over every dimension but the last (a leading batch of 1 left one thread
    # doing all the work); the last stays a plain loop the compiler can vectorize
    entry.map.collapse = max(1, len(ranges) - 1)
    return sdfg


def _index(shape, out_shape, params) -> str:
    """Numpy broadcasting: align right, size-1 dims read index 0."""
    offset = len(out_shape) - len(shape)
    idx = []
    for k, n in enumerate(shape):
        out_n = out_shape[offset + k] if offset + k >= 0 else 1
        idx.append("0" if n == 1 and out_n != 1 else params[offset + k])
    return ", ".join(idx) or "0"


def type_kind(dtype) -> str:
    """'float', 'int' (signed), 'unsigned' or 'bool' for a dace type."""
    if dtype == dace.bool_:
        return "bool"
    kind = dtype.as_numpy_dtype().kind
    return {"f": "float", "i": "int", "u": "unsigned"}[kind]


# Pow by a constant integer exponent as products: pow() is a libm call (~28 ns an
# element on float32 here, T5's RMS norm squares every activation) and x * x is the
# correctly rounded square; x * x * x rounds twice (within 1 ulp of pow).
POW_BY = {2.0: "a * a", 3.0: "a * a * a"}


def pow_expression(exponent) -> str:
    """The expression of Pow when its exponent is the constant ``exponent`` (a numpy
    value, or None when not constant)."""
    if exponent is not None and exponent.size == 1:
        return POW_BY.get(float(exponent.reshape(-1)[0]), BINARY["Pow"])
    return BINARY["Pow"]


def expression(op_type: str, attrs: dict, opset: int, inputs: list, consts=None):
    """The one reading of the tables above, for the kernels here and the fusions alike:
    (tasklet expression, the names bound to the present inputs in order) of ``op_type``
    with ``attrs`` (schema defaults filled in) at ``opset`` over ``inputs`` (connectors
    in ONNX order, '' where absent); None where the tables have no expression for it.
    Mod (its code depends on the dtype) is not among them. ``consts``: the node's
    constant inputs (position -> value), read by Pow only."""
    names = [f"v{k}" for k in range(sum(1 for c in inputs if c))]
    if op_type in UNARY:
        return UNARY[op_type].format(**attrs), ["x"]
    if op_type == "Pow" and consts is not None:
        return pow_expression(consts().get(1)), ["a", "b"]
    if op_type in BINARY:
        return BINARY[op_type], ["a", "b"]
    if op_type in VARIADIC:
        return _join(VARIADIC[op_type], names), names
    if op_type == "Mean":
        return f"({_join(' + ', names)}) / {len(names)}", names
    if op_type == "Gelu":
        code = GELU.get(attrs.get("approximate", "none"))
        return (code, ["x"]) if code is not None else None
    if op_type == "Clip":
        return _clip(attrs, opset, inputs)
    return None


def _join(joiner: str, names: list) -> str:
    """Sum's ``" + "`` between the names, Max's ``max`` nested left to right."""
    if joiner.strip() == "+":
        return joiner.join(names)
    code = names[0]
    for n in names[1:]:
        code = f"{joiner}({code}, {n})"
    return code


def _clip(attrs: dict, opset: int, inputs: list):
    """min(max(x, lo), hi), except that NaN stays NaN and hi wins when lo > hi."""
    if opset < 11:  # bounds are attributes
        lo, hi, names = repr(float(attrs["min"])), repr(float(attrs["max"])), ["x"]
    else:  # bounds are optional inputs
        have = [i for i in (1, 2) if i < len(inputs) and inputs[i]]
        lo, hi = ("lo" if 1 in have else None), ("hi" if 2 in have else None)
        names = ["x"] + [n for n in (lo, hi) if n]
    code = "x"
    if lo:
        code = f"{lo} if x < {lo} else {code}"
    if hi:
        code = f"{hi} if x > {hi} else ({code})"
    if lo and hi:
        code = f"{hi} if {lo} > {hi} else ({code})"
    return code, names


@implements(*UNARY, *BINARY, *VARIADIC, "Mean", "Clip")
def tabled(call):
    # an integer base keeps pow(): its products would wrap where pow() saturates
    floats = call.op_type == "Pow" and call.dtype(call.input(0)) in (dace.float32, dace.float64)
    return broadcast_map(call, *expression(call.op_type, call.attrs, call.node.opset,
                                           call.node.onnx_inputs,
                                           (lambda: call.node.consts) if floats else None))


@implements("Gelu")
def gelu(call):
    approximate = call.attr("approximate", "none")
    if approximate not in GELU:
        raise call.fail(f"approximate={approximate!r} is neither 'none' nor 'tanh'")
    return tabled(call)


@implements("Mod")
def mod(call):
    kind = type_kind(call.dtype(call.input(0)))
    return broadcast_map(call, MOD[(kind, int(call.attr("fmod", 0)))], ["a", "b"],
                         let={"r": REMAINDER[kind]})


# Every op type this module implements: one output element from the same position of
# each input (broadcast), so a fused loop or an in-place write may take them.
ELEMENTWISE = set(UNARY) | set(BINARY) | set(VARIADIC) | {"Mean", "Gelu", "Mod", "Clip"}
