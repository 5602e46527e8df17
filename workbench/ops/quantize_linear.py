"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.

    QuantizeLinear    y = saturate(round_half_even(x / y_scale) + y_zero_point)
    DequantizeLinear  y = (x - x_zero_point) * x_scale
    DynamicQuantizeLinear: the scale and zero point of uint8 over [min(0, min x), max(0, max x)],
                      then QuantizeLinear with them

The scale and zero point are one value (per tensor), one per index of ``axis``
(per axis), or one per block of ``block_size`` indices along ``axis`` (blocked);
one map over ``x`` reads the one that covers each element (DynamicQuantizeLinear
first reduces x to its range, then runs that map). The division is a
real division, not a product with the reciprocal, and rounds with
``nearbyint`` (the default rounding mode: half to even), as the spec and
onnxruntime do. Integer element types only: float8, int4 and int2 are not
types the importer takes.
"""
import dace
import numpy as np

from workbench.ops.accumulate import parallel
from workbench.ops.reduce import Grouping, Reduction, add_stages, attr_axis
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype

_FLOATS = (dace.float32, dace.float64)


def saturated(code: str, dtype) -> str:
    """``code`` (a float) clamped to integer ``dtype``'s range: the one saturation of the
    quantizing ops here and in quantized.py."""
    info = np.iinfo(np_dtype(dtype))
    return f"min(max({code}, {float(info.min)}), {float(info.max)})"


def _scale_index(call, position: int, params: list) -> str:
    """The index into the scale (or zero point) at ``position`` for element ``params``
    of the input: per tensor, per axis or blocked, as the scale's shape says."""
    x_shape, shape = call.shape(call.input(0)), call.shape(call.input(position))
    rank = len(x_shape)
    size = int(np.prod(shape)) if shape else 1
    block = int(call.attr("block_size", 0) or 0)
    if block <= 0 and size == 1:
        return ", ".join("0" for _ in shape) or "0"
    axis = attr_axis(call, rank, 1) if rank > 1 else 0
    if not 0 <= axis < rank:
        raise call.fail(f"axis {call.attr('axis')} is out of range for rank {rank}")
    if block <= 0:
        if len(shape) != 1 or shape[0] != x_shape[axis]:
            raise call.fail(f"input {position} of shape {shape} is neither one value nor one "
                            f"per index of axis {axis} (of {x_shape[axis]})")
        return params[axis]
    expected = tuple(-(-n // block) if d == axis else n for d, n in enumerate(x_shape))
    if tuple(shape) != expected:
        raise call.fail(f"blocked input {position} has shape {shape}, not {expected} "
                        f"(block_size {block} along axis {axis})")
    return ", ".join(f"int_floor({p}, {block})" if d == axis else p
                     for d, p in enumerate(params))


def _elementwise(call, code: str, scale_pos: int, zero_pos: int):
    """One map over x reading its scale ``s`` and zero point ``z`` (0 when absent)."""
    x, y = call.input(0), call.output(0)
    sdfg, state = connector_sdfg(call, call.op_type.lower())
    shape = call.shape(x)
    if 0 in shape:
        return sdfg
    params = [f"i{d}" for d in range(len(shape))]  # the importer makes rank 0 a (1,)
    at = ", ".join(params)
    reads = {"x": dace.Memlet(f"{x}[{at}]")}
    for name, pos in (("s", scale_pos), ("z", zero_pos)):
        if call.input(pos) is not None:
            reads[name] = dace.Memlet(f"{call.input(pos)}[{_scale_index(call, pos, params)}]")
    if "z" not in reads:
        code = code.replace("int(z)", "0")
    ranges = {p: f"0:{n}" for p, n in zip(params, shape)}
    parallel(mapped_tasklet(state, call.op_type, ranges, reads, code,
                            {"o": dace.Memlet(f"{y}[{at}]")}))
    return sdfg


@implements("QuantizeLinear")
def quantize_linear(call):
    scale_type, out_type = call.dtype(call.input(1)), call.dtype(call.output(0))
    if scale_type not in _FLOATS or call.dtype(call.input(0)) not in _FLOATS + (dace.int32,):
        raise call.fail("x and y_scale must be float32 or float64 (float16 is not usable here)")
    precision = int(call.attr("precision", 0) or 0)
    if precision not in (0, 1, 11):
        raise call.fail(f"precision {precision} is not float32 or float64")
    if np_dtype(out_type).kind not in "iu":
        raise call.fail(f"output type {out_type} is not an integer type")
    # the connectors' own types divide in the scale's precision; float() is a double
    quotient = "nearbyint(float(x) / float(s))" if precision == 11 else "nearbyint(x / s)"
    return _elementwise(call, f"o = {saturated(f'{quotient} + int(z)', out_type)}", 1, 2)


@implements("DequantizeLinear")
def dequantize_linear(call):
    x_type, out_type = call.dtype(call.input(0)), call.dtype(call.output(0))
    if np_dtype(x_type).kind not in "iu" or out_type not in _FLOATS:
        raise call.fail(f"dequantizing {x_type} to {out_type} is not supported "
                      "(integer to float32/float64 only)")
    if call.dtype(call.input(1)) not in _FLOATS:
        raise call.fail("x_scale must be float32 or float64")
    # int() is an int64: int32 minus a zero point fits in it exactly
    widen = "float(s)" if out_type == dace.float64 else "s"
    return _elementwise(call, f"o = (int(x) - int(z)) * {widen}", 1, 2)


@implements("DynamicQuantizeLinear")
def dynamic_quantize_linear(call):
    """uint8 only (the spec's T2). The range always holds 0, so 0 is exactly representable.
    An all-zero x gets scale 1 (the spec's formula would divide 0 by 0), as onnxruntime's."""
    x, y, y_scale, y_zero = (call.input(0), call.output(0), call.output(1), call.output(2))
    if call.dtype(x) != dace.float32:
        raise call.fail("x must be float32")
    shape = call.shape(x)
    sdfg, state = connector_sdfg(call, "dynamicquantizelinear")
    grouping = Grouping(shape, frozenset(range(len(shape))))
    # min with 0 and max with 0 come for free from starting the accumulators at 0
    state, r = add_stages(sdfg, state, x, grouping,
                          [("lo", Reduction("0", "x", "min")), ("hi", Reduction("0", "x", "max"))])
    one = ", ".join("0" for _ in grouping.shape)
    state = sdfg.add_state_after(state, "scale")
    # connectors with a __ prefix cannot shadow an array (see mapped_tasklet)
    tasklet = state.add_tasklet(
        "scale", {"__lo", "__hi"}, {"__sc", "__zp"},
        "__sc = (__hi - __lo) / 255 if __hi > __lo else 1\n"
        f"__zp = nearbyint({saturated('-__lo / __sc', dace.uint8)})")
    for name in ("lo", "hi"):
        state.add_edge(state.add_read(r[name]), None, tasklet, f"__{name}",
                       dace.Memlet(f"{r[name]}[{one}]"))
    for conn, out in (("__sc", y_scale), ("__zp", y_zero)):
        at = ", ".join("0" for _ in call.shape(out))
        state.add_edge(tasklet, conn, state.add_write(out), None, dace.Memlet(f"{out}[{at}]"))
    if 0 in shape:
        return sdfg
    state = sdfg.add_state_after(state, "quantize")
    params = grouping.params()
    every = ", ".join(params)
    scalar = f"[{', '.join('0' for _ in call.shape(y_scale)) or '0'}]"
    code = f"o = {saturated('nearbyint(x / s) + int(z)', dace.uint8)}"
    ranges = {p: f"0:{n}" for p, n in zip(params, grouping.shape)}
    parallel(mapped_tasklet(state, "quantize", ranges,
                            {"x": dace.Memlet(f"{x}[{every}]"),
                             "s": dace.Memlet(f"{y_scale}{scalar}"),
                             "z": dace.Memlet(f"{y_zero}{scalar}")},
                            code, {"o": dace.Memlet(f"{y}[{every}]")}))
    return sdfg


def dequantize_numpy(attrs: dict, x, scale, zero_point=None) -> list:
    """DequantizeLinear on constants, for folding at import: ``onnx.reference`` (1.23) has
    no DequantizeLinear before opset 19, where quantization tools' weights sit. Same
    per tensor / per axis / blocked rules and float32 product as the kernel above."""
    x = np.asarray(x)
    scale = np.asarray(scale)
    axis = int(attrs.get("axis", 1)) % max(x.ndim, 1)
    block = int(attrs.get("block_size", 0) or 0)

    def spread(v):
        v = np.asarray(v)
        if block > 0:
            return np.repeat(v, block, axis=axis)[tuple(
                slice(0, n) if d == axis else slice(None) for d, n in enumerate(x.shape))]
        if v.size == 1 or x.ndim <= 1:
            return v.reshape(()) if v.size == 1 else v
        return v.reshape([n if d == axis else 1 for d, n in enumerate(x.shape)])

    shift = 0 if zero_point is None else spread(zero_point).astype(np.int64)
    shifted = x.astype(np.int64) - shift
    out_type = np.float64 if scale.dtype == np.float64 else np.float32
    return [(shifted.astype(out_type) * spread(scale).astype(out_type)).astype(out_type)]
