"""IntegerDataMovement: an operator that moves or selects values between a
DequantizeLinear and a QuantizeLinear of the same scale and zero point runs on the
8-bit values, with results equal to onnxruntime's bit for bit, and is refused where
the round trip would change a value (another scale, zero point or type)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_helpers import assert_matches_onnxruntime, graph_model, op_counts

EXACT = {"rtol": 0.0, "atol": 0.0}
RNG = np.random.default_rng(5)


def _model(op, x_shape, attrs=None, extra=None, out_scale=0.05, out_zero=3,
           integer=TensorProto.UINT8, out_integer=None):
    """x -> Q -> DQ -> ``op``(., *extra) -> Q -> y, ``extra`` named initializers."""
    np_type = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
    zero = np.array(3, np_type[integer])
    out_type = out_integer or integer
    inits = {"s": np.array(0.05, np.float32), "z": zero,
             "so": np.array(out_scale, np.float32),
             "zo": np.array(out_zero, np_type[out_type]), **(extra or {})}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node(op, ["xf", *(extra or {})], ["yf"], **(attrs or {})),
             helper.make_node("QuantizeLinear", ["yf", "so", "zo"], ["y"])]
    return graph_model(nodes, {"x": (x_shape, "float32")}, inits, ["y"])


def _moved(model, x_shape):
    feeds = {"x": RNG.standard_normal(x_shape, np.float32) * 4}
    ws = assert_matches_onnxruntime(model, feeds, **EXACT)
    ws.optimize({"name": "m", "steps": [{"transformation": "IntegerDataMovement",
                                         "all": True}]})
    report = ws.verify(feeds, **EXACT)
    assert report.match, report.text()
    return ws


@pytest.mark.parametrize("op, x_shape, attrs, extra, integer", [
    ("Transpose", (2, 3, 4), {"perm": [2, 0, 1]}, None, TensorProto.UINT8),
    ("Reshape", (2, 3, 4), None, {"shape": np.array([6, 4], np.int64)}, TensorProto.INT8),
    ("MaxPool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                               "pads": [1, 1, 1, 1]}, None, TensorProto.INT8),
    ("Gather", (5, 4), {"axis": 0}, {"i": np.array([[4, 0], [2, 2]], np.int64)},
     TensorProto.UINT8),
    ("Flatten", (2, 3, 2, 2), {"axis": 1}, None, TensorProto.INT8),
])
def test_moves_8_bit_values_bit_exact(op, x_shape, attrs, extra, integer):
    ws = _moved(_model(op, x_shape, attrs, extra, integer=integer), x_shape)
    ops = op_counts(ws)
    # the input's QuantizeLinear stays; the pair around the operator went
    assert ops[op] == 1 and ops["DequantizeLinear"] == 0 and ops["QuantizeLinear"] == 1
    assert "xf" not in ws.sdfg.arrays and "yf" not in ws.sdfg.arrays


@pytest.mark.parametrize("why, changes", [
    ("another output scale rescales every value", {"out_scale": 0.1}),
    ("another output zero point shifts every value", {"out_zero": 4}),
    ("another output type saturates elsewhere", {"out_integer": TensorProto.INT8}),
])
def test_refused_where_the_round_trip_changes_values(why, changes):
    import workbench
    ws = workbench.open(_model("Transpose", (2, 3), {"perm": [1, 0]}, **changes))
    assert not [m for m in ws.transformations(predict=False)
                if m.transformation == "IntegerDataMovement"], why


def test_an_operator_computing_new_values_is_not_a_move():
    """AveragePool averages: its result needs the float round trip (not in MOVES)."""
    import workbench
    ws = workbench.open(_model("AveragePool", (1, 1, 4, 4), {"kernel_shape": [2, 2]}))
    assert not [m for m in ws.transformations(predict=False)
                if m.transformation == "IntegerDataMovement"]


@pytest.mark.parametrize("name, moved", [("resnet_qdq", {"MaxPool": 1, "Flatten": 1}),
                                         ("bert_qdq", {"Reshape": 16, "Transpose": 8,
                                                       "Gather": 2})])
def test_quantized_exports_move_8_bit_values(name, moved):
    """Every move between a same-scale pair in onnxruntime's QDQ exports is found: the
    embedding Gathers read the int8 tables, the head reshapes move bytes, not floats."""
    import workbench
    ws = workbench.open(f"zoo:{name}")
    found = [m for m in ws.transformations(predict=False)
             if m.transformation == "IntegerDataMovement"]
    assert len(found) == sum(moved.values())
    before, quantizes = ws.data_movement().moved_bytes, op_counts(ws)["QuantizeLinear"]
    ws.optimize({"name": "m", "steps": [{"transformation": "IntegerDataMovement",
                                         "all": True}]})
    assert op_counts(ws)["QuantizeLinear"] == quantizes - len(found)
    assert ws.data_movement().moved_bytes < before
