"""QLinearFusion: DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear as one integer
operator, equal to onnxruntime bit for bit, and refused where the integer sum would
not be the float route's (a bias at another scale, alpha, a product read twice).

The small models quantize a float input, run the quantized core and return its 8-bit
result, so a one-step difference anywhere shows; onnxruntime fuses the same pattern.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_helpers import assert_matches_onnxruntime, graph_model, op_counts

EXACT = {"rtol": 0.0, "atol": 0.0}
RNG = np.random.default_rng(11)


def _qdq_model(core: str, x_shape, w, attrs=None, bias=None, per_channel_axis=None,
               x_type=TensorProto.UINT8, bias_scale_factor=1.0, also_output=None):
    """x (float) -> Q -> DQ -> ``core``(., DQ(w)[, DQ(bias)]) -> Q -> y (8-bit)."""
    x_np = np.uint8 if x_type == TensorProto.UINT8 else np.int8
    x_zero = np.array(3 if x_type == TensorProto.UINT8 else -2, x_np)
    x_scale = np.array(0.05, np.float32)
    channels = w.shape[per_channel_axis] if per_channel_axis is not None else 1
    w_scale = RNG.uniform(0.002, 0.01, channels).astype(np.float32)
    w_zero = np.zeros(channels, np.int8)
    if per_channel_axis is None:
        w_scale, w_zero = w_scale[0], w_zero[0]
    inits = {"xs": x_scale, "xz": x_zero, "wq": w, "ws": w_scale, "wz": w_zero,
             "ys": np.array(0.1, np.float32), "yz": np.array(-5, np.int8)}
    w_attrs = {"axis": per_channel_axis} if per_channel_axis is not None else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], **w_attrs)]
    core_inputs = ["xf", "wf"]
    if bias is not None:
        inits["bq"] = bias
        inits["bs"] = (x_scale * np.atleast_1d(w_scale) * bias_scale_factor).astype(np.float32)
        if inits["bs"].size == 1:
            inits["bs"] = inits["bs"].reshape(())
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"],
                                      **({"axis": 0} if inits["bs"].ndim else {})))
        core_inputs.append("bf")
    nodes += [helper.make_node(core, core_inputs, ["yf"], **(attrs or {})),
              helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    return graph_model(nodes, {"x": (x_shape, "float32")}, inits, ["y", *(also_output or ())])


def _weights(shape):
    return RNG.integers(-64, 64, shape).astype(np.int8)  # onnxruntime's reduce_range


def _fused(model, x_shape):
    """The session after every QLinearFusion match, checked exact against onnxruntime."""
    ws = assert_matches_onnxruntime(model, {"x": RNG.standard_normal(x_shape, np.float32) * 3},
                                    **EXACT)
    ws.optimize({"name": "q", "steps": [{"transformation": "QLinearFusion", "all": True}]})
    report = ws.verify({"x": RNG.standard_normal(x_shape, np.float32) * 3}, **EXACT)
    assert report.match, report.text()
    return ws


@pytest.mark.parametrize("attrs, w_shape, per_channel, bias, x_type", [
    ({"pads": [1, 1, 1, 1]}, (8, 4, 3, 3), 0, True, TensorProto.UINT8),
    ({"strides": [2, 2], "group": 2}, (6, 2, 3, 3), None, False, TensorProto.INT8),
    ({"group": 4, "pads": [1, 1, 1, 1]}, (4, 1, 3, 3), 0, True, TensorProto.INT8),
])
def test_conv_becomes_qlinearconv_bit_exact(attrs, w_shape, per_channel, bias, x_type):
    x_shape = (1, 4, 9, 9)
    b = RNG.integers(-300, 300, w_shape[0]).astype(np.int32) if bias else None
    ws = _fused(_qdq_model("Conv", x_shape, _weights(w_shape), attrs, b, per_channel, x_type),
                x_shape)
    ops = op_counts(ws)
    assert ops["QLinearConv"] == 1 and ops["Conv"] == 0
    # only the input's QuantizeLinear is left: both DequantizeLinear and the float tensors went
    assert ops["DequantizeLinear"] == 0 and ops["QuantizeLinear"] == 1
    assert not {"xf", "wf", "yf"} & set(ws.sdfg.arrays)


@pytest.mark.parametrize("x_shape, w_shape, per_channel", [
    ((2, 5, 16), (16, 12), 1), ((5, 16), (16, 12), None)])
def test_matmul_becomes_qlinearmatmul_bit_exact(x_shape, w_shape, per_channel):
    ws = _fused(_qdq_model("MatMul", x_shape, _weights(w_shape), per_channel_axis=per_channel),
                x_shape)
    assert op_counts(ws)["QLinearMatMul"] == 1 and op_counts(ws)["MatMul"] == 0


@pytest.mark.parametrize("trans_b, per_channel", [(1, 0), (0, None), (0, 1)])
def test_gemm_with_bias_becomes_qgemm_bit_exact(trans_b, per_channel):
    w_shape = (12, 16) if trans_b else (16, 12)
    bias = RNG.integers(-500, 500, 12).astype(np.int32)
    ws = _fused(_qdq_model("Gemm", (5, 16), _weights(w_shape), {"transB": trans_b}, bias,
                           per_channel), (5, 16))
    assert op_counts(ws)["QGemm"] == 1 and op_counts(ws)["Gemm"] == 0


def _matches(model) -> list:
    import workbench
    ws = workbench.open(model)
    return ws, [m for m in ws.transformations(predict=False)
                if m.transformation == "QLinearFusion"]


@pytest.mark.parametrize("why, model", [
    ("a bias at another scale than x_scale * w_scale would not add to the int32 sum as it is",
     lambda: _qdq_model("Gemm", (5, 16), _weights((16, 12)), bias=np.ones(12, np.int32),
                        bias_scale_factor=1.01)),
    ("alpha scales the product",
     lambda: _qdq_model("Gemm", (5, 16), _weights((16, 12)), {"alpha": 0.5})),
    ("the float product is read by another consumer (a graph output)",
     lambda: _qdq_model("MatMul", (5, 16), _weights((16, 12)), also_output=["yf"])),
    ("a per-channel scale on the wrong axis",
     lambda: _qdq_model("MatMul", (5, 16), _weights((16, 12)), per_channel_axis=0)),
])
def test_refused_where_the_integer_kernel_would_compute_something_else(why, model):
    _, found = _matches(model())
    assert found == [], why


def test_a_dequantized_input_read_elsewhere_stays_for_its_other_reader():
    """xf is a graph output too: the core reads xq directly, the DequantizeLinear stays."""
    model = _qdq_model("MatMul", (5, 16), _weights((16, 12)), also_output=["xf"])
    ws, found = _matches(model)
    assert len(found) == 1
    ws.apply(found[0])
    assert op_counts(ws)["DequantizeLinear"] == 1 and op_counts(ws)["QLinearMatMul"] == 1
    report = ws.verify({"x": RNG.standard_normal((5, 16), np.float32)}, **EXACT)
    assert report.match, report.text()


@pytest.mark.parametrize("name, integer_ops", [
    ("resnet_qdq", {"QLinearConv": 12, "QGemm": 1}),
    ("bert_qdq", {"QLinearMatMul": 12, "QGemm": 5})])
def test_quantized_exports_keep_8_bit_weights_and_fuse_every_core(name, integer_ops):
    """onnxruntime's QDQ models: the import keeps the int8 weights (no float32 copies), and
    every Conv, MatMul and Gemm becomes an integer operator, cutting the bytes moved.
    (test_quantized_models builds and verifies them through the recipes.)"""
    import dace
    import workbench
    ws = workbench.open(f"zoo:{name}")
    int8_weights = sum(d.total_size for d in ws.sdfg.arrays.values()
                       if not d.transient and d.dtype == dace.int8)
    assert int8_weights > 0.5 * ws.summary()["parameters"]
    before = ws.data_movement().moved_bytes
    ws.optimize({"name": "q", "steps": [{"transformation": "QLinearFusion", "all": True}]})
    ops = op_counts(ws)
    assert {k: ops[k] for k in integer_ops} == integer_ops
    assert ops["Conv"] == ops["MatMul"] == ops["Gemm"] == 0
    assert ws.data_movement().moved_bytes < 0.7 * before
