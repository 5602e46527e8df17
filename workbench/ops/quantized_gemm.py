"""MatMulInteger, QLinearMatMul, QGemm and QLinearConv as float BLAS GEMMs of the
zero-point-shifted integers (im2col first for the Conv), then int32 and requantized.

Exact, not approximate: a float type represents every integer below 2**p (p = 24
for float32, 53 for float64), so a GEMM whose every partial sum stays below it adds
integers without rounding, in any order, fused multiply-adds too. The partial sums
are bounded by K * max|a - a_zero_point| * max|b - b_zero_point| (the spans: from the
dtypes and zero points, or the values of small constant weights). sgemm below 2**24;
else sgemms over parts of K short enough, their results added in int32 (8-bit: at
least 258 products per part, so K = 576 to 2304 takes 2 to 9 parts); else dgemm (8-bit
products are below 2**16, so K up to 2**37). What the GEMMs cannot do (size-1 dims,
which DaCe's Gemm refuses; A and B batched differently; per-row zero points of A)
runs on the int32 kernels of quantized.py.
"""
import math

import dace
import numpy as np
from dace.libraries.blas import BatchedMatMul, Gemm

from workbench.build.settings import transient_storage
from workbench.ops.conv import im2col_gemms
from workbench.ops.linalg import _blas, _matmul_shapes, wire
from workbench.ops.quantized import (QGEMM_SCALES, acc_rows, checked_bias_index,
                                     constant_zero_point, matmul_integer, per_row, qgemm,
                                     qlinear_conv, qlinear_matmul, requantize, shifted)
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, np_dtype
from workbench.ops.simd import substitute
from workbench.ops.window import row_map


@implements("MatMulInteger", impl="blas")
def matmul_integer_blas(call):
    """int32 Y = (A - a_zero_point) @ (B - b_zero_point) by exact float GEMMs."""
    made = _shifted_matmul(call, "matmul_integer_gemm", 1, 2, 3)
    if made is None:
        return matmul_integer(call)
    sdfg, state, acc, parts = made
    shape, row, inputs, codes, total = acc_rows(sdfg, acc, parts)
    state = sdfg.add_state_after(state, "to_int32")
    row_map(state, "to_int32", {f"d{d}": f"0:{n}" for d, n in enumerate(shape[:-1])}, inputs,
            {"o": f"{call.output(0)}[{row}]"}, "o[j_]", substitute(total, codes), shape[-1],
            dace.int32)
    return sdfg


@implements("QLinearMatMul", impl="blas")
def qlinear_matmul_blas(call):
    """QLinearMatMul by exact float GEMMs, then requantized (b_scale per tensor or column)."""
    refuse_float16(call)
    per_tensor_a = all(call.input(p) is None or math.prod(call.shape(call.input(p))) == 1
                       for p in (1, 2))
    made = _shifted_matmul(call, "qlinear_matmul_gemm", 3, 2, 5) if per_tensor_a else None
    if made is None:
        return qlinear_matmul(call)
    sdfg, state, acc, parts = made
    shape = sdfg.arrays[acc].shape
    requantize(call, sdfg, state, acc, {4: (f"d{len(shape) - 1 - bool(parts)}", shape[-1])},
                parts=parts)
    return sdfg


@implements("QGemm", impl="blas", domain="com.microsoft")
def qgemm_blas(call):
    """onnxruntime's QGemm by exact float GEMMs (B transposed or not), + its int32 bias C,
    requantized."""
    if (call.attr("transA", 0) or float(call.attr("alpha", 1.0)) != 1.0
            or call.input(7) is None):
        return qgemm(call)  # which says why it refuses
    refuse_float16(call)
    made = _shifted_matmul(call, "qgemm_gemm", 3, 2, 5, trans_b=bool(call.attr("transB", 0)))
    if made is None:
        return qgemm(call)
    sdfg, state, acc, parts = made
    M, N = call.shape(call.output(0))
    bias = None
    if call.input(6) is not None:  # C broadcasts to (M, N) from the right
        index = checked_bias_index(call, call.input(6), M, N).split(", ")
        row = ", ".join({"m": "d0", "n": f"0:{N}"}.get(i, i) for i in index)
        bias = {"b": f"{call.input(6)}[{row}]"}, "b[j_]" if "n" in index else "b"
    requantize(call, sdfg, state, acc, {4: ("d1", N)}, bias=bias, parts=parts,
                scales=QGEMM_SCALES)
    return sdfg


@implements("QLinearConv", impl="blas")
def qlinear_conv_blas(call):
    """QLinearConv: im2col of X - x_zero_point (the pads hold x_zero_point: 0 once shifted),
    exact float GEMMs per (image, group) with W - w_zero_point, then + bias, requantized."""
    refuse_float16(call)
    w, b, y = call.input(3), call.input(8), call.output(0)
    ws, ys = call.shape(w), call.shape(y)
    group = call.attr("group", 1)
    channels, mpg = ys[1], ys[1] // group
    taps, pixels = ws[1] * math.prod(ws[2:]), math.prod(ys[2:])
    xz = constant_zero_point(call, 2)
    ftype, parts = _gemm_plan(taps, _span(call, 0, 2), _span(call, 3, 5))
    # DaCe's Gemm refuses size-1 dims: depthwise (one output channel per group), 1x1 outputs
    if 1 in (mpg, taps, pixels) or 0 in ys or ftype is None:
        return qlinear_conv(call)
    impl = _blas(call)
    sdfg, state = connector_sdfg(call, "qlinear_conv_gemm", {
        w: (group, mpg, taps), y: (ys[0], group, mpg, pixels)})
    sdfg.add_transient("w_shifted", (group, mpg, taps), ftype, storage=transient_storage())
    sdfg.add_transient("acc", ((len(parts),) if parts else ()) + (ys[0], group, mpg, pixels),
                       ftype, storage=transient_storage())
    _shift_rows(call, state, w, "w_shifted", (group, mpg, taps), 5,
                (f"d0 * {mpg} + d1", channels))
    state = sdfg.add_state_after(state, "gemms")
    im2col_gemms(call, sdfg, state, ftype, impl, w_pos=3, w="w_shifted", y="acc",
                 fill=str(xz), value=f"int(v) - ({xz})", parts=parts)
    channel = (f"d1 * {mpg} + d2", channels)
    bias = per_row(call, 8, "b", *channel, "d3", pixels) if b else None
    requantize(call, sdfg, state, "acc", {4: channel}, bias=bias, parts=len(parts or ()))
    return sdfg


def _shifted_matmul(call, name: str, b_pos: int, az_pos: int, bz_pos: int,
                    trans_b: bool = False):
    """(sdfg, state, acc, parts): acc = (A - az) @ (B - bz) by one float GEMM over A's rows
    (its batch folded in), or by ``parts`` of them over parts of K (acc[part], to add), or
    one batched GEMM when A and B carry the same batch (attention's Q @ K^T); Y is seen in
    acc's shape (a part's). ``trans_b``: B is stored (N, K) (QGemm's transB). None where
    the GEMMs cannot be exact or DaCe's Gemm cannot take them (the caller then runs the
    int32 maps)."""
    a, b, y = call.input(0), call.input(b_pos), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b)[::-1] if trans_b
                                     else call.shape(b))
    batch, rows = (math.prod(pb), M) if any(n != 1 for n in pb) else ((), math.prod(pa) * M)
    a_zero = call.input(az_pos)
    zero_per_row = a_zero is not None and math.prod(call.shape(a_zero)) != 1
    if (batch and pa != pb) or zero_per_row or 1 in (rows, K, N) or 0 in pa + pb + (M, K, N):
        return None  # mixed broadcasting; size-1 dims, which DaCe's Gemm/BatchedMatMul refuse
    ftype, parts = _gemm_plan(K, _span(call, 0, az_pos), _span(call, b_pos, bz_pos),
                              split=not batch)
    if ftype is None:
        return None
    impl = _blas(call)
    lead = (batch,) if batch else ()
    shapes = {"a_shifted": lead + (rows, K), "b_shifted": lead + ((N, K) if trans_b else (K, N)),
              "acc": lead + (rows, N)}
    sdfg, state = connector_sdfg(call, name, {a: shapes["a_shifted"], b: shapes["b_shifted"],
                                              y: shapes["acc"]})
    if parts:
        shapes["acc"] = (len(parts), rows, N)
    for arr, shape in shapes.items():
        sdfg.add_transient(arr, shape, ftype, storage=transient_storage())
    column = f"d{len(lead) + (0 if trans_b else 1)}"  # B's dim of N
    _shift_rows(call, state, a, "a_shifted", shapes["a_shifted"], az_pos, ("0", 1))
    _shift_rows(call, state, b, "b_shifted", shapes["b_shifted"], bz_pos, (column, N))
    state = sdfg.add_state_after(state, "gemm")
    if batch:
        node = BatchedMatMul("bmm")
        node.implementation = impl
        state.add_node(node)
        wire(sdfg, state, node, {"a_shifted": "_a", "b_shifted": "_b"}, {"acc": "_c"})
        return sdfg, state, "acc", 0
    reads = (state.add_read("a_shifted"), state.add_read("b_shifted"))
    write = state.add_write("acc")
    for part, (k0, k1) in enumerate(parts or [(0, K)]):
        node = Gemm(f"gemm{part or ''}", alpha=1, beta=0, transB=trans_b)
        node.implementation = impl
        b_part = f"0:{N}, {k0}:{k1}" if trans_b else f"{k0}:{k1}, 0:{N}"
        for read, conn, subset in zip(reads, ("_a", "_b"), (f"a_shifted[0:{rows}, {k0}:{k1}]",
                                                          f"b_shifted[{b_part}]")):
            state.add_edge(read, None, node, conn, dace.Memlet(subset))
        state.add_edge(node, "_c", write, None, dace.Memlet(
            f"acc[{f'{part}, ' if parts else ''}0:{rows}, 0:{N}]"))
    return sdfg, state, "acc", len(parts or ())


def _shift_rows(call, state, src: str, dst: str, shape: tuple, zero_pos: int, zero_at: tuple):
    """dst = src - its zero point (input ``zero_pos``; one value, or one per (index, extent)
    ``zero_at``, an index over the dims d0, d1, ...), one vectorized loop per last-dim row."""
    params = [f"d{d}" for d in range(len(shape))]
    texts, zero = per_row(call, zero_pos, "z", *zero_at, params[-1], shape[-1])
    at = ", ".join(params[:-1] + [f"0:{shape[-1]}"])
    code = substitute(shifted("v", "z"), {"v": "v[j_]", "z": zero})
    row_map(state, f"shift_{src}", {p: f"0:{n}" for p, n in zip(params[:-1], shape[:-1])},
            {"v": f"{src}[{at}]", **texts}, {"o": f"{dst}[{at}]"}, "o[j_]", code,
            shape[-1], dace.float32)


# sgemms over parts of K: at least _MIN_PART products each (shorter GEMMs run poorly), at
# most _MAX_PARTS of them (each writes its own sums); else one dgemm. Not tuned: ResNet and
# BERT layers take 1 to 5 parts (tests/bench_quantized_kernels.py).
_MIN_PART, _MAX_PARTS = 64, 16


def _gemm_plan(k: int, span_a: int, span_b: int, split: bool = True):
    """(float type, parts) for GEMMs that sum k products of integers up to span_a and
    span_b in magnitude exactly: float32 where k products stay below 2**24; else float32
    GEMMs over parts of K (ranges, ``split`` permitting) whose int32 results are added after;
    else float64. (None, None) when not even float64 is exact (then only int32 maps are)."""
    product = max(span_a * span_b, 1)
    most = ((1 << 24) - 1) // product  # products that one float32 sum takes exactly
    if k <= most:
        return dace.float32, None
    count = -(-k // most)
    if split and most >= _MIN_PART and count <= _MAX_PARTS:
        size = -(-k // count)  # balanced: no part longer than ``most``
        return dace.float32, [(b, min(b + size, k)) for b in range(0, k, size)]
    if k * product < 1 << 53:
        return dace.float64, None
    return None, None


def _span(call, value_pos: int, zero_pos: int) -> int:
    """An upper bound of |v - zero point| over input ``value_pos``: from its values and
    zero points where they are recorded constants (small weights), else their dtype's range."""
    info = np.iinfo(np_dtype(call.dtype(call.input(value_pos))))
    lo, hi = int(info.min), int(info.max)
    value = call.const(value_pos)
    if value is not None and value.size:
        lo, hi = int(value.min()), int(value.max())
    zlo = zhi = 0
    if call.input(zero_pos) is not None:
        zero = call.const(zero_pos)
        zlo, zhi = (int(zero.min()), int(zero.max())) if zero is not None and zero.size \
            else (int(info.min), int(info.max))
    return max(hi - zlo, zhi - lo, 0)
