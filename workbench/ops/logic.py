"""Comparisons, boolean and bitwise logic, NaN/Inf tests and Where, as tasklet expressions.

Same conventions as ``elementwise.py``: ``x`` (unary) or ``a``/``b``
(binary) written to ``y``, with numpy broadcasting. Comparisons and tests
write the bool output the importer declared; C++ converts the result.
"""
from workbench.ops.elementwise import broadcast_map
from workbench.ops.registry import implements

BINARY = {
    "Equal": "a == b",
    "Less": "a < b",
    "LessOrEqual": "a <= b",
    "Greater": "a > b",
    "GreaterOrEqual": "a >= b",
    "And": "a and b",
    "Or": "a or b",
    "Xor": "a != b",
    "BitwiseAnd": "a & b",
    "BitwiseOr": "a | b",
    "BitwiseXor": "a ^ b",
}

UNARY = {
    "Not": "not x",
    "BitwiseNot": "~x",
    "IsNaN": "isnan(x)",
}

# IsInf by (detect_positive, detect_negative).
IS_INF = {
    (True, True): "isinf(x)",
    (True, False): "isinf(x) and x > 0",
    (False, True): "isinf(x) and x < 0",
    (False, False): "False",
}


def _register(op_type, code, names):
    @implements(op_type)
    def impl(call):
        return broadcast_map(call, code, names)


for _op, _code in BINARY.items():
    _register(_op, _code, ["a", "b"])
for _op, _code in UNARY.items():
    _register(_op, _code, ["x"])
_register("Where", "a if c else b", ["c", "a", "b"])


@implements("IsInf")
def is_inf(call):
    flags = (bool(call.attr("detect_positive", 1)), bool(call.attr("detect_negative", 1)))
    return broadcast_map(call, IS_INF[flags], ["x"])
