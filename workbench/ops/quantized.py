"""Integer and quantized linear algebra: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Each sums int32 products of zero-point-shifted integers with the MatMul or
Conv maps (linalg.matmul_sum, conv.conv_sum); quantized_gemm.py sums them by
float GEMM instead where that is exact. The QLinear ops then requantize every
sum: y = saturate(round_half_even(acc * scale) + y_zero_point), with
scale = x_scale * w_scale / y_scale as the spec's formula implies.
"""
import math

import dace

from workbench.ops.accumulate import parallel
from workbench.ops.conv import conv_sum
from workbench.ops.linalg import matmul_sum
from workbench.ops.quantize_linear import saturated
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import implements, mapped_tasklet


def _per(call, position: int, name: str, index: str, extent: int):
    """(read memlets, code) for a scale or zero point: one value, or one per ``index``."""
    conn = call.input(position)
    if conn is None:
        return {}, "0"
    size = math.prod(call.shape(conn))
    if size == 1:
        return {name: dace.Memlet(f"{conn}[{', '.join('0' * len(call.shape(conn)))}]")}, name
    if size != extent or max(call.shape(conn)) != size:
        raise call.fail(f"input {position} of shape {call.shape(conn)} is neither per tensor "
                        f"nor per {index} (of {extent})")
    zeros = ["0"] * len(call.shape(conn))
    zeros[call.shape(conn).index(size)] = index
    return {name: dace.Memlet(f"{conn}[{', '.join(zeros)}]")}, name


def _shifted(value: str, zero_point: str) -> str:
    return f"(int({value}) - int({zero_point}))"


@implements("MatMulInteger")
def matmul_integer(call):
    """int32 Y = (A - a_zero_point) @ (B - b_zero_point), per row of A / column of B."""
    M, N = _rows_columns(call, 0, 1)
    az_reads, az = _per(call, 2, "az", "m", M)
    bz_reads, bz = _per(call, 3, "bz", "n", N)
    return matmul_sum(call, f"{_shifted('x', az)} * {_shifted('w', bz)}",
                      _texts({**az_reads, **bz_reads}))[0]


@implements("QLinearMatMul")
def qlinear_matmul(call):
    refuse_float16(call)
    M, N = _rows_columns(call, 0, 3)
    reads, codes = {}, {}
    for pos, name, index, extent in ((1, "sa", "m", M), (2, "az", "m", M), (4, "sb", "n", N),
                                     (5, "bz", "n", N), (6, "sy", "m", 1), (7, "yz", "m", 1)):
        r, codes[name] = _per(call, pos, name, index, extent)
        reads.update(r)
    product = f"{_shifted('x', codes['az'])} * {_shifted('w', codes['bz'])}"
    sums = {k: v for k, v in reads.items() if k in ("az", "bz")}
    sdfg, state, acc = matmul_sum(call, product, _texts(sums), dace.int32, b_pos=3)
    scales = {k: v for k, v in reads.items() if k not in sums}
    _requantize(call, sdfg, state, acc, f"{codes['sa']} * {codes['sb']} / {codes['sy']}",
                codes["yz"], scales, {"m": -2, "n": -1})
    return sdfg


@implements("ConvInteger")
def conv_integer(call):
    """int32 Y = sum (x - x_zero_point) * (w - w_zero_point); the pads hold x_zero_point."""
    xz = _constant_zero_point(call, 2)
    wz_reads, wz = _per(call, 3, "wz", "m", call.shape(call.output(0))[1])
    return conv_sum(call, f"(int(v) - {xz}) * {_shifted('f', wz)}", str(xz), wz_reads)[0]


@implements("QLinearConv")
def qlinear_conv(call):
    refuse_float16(call)
    channels = call.shape(call.output(0))[1]
    xz = _constant_zero_point(call, 2)
    wz_reads, wz = _per(call, 5, "wz", "m", channels)
    reads, codes = {}, {}
    for pos, name, extent in ((1, "sx", 1), (4, "sw", channels), (6, "sy", 1), (7, "yz", 1)):
        r, codes[name] = _per(call, pos, name, "m", extent)
        reads.update(r)
    sdfg, state, acc = conv_sum(call, f"(int(v) - {xz}) * {_shifted('f', wz)}", str(xz),
                                wz_reads, bias=call.input(8), acc_type=dace.int32, w_pos=3)
    _requantize(call, sdfg, state, acc, f"{codes['sx']} * {codes['sw']} / {codes['sy']}",
                codes["yz"], reads, {"m": 1})
    return sdfg


def _requantize(call, sdfg, state, acc: str, scale: str, zero_point: str, reads: dict,
                axes: dict, bias: str = None):
    """Y = saturate(nearbyint(float32(acc + bias) * scale) + zero_point) in float32, as
    onnxruntime's MlasRequantizeOutput (a double product rounds differently near .5 ties;
    DaCe writes a tasklet's Python float() as C++ float, dace.float32 says so plainly).
    ``acc`` holds int32 sums, or float ones of integers (a GEMM's); ``bias`` (memlet text)
    adds int32. ``axes`` name the dims that per-row/column/channel reads (and ``bias``)
    index (``m``, ``n``, ``g``) by position in acc's shape."""
    shape = sdfg.arrays[acc].shape
    params = [f"i{d}" for d in range(len(shape))]
    for name, dim in axes.items():
        params[dim] = name
    at = f"[{', '.join(params)}]"
    total = "int(s)"
    if bias is not None:
        reads, total = {**reads, "b": dace.Memlet(bias)}, "int(s) + b"
    state = sdfg.add_state_after(state, "requantize")
    parallel(mapped_tasklet(state, "requantize", {p: f"0:{n}" for p, n in zip(params, shape)},
                            {"s": dace.Memlet(f"{acc}{at}"), **reads},
                            f"q = nearbyint(dace.float32({total}) * ({scale})) + {zero_point}\n"
                            f"o = {saturated('q', call.dtype(call.output(0)))}",
                            {"o": dace.Memlet(f"{call.output(0)}{at}")}))


def _rows_columns(call, a_pos: int, b_pos: int):
    a, b = call.shape(call.input(a_pos)), call.shape(call.input(b_pos))
    return (a[-2] if len(a) > 1 else 1), (b[-1] if len(b) > 1 else 1)


def _constant_zero_point(call, position: int) -> int:
    """A zero point the padding must hold, so it is needed at build time."""
    if call.input(position) is None:
        return 0
    value = call.require_const(position, "zero point").ravel()
    if value.size != 1:
        raise call.fail(f"input {position}: a per-channel input zero point is not supported")
    return int(value[0])


def _texts(memlets: dict) -> dict:
    return {name: str(m.data) + f"[{m.subset}]" for name, m in memlets.items()}
