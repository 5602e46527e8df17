"""QLinearConv and QLinearMatMul through their 'blas' implementations (quantized_gemm.py):
real builds, outputs equal to onnxruntime's bit for bit.

Each test names the GEMM it expects (sgemm, dgemm, or none: the int32 maps) and
checks the generated code for it, so a case cannot pass on another route than the
one it is about. Several cases of one route share one build (``combine``).

onnxruntime's AVX2 kernels multiply uint8 by int8 with vpmaddubsw, which saturates
pairs of products at int16: for uint8 activations the int8 weights stay in the
7-bit range onnxruntime's own quantizer uses for them (reduce_range). Zero points
that differ per output channel (onnxruntime refuses them) are checked against
numpy's int64 sums, requantized in float32 as onnxruntime does.
"""
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from onnx_helpers import combine, onnx_ops, single_node_model

RNG = np.random.default_rng(17)


def _f32(*values):
    return np.array(values, np.float32)


def _ints(dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return RNG.integers(lo, hi + 1, shape).astype(dtype)


def _conv(name, x_shape, x_dtype, w, attrs, w_zero, per_channel=True, bias=None, x_zero=None):
    """A QLinearConv model reading ``{name}_x``; output ``{name}_y`` (uint8 or int8 as x)."""
    x_dtype = np.dtype(x_dtype)
    y_zero = np.array(128 if x_dtype == np.uint8 else -5, x_dtype)
    w_scale = _scales(w.shape[0] if per_channel else 1, w[0].size, w, 0.02, 0.11)
    x_zero = np.array(128 if x_dtype == np.uint8 else 2, x_dtype) if x_zero is None else x_zero
    init = {f"{name}_sx": np.array(0.02, np.float32), f"{name}_zx": x_zero,
            f"{name}_w": w, f"{name}_sw": w_scale, f"{name}_zw": w_zero,
            f"{name}_sy": np.array(0.11, np.float32), f"{name}_zy": y_zero}
    if bias is not None:
        init[f"{name}_b"] = bias
    return single_node_model("QLinearConv", {f"{name}_x": (x_shape, x_dtype)}, attrs,
                             outputs=(f"{name}_y",), initializers=init, opset=10,
                             name=name)


def _matmul(name, a_shape, a_dtype, b, b_zero, per_column=True, a_zero=None):
    """A QLinearMatMul model reading ``{name}_a``; output ``{name}_y``."""
    a_dtype = np.dtype(a_dtype)
    b_scale = _scales(b.shape[1] if per_column else 1, b.shape[0], b, 0.03, 0.7)
    zero = np.array(120 if a_dtype == np.uint8 else -3, a_dtype)
    a_zero = zero if a_zero is None else a_zero
    init = {f"{name}_sa": np.array(0.03, np.float32), f"{name}_za": a_zero, f"{name}_b": b,
            f"{name}_sb": b_scale, f"{name}_zb": b_zero,
            f"{name}_sy": np.array(0.7, np.float32), f"{name}_zy": zero}
    return single_node_model("QLinearMatMul", {f"{name}_a": (a_shape, a_dtype)},
                             outputs=(f"{name}_y",), initializers=init, opset=10, name=name)


def _feeds(model):
    from onnx import helper
    feeds = {}
    for vi in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = _ints(dtype, shape)
    return feeds


def _run_blas(model, feeds, gemm):
    """Our outputs, from the 'blas' implementation of every node, through ``gemm``; and the
    generated code."""
    import workbench
    ws = workbench.open(model)
    assert {n.implementation for n in onnx_ops(ws.sdfg)} == {"blas"}
    got = ws.run(feeds)
    source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
    for routine in ("cblas_sgemm", "cblas_dgemm"):
        assert (routine in source) == (routine == f"cblas_{gemm}"), routine
    return got, source


def _assert_matches_onnxruntime(model, gemm):
    feeds = _feeds(model)
    got, source = _run_blas(model, feeds, gemm)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, session.run(names, feeds)):
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert np.array_equal(got[name], want), \
            f"{name}: {np.count_nonzero(got[name] != want)} of {want.size} differ"
    return source


def _scales(count, k, w, x_scale, y_scale):
    """Weight scales (``count`` of them, 1 for per tensor) that spread the outputs over
    about +-60 steps around the zero point: sensitive to every off-by-one, rarely saturated.
    The sums of k products have a standard deviation near sqrt(k) * 74 * std(w) (74: that
    of uniform 8-bit activations)."""
    base = 30 * y_scale / (x_scale * np.sqrt(k) * 74 * np.std(w.astype(np.float64)))
    return (base * RNG.uniform(0.5, 1.5, count)).astype(np.float32)


def test_qlinear_conv_through_sgemm():
    """K * max|x - xz| * max|w - wz| < 2**24: 3x3 pad 1 stride 2, groups, per-channel
    scales, with and without bias, uint8 and int8 activations, uint8 weights."""
    models = [
        _conv("s2", (1, 16, 11, 11), np.uint8, _ints(np.int8, (8, 16, 3, 3), -64, 63),
              {"pads": [1, 1, 1, 1], "strides": [2, 2]}, np.zeros(8, np.int8),
              bias=_ints(np.int32, (8,), -5000, 5000)),
        _conv("groups", (2, 12, 7, 9), np.uint8, _ints(np.int8, (6, 4, 3, 3), -64, 63),
              {"pads": [1, 1, 1, 1], "group": 3}, np.array(0, np.int8), per_channel=False),
        _conv("s8", (1, 8, 9, 9), np.int8, _ints(np.int8, (5, 8, 3, 3)),
              {"pads": [1, 0, 1, 2], "strides": [1, 2]}, np.zeros(5, np.int8),
              bias=_ints(np.int32, (5,), -300, 300)),
        _conv("u8w", (1, 6, 8, 8), np.uint8, _ints(np.uint8, (4, 6, 3, 3)),
              {"pads": [1, 1, 1, 1]}, np.array(131, np.uint8), per_channel=False),
    ]
    _assert_matches_onnxruntime(combine(models), "sgemm")


def test_qlinear_conv_constant_weights_narrow_the_bound():
    """K = 128 * 9: int8 weights of any value would need dgemm (1152 * 128 * 128 >= 2**24);
    these (recorded at import, 3,456 values in [-9, 9]) keep the sums below 2**24."""
    model = _conv("narrow", (1, 128, 6, 6), np.uint8, _ints(np.int8, (3, 128, 3, 3), -9, 9),
                  {"pads": [1, 1, 1, 1]}, np.zeros(3, np.int8),
                  bias=_ints(np.int32, (3,), -9000, 9000))
    _assert_matches_onnxruntime(model, "sgemm")


def test_qlinear_conv_through_sgemm_parts():
    """K = 128 * 9 with weights too many to record (int8 range: 1152 * 128 * 128 >= 2**24):
    2 parts of 576; a 1x1 Conv of 2048 channels (2048 * 255 * 128 >= 2**24): 4 of 512
    (at most 514 products of 255 * 128 stay below 2**24); their sums added in int32."""
    models = [
        _conv("k1152", (1, 128, 8, 8), np.uint8, _ints(np.int8, (8, 128, 3, 3), -64, 63),
              {"pads": [1, 1, 1, 1], "strides": [2, 2]}, np.zeros(8, np.int8),
              bias=_ints(np.int32, (8,), -20000, 20000)),
        _conv("k2048", (1, 2048, 3, 3), np.uint8, _ints(np.int8, (16, 2048, 1, 1), -64, 63),
              {}, np.array(0, np.int8), per_channel=False, x_zero=np.array(0, np.uint8)),
    ]
    source = _assert_matches_onnxruntime(combine(models), "sgemm")
    assert source.count("cblas_sgemm(") == 6


def test_qlinear_conv_through_dgemm():
    """uint8 activations and weights, zero points 0: a 1x1 Conv of 4200 channels would take
    17 parts of K (258 products of 255 * 255 at most per float32 sum): one dgemm instead."""
    model = _conv("k4200", (1, 4200, 2, 3), np.uint8, _ints(np.uint8, (4, 4200, 1, 1)), {},
                  np.array(0, np.uint8), x_zero=np.array(0, np.uint8))
    _assert_matches_onnxruntime(model, "dgemm")


def test_qlinear_conv_depthwise_runs_on_int32_rows():
    """One output channel per group (DaCe's Gemm refuses the size-1 dim): no GEMM, an int32
    row loop per output row (conv.depthwise_rows); int8 and uint8 activations, a weight zero
    point, with and without bias."""
    models = [
        _conv("dw", (1, 8, 10, 10), np.uint8, _ints(np.int8, (8, 1, 3, 3), -64, 63),
              {"pads": [1, 1, 1, 1], "group": 8, "strides": [2, 2]}, np.full(8, 3, np.int8),
              bias=_ints(np.int32, (8,), -500, 500)),
        _conv("dws8", (2, 6, 9, 12), np.int8, _ints(np.int8, (6, 1, 5, 5)),
              {"pads": [2, 1, 2, 3], "group": 6}, np.array(0, np.int8), per_channel=False),
    ]
    source = _assert_matches_onnxruntime(combine(models), None)
    assert source.count("out[j_] += f *") == 2


@pytest.mark.parametrize("gemm, in_channels, weights", [
    ("sgemm", 16, (-100, 100)),    # the constant weights bound the sums: one sgemm
    ("sgemm", 160, (-128, 127)),   # 1440 * 128 * 140 >= 2**24: 2 parts of K
    ("dgemm", 2000, (-128, 127))])  # 18000 taps: 20 parts of 936, more than 16
def test_qlinear_conv_zero_points_per_output_channel(gemm, in_channels, weights):
    """Different weight zero points per output channel (onnxruntime refuses them): equal to
    numpy's int64 sums plus bias, requantized in float32 as onnxruntime (MLAS) does."""
    m = 6
    x = _ints(np.uint8, (1, in_channels, 6, 6))
    w = _ints(np.int8, (m, in_channels, 3, 3), *weights)
    w_zero = np.array([0, 5, -7, 12, -3, 1], np.int8)
    bias = _ints(np.int32, (m,), -4000, 4000)
    model = _conv("zp", x.shape, np.uint8, w, {"pads": [1, 1, 1, 1]}, w_zero, bias=bias)
    w_scale = next(numpy_helper.to_array(t) for t in model.graph.initializer
                   if t.name == "zp_sw")
    got = _run_blas(model, {"zp_x": x}, gemm)[0]["zp_y"]
    xs = np.pad(x.astype(np.int64) - 128, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ws = w.astype(np.int64) - w_zero.astype(np.int64)[:, None, None, None]
    acc = np.zeros((1, m, 6, 6), np.int64)
    for ky in range(3):
        for kx in range(3):
            acc += np.einsum("nchw,mc->nmhw", xs[:, :, ky:ky + 6, kx:kx + 6], ws[:, :, ky, kx])
    acc += bias[None, :, None, None]
    scale = (np.float32(0.02) * w_scale / np.float32(0.11)).astype(np.float32)
    product = acc.astype(np.int32).astype(np.float32) * scale[None, :, None, None]
    want = np.clip(np.rint(product) + 128, 0, 255).astype(np.uint8)
    assert np.array_equal(got, want)


def test_qlinear_matmul_through_sgemm():
    """2-D and batched 3-D A, per-tensor and per-column B scales, uint8 and int8."""
    models = [
        _matmul("mm2d", (9, 40), np.uint8, _ints(np.int8, (40, 12), -64, 63),
                np.array(0, np.int8), per_column=False),
        _matmul("mm3d", (2, 7, 33), np.uint8, _ints(np.uint8, (33, 10)),
                np.array(140, np.uint8)),
        _matmul("mms8", (3, 5, 64), np.int8, _ints(np.int8, (64, 6)),
                np.zeros(6, np.int8)),
    ]
    _assert_matches_onnxruntime(combine(models), "sgemm")


def test_qlinear_matmul_through_sgemm_parts():
    """K = 4608 rows of B, too many to record (int8 range: 4608 * 135 * 128 >= 2**24):
    sgemms over 5 parts of K (970 * 135 * 128 < 2**24), added in int32."""
    models = [
        _matmul("big2d", (5, 4608), np.uint8, _ints(np.int8, (4608, 3), -64, 63),
                np.array(0, np.int8), per_column=False),
        _matmul("big3d", (2, 3, 4608), np.uint8, _ints(np.int8, (4608, 4), -64, 63),
                np.zeros(4, np.int8)),
    ]
    source = _assert_matches_onnxruntime(combine(models), "sgemm")
    assert source.count("cblas_sgemm(") == 10


def test_qlinear_matmul_through_dgemm():
    """uint8 by uint8, zero points 0: 258 products per float32 sum at most, so K = 4608
    would take 18 parts, more than the 16 the plan allows: one dgemm."""
    b = _ints(np.uint8, (4608, 5))
    model = _matmul("u8u8", (7, 4608), np.uint8, b, np.array(0, np.uint8),
                    a_zero=np.array(0, np.uint8))
    _assert_matches_onnxruntime(model, "dgemm")


def test_qlinear_conv_requantizes_in_float32_as_onnxruntime():
    """onnxruntime requantizes in float32: float(acc) * (x_scale * w_scale / y_scale), then
    rounds half to even. Sums (here the bias, up to 1e8) that put acc * scale next to a .5
    tie round differently in double for about 150 of these outputs; all must equal."""
    m = 64
    sx, sy = np.float32(0.02), np.float32(0.11)
    sw = (RNG.uniform(0.9, 1.1, m) * 3e-7 * sy / sx).astype(np.float32)
    scale = (sx * sw / sy).astype(np.float32)
    ties = np.rint((np.arange(m) - 32 + 0.5) / scale.astype(np.float64)).astype(np.int32)
    x = np.broadcast_to(np.arange(256, dtype=np.uint8).reshape(16, 16), (1, m, 16, 16)).copy()
    acc = ties.astype(np.int64)[:, None, None] + (x[0].astype(np.int64) - 128)
    in_double = np.rint(acc * scale.astype(np.float64)[:, None, None])
    in_float = np.rint(acc.astype(np.float32) * scale[:, None, None])
    assert np.count_nonzero(in_double != in_float) > 100
    init = {"sx": np.array(sx), "zx": np.array(128, np.uint8),
            "w": np.eye(m, dtype=np.int8).reshape(m, m, 1, 1), "sw": sw,
            "zw": np.zeros(m, np.int8), "sy": np.array(sy), "zy": np.array(128, np.uint8),
            "b": ties}
    model = single_node_model("QLinearConv", {"x": x}, outputs=("y",), initializers=init,
                              opset=10)
    got = _run_blas(model, {"x": x}, "sgemm")[0]["y"]
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(want[0], np.clip(in_float + 128, 0, 255).astype(np.uint8))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("gemm, k", [("sgemm", 40), ("dgemm", 1000)])
def test_qlinear_matmul_batched_both_operands(gemm, k):
    """Both operands activations with the same batch (attention's Q @ K^T): one batched
    GEMM. B is no constant: its uint8 range and zero point bound the sums, k * 135 * 131
    (below 2**24 up to k = 948)."""
    name = f"qk{k}"
    b_zero = np.array(131, np.uint8)
    init = {f"{name}_sa": np.array(0.03, np.float32), f"{name}_za": np.array(120, np.uint8),
            f"{name}_sb": _scales(1, k, _ints(np.uint8, (k, 64)), 0.03, 0.7),
            f"{name}_zb": b_zero, f"{name}_sy": np.array(0.7, np.float32),
            f"{name}_zy": np.array(128, np.uint8)}
    inputs = {f"{name}_a": ((2, 3, 5, k), np.uint8), f"{name}_b": ((2, 3, k, 7), np.uint8)}
    order = ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]
    model = single_node_model("QLinearMatMul", inputs, outputs=(f"{name}_y",),
                              initializers=init, node_inputs=[f"{name}_{n}" for n in order],
                              opset=10, name=name)
    _assert_matches_onnxruntime(model, gemm)


@pytest.mark.parametrize("gemm, k, trans_b", [("sgemm", 96, 1), ("sgemm", 96, 0),
                                               ("sgemm", 1536, 1)])
def test_qgemm_through_sgemm(gemm, k, trans_b):
    """onnxruntime's QGemm (com.microsoft; QLinearFusion makes it of a QDQ Gemm): B stored
    transposed or not, per-column scales, an int32 bias C per column; K = 1536 takes two
    parts of K (1536 * 135 * 128 >= 2**24)."""
    n, name = 10, f"qgemm{k}_{trans_b}"
    b = _ints(np.int8, (n, k) if trans_b else (k, n), -64, 63)
    init = {f"{name}_sa": np.array(0.03, np.float32), f"{name}_za": np.array(120, np.uint8),
            f"{name}_b": b, f"{name}_sb": _scales(n, k, b, 0.03, 0.7),
            f"{name}_zb": np.zeros(n, np.int8),
            f"{name}_c": _ints(np.int32, (n,), -3000, 3000),
            f"{name}_sy": np.array(0.7, np.float32), f"{name}_zy": np.array(128, np.uint8)}
    model = single_node_model("QGemm", {f"{name}_a": ((6, k), np.uint8)}, {"transB": trans_b},
                              outputs={f"{name}_y": ((6, n), np.uint8)}, initializers=init,
                              opset=13, name=name, domain="com.microsoft")
    source = _assert_matches_onnxruntime(model, gemm)
    assert source.count("cblas_sgemm(") == (2 if k == 1536 else 1)
