"""Quantized models: the (De)QuantizeLinear ops exactly as onnxruntime computes them, and
models quantized by onnxruntime's own tool verifying against it.

The op cases compare with ``rtol=0, atol=0``: a quantized value is an integer, and
onnxruntime's dequantization is the same single float product, so anything short of
equality is a wrong answer. The fixtures (``tests/exports/quantized_models.py``)
match onnxruntime at the default tolerance, with and without the ``auto`` recipe.
"""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_helpers import assert_matches_onnxruntime, single_node_model
from workbench.errors import UnsupportedCaseError

EXACT = {"rtol": 0.0, "atol": 0.0}


def _f32(*values):
    return np.array(values, np.float32)


def test_quantize_rounds_half_to_even_and_saturates():
    # x / 1 lands exactly on .5: C's round() would give 1, 3, -1, -3; the spec wants 0, 2, -0, -2
    x = _f32(0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e6, -1e6, 126.5, 127.5, -128.5)
    for zero_point in (np.array(0, np.int8), np.array(100, np.uint8)):
        model = single_node_model("QuantizeLinear", {"x": x},
                                  initializers={"s": np.array(1.0, np.float32),
                                                "z": zero_point})
        assert_matches_onnxruntime(model, {"x": x}, **EXACT)


def test_quantize_divides_rather_than_multiplying_by_the_reciprocal():
    # floats next to (k + 0.5) * s: for about 1 in 18 of them x / s and x * (1 / s) round
    # to different integers in float32, and the spec (and onnxruntime) divide
    s = np.float32(0.1)
    ties = ((np.arange(-3000, 3000) + 0.5) * s).astype(np.float32)
    x = np.concatenate([np.nextafter(ties, np.float32(np.inf)),
                        np.nextafter(ties, np.float32(-np.inf)), ties])
    assert (np.rint(x / s) != np.rint(x * (np.float32(1) / s))).sum() > 500
    model = single_node_model("QuantizeLinear", {"x": x},
                              initializers={"s": np.array(s), "z": np.array(0, np.int16)},
                              opset=21)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_quantize_dequantize_per_axis_every_integer_type(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4)) * 200).astype(np.float32)
    zero = np.array([info.min, 0 if info.min < 0 else 7, info.max], dtype)
    scales = _f32(0.5, 0.03, 2.0)
    init = {"s": scales, "z": zero}
    quantize = single_node_model("QuantizeLinear", {"x": x}, {"axis": -2}, initializers=init,
                                 opset=21)
    assert_matches_onnxruntime(quantize, {"x": x}, **EXACT)
    q = rng.integers(info.min, int(info.max) + 1, (2, 3, 4)).astype(dtype)
    dequantize = single_node_model("DequantizeLinear", {"x": q}, {"axis": 1}, initializers=init,
                                   opset=21)
    assert_matches_onnxruntime(dequantize, {"x": q}, **EXACT)


def test_blocked_quantization_both_ways():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 7)).astype(np.float32)  # 7 = blocks of 3, 3 and 1
    scales = rng.uniform(0.01, 0.05, (3, 3)).astype(np.float32)
    zero = rng.integers(-20, 20, (3, 3)).astype(np.int8)
    attrs = {"axis": 1, "block_size": 3}
    init = {"s": scales, "z": zero}
    quantize = single_node_model("QuantizeLinear", {"x": x}, attrs, initializers=init, opset=21)
    assert_matches_onnxruntime(quantize, {"x": x}, **EXACT)
    q = rng.integers(-128, 128, (3, 7)).astype(np.int8)
    dequantize = single_node_model("DequantizeLinear", {"x": q}, attrs, initializers=init,
                                   opset=21)
    assert_matches_onnxruntime(dequantize, {"x": q}, **EXACT)


def test_scale_and_zero_point_may_be_graph_inputs():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    feeds = {"x": x, "s": _f32(0.1, 0.2, 0.3, 0.4), "z": np.array([0, 1, 2, 3], np.uint8)}
    model = single_node_model("QuantizeLinear", feeds, {"axis": 0}, opset=19)
    assert_matches_onnxruntime(model, feeds, **EXACT)


@pytest.mark.parametrize("x", [
    np.zeros(5, np.float32),                                   # scale 1, as onnxruntime
    np.array([0.1, 0.7, 2.5, 3.9], np.float32),                # min is 0
    -np.array([0.1, 0.7, 2.5, 3.9], np.float32),               # max is 0
    np.array([[-1.0, 254.0], [0.5, -0.5]], np.float32),        # zero point near a .5 tie
], ids=["zeros", "positive", "negative", "tie"])
def test_dynamic_quantize_linear(x):
    model = single_node_model("DynamicQuantizeLinear", {"x": x},
                              outputs=("y", "y_scale", "y_zero_point"), opset=11)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


def test_dynamic_quantize_then_matmul_integer_as_quantize_dynamic_writes_it():
    """DynamicQuantizeLinear -> MatMulInteger (uint8 x int8, scalar zero points) -> Cast
    -> Mul: every MatMul of a quantize_dynamic model; weights in the reduced int8 range."""
    rng = np.random.default_rng(2)
    w = rng.integers(-64, 64, (32, 16)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("MatMulInteger", ["q", "w", "qz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["qs", "ws"], ["scale"]),
             helper.make_node("Mul", ["accf", "scale"], ["y"])]
    graph = helper.make_graph(
        nodes, "dynamic_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 16])],
        initializer=[numpy_helper.from_array(w, "w"),
                     numpy_helper.from_array(np.array(3, np.int8), "wz"),
                     numpy_helper.from_array(np.array(0.02, np.float32), "ws")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    x = (rng.standard_normal((2, 8, 32)) * 3).astype(np.float32)
    assert_matches_onnxruntime(model, {"x": x})


def test_float16_quantizes_through_float32():
    """A float16 x and scale are float32 inside the program (importer/half.py): exact, as
    float16 values are float32 ones."""
    x = (np.arange(-20, 20) * 0.37).astype(np.float16)
    model = single_node_model("QuantizeLinear", {"x": x},
                              initializers={"s": np.array(0.5, np.float16)}, opset=21)
    assert_matches_onnxruntime(model, {"x": x}, **EXACT)


@pytest.mark.parametrize("name, recipe", [
    ("resnet_qdq", None), ("resnet_qdq", "auto"), ("bert_dynamic", None),
    ("bert_dynamic", "auto"), ("bert_qdq", None),
    # 140 s (the auto recipe over 280 nodes); python -m tests.zoo covers it too
    pytest.param("bert_qdq", "auto", marks=pytest.mark.slow)])
def test_quantized_export_verifies(name, recipe):
    """onnxruntime's own quantization of a zoo CNN and transformer matches onnxruntime at
    the default tolerance (the float path between Q/DQ pairs rounds as its integer one)."""
    import workbench
    ws = workbench.open(f"zoo:{name}")
    if recipe:
        assert ws.optimize(recipe), f"the {recipe} recipe applied nothing to {name}"
    report = ws.verify()
    assert report.match, report.text()


@pytest.mark.parametrize("attrs, scale_shape", [({}, ()), ({"axis": 0}, (3,)),
                                                ({"axis": -1}, (7,)),
                                                ({"axis": 1, "block_size": 3}, (3, 3))])
def test_dequantize_numpy_folding_kernel_matches_onnxruntime(attrs, scale_shape):
    """The kernel constant folding can use for weights (onnx.reference has no
    DequantizeLinear before opset 19) equals onnxruntime bit for bit."""
    import onnxruntime as ort
    from workbench.ops.quantize_linear import dequantize_numpy
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (3, 7)).astype(np.int8)
    scale = rng.uniform(0.001, 0.1, scale_shape).astype(np.float32)
    zero = rng.integers(-10, 10, scale_shape).astype(np.int8)
    model = single_node_model("DequantizeLinear", {"x": x}, attrs,
                              initializers={"s": scale, "z": zero}, opset=21)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = dequantize_numpy(attrs, x, scale, zero)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


@pytest.mark.parametrize("k, parts", [(258, 1), (259, 2)])
def test_matmul_integer_through_float_gemm_is_exact_up_to_its_bound(k, parts):
    """The worst case for the float32 GEMM: every product is 255 * 255, so the sums reach
    k * 65025, exact below 2**24 (k <= 258); above it one sgemm per part of K, their sums
    added in int32 (quantized_gemm.py). numpy's int64 product is the oracle (onnxruntime's
    AVX2 u8s8 kernel saturates on such data)."""
    import workbench
    from onnx_helpers import onnx_ops
    a = np.full((2, 3, k), 255, np.uint8)
    a[0, 0, :7] = 0
    b = np.full((k, 4), -128, np.int8)
    zeros = {"az": np.array(0, np.uint8), "bz": np.array([127, 127, 127, 0], np.int8)}
    model = single_node_model("MatMulInteger", {"a": a}, initializers={"b": b, **zeros},
                              opset=17)
    ws = workbench.open(model)
    (node,) = onnx_ops(ws.sdfg)
    assert node.implementation == "blas"
    got = ws.run({"a": a})["y"]
    want = a.astype(np.int64) @ (b.astype(np.int64) - zeros["bz"].astype(np.int64))
    assert got.dtype == np.int32 and np.array_equal(got, want)
    source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
    assert source.count("cblas_sgemm(") == parts
