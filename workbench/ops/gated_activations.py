"""Swish and SwiGLU: the sigmoid-gated activations, one element-wise map each.

Swish(x) = x * sigmoid(alpha x); SwiGLU(a, b) = Swish(a) * b, with ``a`` and
``b`` of one shape (the spec applies no broadcasting). Both go through
``broadcast_map``, so they fuse like any other element-wise op.
"""
from workbench.ops.elementwise import broadcast_map
from workbench.ops.index_maps import literal
from workbench.ops.registry import implements, np_dtype


def _swish(x: str, alpha) -> str:
    return f"{x} / (1 + exp(-({literal(float(alpha))}) * {x}))"


def _floating(call):
    for conn in call.inputs:
        if np_dtype(call.dtype(conn)).kind != "f":
            raise call.fail(f"{call.op_type} is defined for floating-point tensors only")


@implements("Swish")
def swish(call):
    _floating(call)
    return broadcast_map(call, _swish("x", call.attr("alpha", 1.0)), ["x"])


@implements("SwiGLU")
def swiglu(call):
    _floating(call)
    a, b = call.input(0), call.input(1)
    if call.shape(a) != call.shape(b):
        raise call.fail(f"inputs of shapes {list(call.shape(a))} and {list(call.shape(b))}: "
                        "SwiGLU takes two tensors of one shape (no broadcasting)")
    return broadcast_map(call, f"({_swish('a', call.attr('alpha', 1.0))}) * b", ["a", "b"])
