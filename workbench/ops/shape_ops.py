"""Tensors made from shapes, attributes and positions rather than from input data.

Shape, Size and Constant are usually folded away at import; they run here
when their result is a graph output or folding is off. Their values (and
NonZero's, for a constant input) are known at build time and compiled in.
Range, EyeLike and Trilu compute each element from its position.
"""
import math

import dace
import numpy as np

from workbench.ops.index_maps import (check_shape, element_map, literal, op_sdfg, params, size_of,
                                      write_values)
from workbench.ops.registry import connector_sdfg, implements, np_dtype
from workbench.ops.symbolic_sizes import cpp_size


def _known(call, values):
    """An SDFG that writes ``values`` (cast to the output's dtype) to output 0."""
    y = call.output(0)
    sdfg, state = connector_sdfg(call, call.op_type.lower())
    values = np.asarray(values, dtype=np_dtype(call.dtype(y)))
    if values.size != size_of(call.shape(y)):
        raise call.fail(f"{values.size} values for an output of shape {call.shape(y)}")
    write_values(state, y, values)
    return sdfg


def _sized(call, values):
    """An SDFG that writes ``values``, some of them symbolic sizes, to output 0 on each
    call (a program whose sizes are symbols, ``workbench.importer.symbolic``)."""
    y = call.output(0)
    sdfg, state = connector_sdfg(call, call.op_type.lower())
    target = (lambda i: "__out") if len(values) == 1 else (lambda i: f"__out[{i}]")
    # no C cast: DaCe may read a one-value tasklet as Python (scalar-to-symbol promotion)
    code = "\n".join(f"{target(i)} = {cpp_size(v)};" for i, v in enumerate(values))
    tasklet = state.add_tasklet("sizes", {}, {"__out"}, code, language=dace.Language.CPP)
    state.add_edge(tasklet, "__out", state.add_write(y), None,
                   dace.Memlet.from_array(y, sdfg.arrays[y]))
    return sdfg


@implements("Shape")
def shape(call):
    dims = call.shape(call.input(0))
    values = dims[slice(call.attr("start", 0), call.attr("end"))]
    if len(values) != size_of(call.shape(call.output(0))):
        values = ()  # a 0-d input, stored as shape (1,): its shape is empty
    if any(not isinstance(v, int) for v in values):
        return _sized(call, values)
    return _known(call, values)


@implements("Size")
def size(call):
    count = size_of(call.shape(call.input(0)))
    return _known(call, count) if isinstance(count, int) else _sized(call, [count])


def attribute_tensor(value) -> np.ndarray:
    """A TENSOR attribute as the importer records it (JSON) -> numpy."""
    return np.array(value["values"], dtype=value["__tensor__"]).reshape(value["shape"])


_CONSTANT_KINDS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


@implements("Constant")
def constant(call):
    if "value" in call.attrs:
        return _known(call, attribute_tensor(call.attr("value")))
    for name, dtype in _CONSTANT_KINDS.items():
        if name in call.attrs:
            return _known(call, np.array(call.attr(name), dtype=dtype))
    raise call.fail(f"attribute {', '.join(call.attrs) or '(none)'} is not supported "
                    f"(strings and sparse tensors have no SDFG array type)")


@implements("NonZero")
def non_zero(call):
    """The positions are known only when the input is: a constant input."""
    value = call.const(0)
    if value is None:
        raise call.fail("the number of nonzeros decides the output shape; the input must be "
                        "a constant known at import")
    return _known(call, np.array(np.nonzero(np.atleast_1d(value)), dtype=np.int64))


@implements("ConstantOfShape")
def constant_of_shape(call):
    y = call.output(0)
    value = call.attr("value")
    fill = attribute_tensor(value).ravel()[0] if value else 0.0
    sdfg, state = op_sdfg(call, "constant_of_shape")
    element_map(state, "fill", y, call.shape(y), literal(fill))
    return sdfg


@implements("Range")
def range_(call):
    """Y[i] = start + i * delta; the length (from limit) was fixed at import."""
    start, delta, y = call.input(0), call.input(2), call.output(0)
    bounds = [call.const(k) for k in range(3)]
    if all(b is not None for b in bounds):
        first, limit, step = (b.item() for b in bounds)
        check_shape(call, y, (max(math.ceil((limit - first) / step), 0),))
    sdfg, state = op_sdfg(call, "range")
    element_map(state, "range", y, call.shape(y), "s + i0 * d",
                {"s": dace.Memlet(f"{start}[0]"), "d": dace.Memlet(f"{delta}[0]")})
    return sdfg


@implements("EyeLike")
def eye_like(call):
    y = call.output(0)
    sdfg, state = op_sdfg(call, "eye_like")
    element_map(state, "eye", y, call.shape(y), f"1 if i1 - i0 == {call.attr('k', 0)} else 0")
    return sdfg


@implements("Trilu")
def trilu(call):
    """Keep the elements on and above (upper) or below (lower) diagonal k, zero the rest."""
    x, k, y = call.input(0), call.input(1), call.output(0)
    shape = call.shape(y)
    row, col = params(len(shape))[-2:]
    keep = ">=" if call.attr("upper", 1) else "<="
    reads = {"v": dace.Memlet(f"{x}[{', '.join(params(len(shape)))}]")}
    if k:
        reads["k"] = dace.Memlet(f"{k}[0]")
    sdfg, state = op_sdfg(call, "trilu")
    element_map(state, "trilu", y, shape, f"v if {col} - {row} {keep} {'k' if k else 0} else 0",
                reads)
    return sdfg
