"""Integer and quantized linear algebra: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv,
and onnxruntime's QGemm (com.microsoft).

Each sums int32 products of zero-point-shifted integers with the MatMul or
Conv maps (linalg.matmul_sum, conv.conv_sum); quantized_gemm.py sums them by
float GEMM instead where that is exact. The QLinear ops then requantize every
sum: y = saturate(round_half_even(acc * scale) + y_zero_point), with
scale = x_scale * w_scale / y_scale as the spec's formula implies.
"""
import math
import re

import dace

from workbench.build.settings import transient_storage
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.conv import _depthwise_2d, conv_sum, depthwise_rows
from workbench.ops.linalg import bias_index, matmul_sum
from workbench.ops.quantize_linear import saturated
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet
from workbench.ops.simd import substitute
from workbench.ops.window import row_map


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


def shifted(value: str, zero_point: str) -> str:
    return f"(int({value}) - int({zero_point}))"


@implements("MatMulInteger")
def matmul_integer(call):
    """int32 Y = (A - a_zero_point) @ (B - b_zero_point), per row of A / column of B."""
    M, N = _rows_columns(call, 0, 1)
    az_reads, az = _per(call, 2, "az", "m", M)
    bz_reads, bz = _per(call, 3, "bz", "n", N)
    return matmul_sum(call, f"{shifted('x', az)} * {shifted('w', bz)}",
                      _texts({**az_reads, **bz_reads}))[0]


@implements("QLinearMatMul")
def qlinear_matmul(call):
    refuse_float16(call)
    M, N = _rows_columns(call, 0, 3)
    az_reads, az = _per(call, 2, "az", "m", M)
    bz_reads, bz = _per(call, 5, "bz", "n", N)
    product = f"{shifted('x', az)} * {shifted('w', bz)}"
    sdfg, state, acc = matmul_sum(call, product, _texts({**az_reads, **bz_reads}), dace.int32,
                                  b_pos=3)
    rank = len(sdfg.arrays[acc].shape)
    requantize(call, sdfg, state, acc, {1: (f"d{rank - 2}", M), 4: (f"d{rank - 1}", N)})
    return sdfg


@implements("ConvInteger")
def conv_integer(call):
    """int32 Y = sum (x - x_zero_point) * (w - w_zero_point); the pads hold x_zero_point."""
    xz = constant_zero_point(call, 2)
    wz_reads, wz = _per(call, 3, "wz", "m", call.shape(call.output(0))[1])
    return conv_sum(call, f"(int(v) - {xz}) * {shifted('f', wz)}", str(xz), wz_reads)[0]


@implements("QLinearConv")
def qlinear_conv(call):
    refuse_float16(call)
    channels = call.shape(call.output(0))[1]
    xz = constant_zero_point(call, 2)
    wz_reads, wz = _per(call, 5, "wz", "m", channels)
    if _depthwise_2d(call, w_pos=3):  # one vectorized int32 row loop per output row
        sdfg, state = connector_sdfg(call, "qlinear_conv_depthwise")
        acc, _ = sdfg.add_transient("acc", call.shape(call.output(0)), dace.int32,
                                    storage=transient_storage())
        depthwise_rows(call, sdfg, state, acc, w_pos=3, b_pos=8, x_zero=xz,
                       w_zero=(wz, wz_reads))
    else:
        sdfg, state, acc = conv_sum(call, f"(int(v) - {xz}) * {shifted('f', wz)}", str(xz),
                                    wz_reads, bias=call.input(8), acc_type=dace.int32, w_pos=3)
    requantize(call, sdfg, state, acc, {4: ("d1", channels)})
    return sdfg


def requantize(call, sdfg, state, acc: str, per: dict, bias: tuple = None, parts: int = 0,
                scales: tuple = (1, 4, 6, 7)):
    """Y = saturate(nearbyint(float32(acc + bias) * (sa * sb / sy)) + zy) in float32 (the
    inputs at positions ``scales``), as onnxruntime's MlasRequantizeOutput (a double
    product rounds differently near .5 ties; DaCe writes a tasklet's Python float() as C++
    float, dace.float32 says so plainly). ``acc`` holds int32 sums, or float ones of integers
    (a GEMM's; ``parts`` of them along its first dim, to add); Y is seen in its shape.
    ``per`` maps the positions of sa and sb to (index, extent): the index over acc's dims
    d0, d1, ... that their values per row/column/channel take. ``bias`` (memlet texts, code;
    see per_row) adds an int32 bias that acc does not hold yet. One vectorized row loop over
    acc's last dim per OpenMP iteration."""
    shape, row, inputs, codes, total = acc_rows(sdfg, acc, parts)
    params = [f"d{d}" for d in range(len(shape))]
    for pos, name in zip(scales, ("sa", "sb", "sy", "zy")):
        texts, codes[name] = per_row(call, pos, name, *(per.get(pos) or ("0", 1)), params[-1],
                                     shape[-1])
        inputs.update(texts)
    if bias is not None:
        inputs.update(bias[0])
        total, codes["b"] = f"{total} + b", bias[1]
    quantized = f"nearbyint(dace.float32({total}) * (sa * sb / sy)) + zy"
    expr = substitute(saturated(quantized, call.dtype(call.output(0))), codes)
    state = sdfg.add_state_after(state, "requantize")
    row_map(state, "requantize", {p: f"0:{n}" for p, n in zip(params[:-1], shape[:-1])},
            inputs, {"o": f"{call.output(0)}[{row}]"}, "o[j_]", expr, shape[-1], dace.float32)


def acc_rows(sdfg, acc: str, parts: int = 0):
    """(shape, row subset over d0.., memlet texts, codes, int sum) for a row loop reading
    the sums in ``acc``: one array, or ``parts`` along its first dim, added as int32."""
    shape = sdfg.arrays[acc].shape[1 if parts else 0:]
    row = ", ".join([f"d{d}" for d in range(len(shape) - 1)] + [f"0:{shape[-1]}"])
    names = [f"s{i}_" for i in range(parts)] if parts else ["s"]
    inputs = {n: f"{acc}[{f'{i}, ' if parts else ''}{row}]" for i, n in enumerate(names)}
    return (shape, row, inputs, {n: f"{n}[j_]" for n in names},
            " + ".join(f"int({n})" for n in names))


def per_row(call, position: int, name: str, index: str, extent: int, last: str, width: int):
    """(memlet texts, code) of a scale or zero point read in a row loop over ``last`` (of
    ``width``): one value, or ``name[j_]`` from a row when it varies along ``last``."""
    reads, code = _per(call, position, name, index, extent)
    texts = _texts(reads)
    along = re.compile(rf"(?<![\w.]){last}\b")
    if name in texts and along.search(texts[name]):
        if index != last:
            raise ValueError(f"{index}: a row loop over {last} reads rows, not {index}")
        texts[name], code = along.sub(f"0:{width}", texts[name]), f"{name}[j_]"
    return texts, code


def _rows_columns(call, a_pos: int, b_pos: int):
    a, b = call.shape(call.input(a_pos)), call.shape(call.input(b_pos))
    return (a[-2] if len(a) > 1 else 1), (b[-1] if len(b) > 1 else 1)


def constant_zero_point(call, position: int) -> int:
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
    az_reads, az = _per(call, 2, "az", "m", 1)
    bz_reads, bz = _per(call, 5, "bz", "n", N)
    sdfg, state = connector_sdfg(call, "qgemm")
    acc, _ = sdfg.add_transient("acc", (M, N), dace.int32)
    ranges = {"m": f"0:{M}", "n": f"0:{N}"}
    init = sdfg.add_state_before(state, "bias")
    start = ({"v": dace.Memlet(f"{bias}[{checked_bias_index(call, bias, M, N)}]")}, "c = v") \
        if bias is not None else ({}, "c = 0")
    parallel(mapped_tasklet(init, "bias", ranges, start[0], start[1],
                            {"c": dace.Memlet(f"{acc}[m, n]")}))
    mapped_reduction(state, "qgemm", ranges, {"k": f"0:{K}"}, {
        "x": dace.Memlet(f"{a}[m, k]"), "w": dace.Memlet(f"{b}[{b_at}]"), **az_reads,
        **bz_reads}, f"c = {shifted('x', az)} * {shifted('w', bz)}",
        {"c": dace.Memlet(f"{acc}[m, n]", wcr="lambda p, q: p + q")})
    requantize(call, sdfg, state, acc, {4: ("d1", N)}, scales=QGEMM_SCALES)
    return sdfg


# QGemm's a_scale, b_scale, y_scale and y_zero_point positions (QLinear ops': 1, 4, 6, 7)
QGEMM_SCALES = (1, 4, 7, 8)


def checked_bias_index(call, bias: str, M: int, N: int) -> str:
    """C's element for Y[m, n]: C broadcasts to (M, N) from the right, as Gemm's C does."""
    shape = call.shape(bias)
    if len(shape) > 2 or any(s not in (1, full) for s, full in zip(shape[::-1], (N, M))):
        raise call.fail(f"the bias of shape {shape} does not broadcast to ({M}, {N})")
    return bias_index(shape)
