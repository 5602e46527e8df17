"""Integer and quantized linear algebra: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv,
and onnxruntime's QGemm (com.microsoft).

Each sums int32 products of zero-point-shifted integers with the MatMul or
Conv maps (linalg.matmul_sum, conv.conv_sum); MatMulInteger also through a
float32 GEMM where that is exact (``matmul_integer_blas``). The QLinear ops then
requantize every sum: y = saturate(round_half_even(acc * scale) + y_zero_point),
with scale = x_scale * w_scale / y_scale as the spec's formula implies.
"""
import math

import dace
import numpy as np
from dace.libraries.blas import Gemm

from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.conv import conv_sum
from workbench.ops.linalg import _blas, _matmul_shapes, _wire, matmul_sum
from workbench.ops.quantize_linear import saturated
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype


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


# float32 represents every integer below 2**24 exactly, so a GEMM whose every partial
# sum stays below it adds without rounding, in any order, fused multiply-adds too
_EXACT_IN_FLOAT32 = 1 << 24


@implements("MatMulInteger", impl="blas")
def matmul_integer_blas(call):
    """MatMulInteger as sgemm on the zero-point-shifted operands, exact when
    K * max|A - a_zero_point| * max|B - b_zero_point| < 2**24 (K <= 258 for 8-bit types:
    every quantized transformer's MatMul of hidden size up to 256); else the int32 maps."""
    a, b, y = call.input(0), call.input(1), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b))
    rows = math.prod(pa) * M
    a_zero = call.input(2)
    per_row = a_zero is not None and math.prod(call.shape(a_zero)) != 1
    if (not all(n == 1 for n in pb) or per_row or 1 in (rows, K, N) or 0 in (rows, K, N)
            or K * _span(call.dtype(a)) * _span(call.dtype(b)) >= _EXACT_IN_FLOAT32):
        return matmul_integer(call)  # batched B, per-row zero points, or not exact
    impl = _blas(call)
    sdfg, state = connector_sdfg(call, "matmul_integer_gemm",
                                 {a: (rows, K), b: (K, N), y: (rows, N)})
    for name, shape in (("af", (rows, K)), ("bf", (K, N)), ("cf", (rows, N))):
        sdfg.add_transient(name, shape, dace.float32)
    for src, dst, position, (p, q), extents in ((a, "af", 2, ("r", "k"), (rows, K)),
                                                (b, "bf", 3, ("k", "n"), (K, N))):
        reads, z = _per(call, position, "z", "n", N)  # A's is one value (per_row above)
        parallel(mapped_tasklet(state, f"shift_{dst}", {p: f"0:{extents[0]}",
                                                         q: f"0:{extents[1]}"},
                                {"v": dace.Memlet(f"{src}[{p}, {q}]"), **reads},
                                f"o = {_shifted('v', z)}", {"o": dace.Memlet(f"{dst}[{p}, {q}]")}))
    state = sdfg.add_state_after(state, "gemm")
    node = Gemm("gemm", alpha=1, beta=0)
    node.implementation = impl
    state.add_node(node)
    _wire(sdfg, state, node, {"af": "_a", "bf": "_b"}, {"cf": "_c"})
    state = sdfg.add_state_after(state, "to_int32")
    parallel(mapped_tasklet(state, "to_int32", {"r": f"0:{rows}", "n": f"0:{N}"},
                            {"c": dace.Memlet("cf[r, n]")}, "o = c",
                            {"o": dace.Memlet(f"{y}[r, n]")}))
    return sdfg


def _span(dtype) -> int:
    """The largest |value - zero point| of an integer type."""
    info = np.iinfo(np_dtype(dtype))
    return int(info.max) - int(info.min)


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
                axes: dict):
    """Y = saturate(nearbyint(acc * scale) + zero_point); ``axes`` name the dims that
    per-row/column/channel reads index (``m``, ``n``) by position in acc's shape."""
    shape = sdfg.arrays[acc].shape
    params = [f"i{d}" for d in range(len(shape))]
    for name, dim in axes.items():
        params[dim] = name
    at = f"[{', '.join(params)}]"
    state = sdfg.add_state_after(state, "requantize")
    parallel(mapped_tasklet(state, "requantize", {p: f"0:{n}" for p, n in zip(params, shape)},
                            {"s": dace.Memlet(f"{acc}{at}"), **reads},
                            f"q = nearbyint(float(s) * ({scale})) + {zero_point}\n"
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


@implements("QGemm", domain="com.microsoft")
def qgemm(call):
    """onnxruntime's QGemm with a quantized output: Y = requantize(sum_k (A[m, k] - az) *
    (B'[k, n] - bz[n]) + C[m, n]), C an int32 bias at scale a_scale * b_scale. The bias
    starts the sum, so it is added exactly, as QLinearConv adds its bias."""
    refuse_float16(call)
    if call.attr("transA", 0) or float(call.attr("alpha", 1.0)) != 1.0:
        raise call.fail("only transA = 0 and alpha = 1 are supported")
    if call.input(7) is None:
        raise call.fail("a float output (no y_scale) is not supported")
    a, b, bias = call.input(0), call.input(3), call.input(6)
    (M, K), N = call.shape(a), call.shape(call.output(0))[1]
    b_at = "n, k" if call.attr("transB", 0) else "k, n"
    reads, codes = {}, {}
    for pos, name, index, extent in ((1, "sa", "m", 1), (2, "az", "m", 1), (4, "sb", "n", N),
                                     (5, "bz", "n", N), (7, "sy", "m", 1), (8, "yz", "m", 1)):
        r, codes[name] = _per(call, pos, name, index, extent)
        reads.update(r)
    sdfg, state = connector_sdfg(call, "qgemm")
    acc, _ = sdfg.add_transient("acc", (M, N), dace.int32)
    ranges = {"m": f"0:{M}", "n": f"0:{N}"}
    init = sdfg.add_state_before(state, "bias")
    start = ({"v": dace.Memlet(f"{bias}[{_bias_index(call, bias, M, N)}]")}, "c = v") \
        if bias is not None else ({}, "c = 0")
    parallel(mapped_tasklet(init, "bias", ranges, start[0], start[1],
                            {"c": dace.Memlet(f"{acc}[m, n]")}))
    sums = {k: v for k, v in reads.items() if k in ("az", "bz")}
    mapped_reduction(state, "qgemm", ranges, {"k": f"0:{K}"}, {
        "x": dace.Memlet(f"{a}[m, k]"), "w": dace.Memlet(f"{b}[{b_at}]"), **sums},
        f"c = {_shifted('x', codes['az'])} * {_shifted('w', codes['bz'])}",
        {"c": dace.Memlet(f"{acc}[m, n]", wcr="lambda p, q: p + q")})
    scales = {k: v for k, v in reads.items() if k not in sums}
    _requantize(call, sdfg, state, acc, f"{codes['sa']} * {codes['sb']} / {codes['sy']}",
                codes["yz"], scales, {"m": 0, "n": 1})
    return sdfg


def _bias_index(call, bias: str, M: int, N: int) -> str:
    """C's element for Y[m, n]: C broadcasts to (M, N) from the right, as Gemm's C does."""
    shape = call.shape(bias)
    if len(shape) > 2 or any(s not in (1, full) for s, full in zip(shape[::-1], (N, M))):
        raise call.fail(f"the bias of shape {shape} does not broadcast to ({M}, {N})")
    names = ["m", "n"][2 - len(shape):]
    return ", ".join("0" if s == 1 else p for s, p in zip(shape, names)) or "0"
