"""Element-wise operators, kept as data: op type -> tasklet expression.

Expressions are Python tasklet code over ``x`` (unary), ``a``/``b``
(binary) or ``v0..vN`` (variadic), written to ``y``; DaCe turns them into
C++ or CUDA. ``{name}`` fields are filled from the node's attributes.
Broadcasting is done once, in ``broadcast_map``: each op becomes a single
map over the output, which the fusion transformations can merge.
"""
import dace

from workbench.ops.registry import implements, mapped_tasklet

UNARY = {
    "Relu": "max(x, 0)",
    "Sigmoid": "1 / (1 + exp(-x))",
    "Tanh": "tanh(x)",
    "Erf": "erf(x)",
    "Exp": "exp(x)",
    "Log": "log(x)",
    "Sqrt": "sqrt(x)",
    "Neg": "-x",
    "Abs": "abs(x)",
    "Reciprocal": "1 / x",
    "Floor": "floor(x)",
    "Ceil": "ceil(x)",
    "Sin": "sin(x)",
    "Cos": "cos(x)",
    "Softplus": "log(1 + exp(x))",
    "LeakyRelu": "x if x >= 0 else {alpha} * x",
    "Elu": "x if x >= 0 else {alpha} * (exp(x) - 1)",
    "Selu": "{gamma} * (x if x > 0 else {alpha} * (exp(x) - 1))",
    "HardSigmoid": "max(0, min(1, {alpha} * x + {beta}))",
    "HardSwish": "x * max(0, min(1, x / 6 + 0.5))",
}

BINARY = {
    "Add": "a + b",
    "Sub": "a - b",
    "Mul": "a * b",
    "Div": "a / b",
    "Pow": "pow(a, b)",
}

VARIADIC = {
    "Sum": " + ",
    "Max": "max",
    "Min": "min",
}


def broadcast_map(call, code: str, names: list, out_name: str = "y") -> dace.SDFG:
    """One SDFG with one map over the output; ``names`` bind the inputs in order."""
    sdfg = dace.SDFG("elementwise")
    state = sdfg.add_state()
    conns_in = [c for c in call.node.onnx_inputs if c]
    conn_out = call.output(0)
    for conn in conns_in + [conn_out]:
        desc = call._desc(conn)
        sdfg.add_array(conn, desc.shape, desc.dtype)
    out_shape = call.shape(conn_out)
    params = [f"i{k}" for k in range(len(out_shape))]
    ranges = {p: f"0:{n}" for p, n in zip(params, out_shape)}
    memlets_in = {}
    for name, conn in zip(names, conns_in):
        memlets_in[name] = dace.Memlet(f"{conn}[{_index(call.shape(conn), out_shape, params)}]")
    mapped_tasklet(state, call.op_type, ranges, memlets_in, f"{out_name} = {code}",
                             {out_name: dace.Memlet(f"{conn_out}[{', '.join(params)}]")})
    return sdfg


def _index(shape, out_shape, params) -> str:
    """Numpy broadcasting: align right, size-1 dims read index 0."""
    offset = len(out_shape) - len(shape)
    idx = []
    for k, n in enumerate(shape):
        out_n = out_shape[offset + k] if offset + k >= 0 else 1
        idx.append("0" if n == 1 and out_n != 1 else params[offset + k])
    return ", ".join(idx) or "0"


def _register_unary(op_type, template):
    @implements(op_type)
    def impl(call):
        return broadcast_map(call, template.format(**call.attrs), ["x"])


def _register_binary(op_type, code):
    @implements(op_type)
    def impl(call):
        return broadcast_map(call, code, ["a", "b"])


def _register_variadic(op_type, joiner):
    @implements(op_type)
    def impl(call):
        names = [f"v{k}" for k in range(len(call.inputs))]
        if joiner.strip() == "+":
            code = joiner.join(names)
        else:
            code = names[0]
            for n in names[1:]:
                code = f"{joiner}({code}, {n})"
        return broadcast_map(call, code, names)


for _op, _code in UNARY.items():
    _register_unary(_op, _code)
for _op, _code in BINARY.items():
    _register_binary(_op, _code)
for _op, _code in VARIADIC.items():
    _register_variadic(_op, _code)
