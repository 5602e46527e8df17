"""FillIntoScatter: a scatter onto one value everywhere writes the value itself. Checked
against onnxruntime (duplicate indices under a reduction, a non-zero fill, both scatter
kinds), by the bytes it saves, by its refusals, and in a training program's embedding
gradient after ``auto``."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform
from workbench.ops.node import OnnxOp

NAME = "FillIntoScatter"


def _scatters_model():
    """y = ScatterND(zeros(640, 8), rows, x, add); z = ScatterElements(1.5 everywhere
    (64, 80), cols, u, axis 1); w = ScatterND(v, rows, x, add): data is an input."""
    rows = np.array([[3], [7], [3], [639], [0], [7], [100], [3]], np.int64)  # duplicates
    cols = np.tile(np.array([[0, 79, 5, 6]], np.int64), (64, 1))  # no duplicates: no reduction
    inits = {"shape": np.array([640, 8], np.int64), "rows": rows, "cols": cols,
             "one": np.array([1.5], np.float32), "eshape": np.array([64, 80], np.int64)}
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="Zeros",
                              value=numpy_helper.from_array(np.array([0], np.float32))),
             helper.make_node("ScatterND", ["zeros", "rows", "x"], ["y"], name="SND",
                              reduction="add"),
             helper.make_node("Expand", ["one", "eshape"], ["ones"], name="Fill"),
             helper.make_node("ScatterElements", ["ones", "cols", "u"], ["z"], name="SE",
                              axis=1),
             helper.make_node("ScatterND", ["v", "rows", "x"], ["w"], name="Plain",
                              reduction="add")]
    f = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    graph = helper.make_graph(nodes, "g", [f("x", [8, 8]), f("u", [64, 4]), f("v", [640, 8])],
                              [f("y", [640, 8]), f("z", [64, 80]), f("w", [640, 8])],
                              [numpy_helper.from_array(a, k) for k, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _op_types(ws) -> list:
    return sorted(n.op_type for n, _ in ws.sdfg.all_nodes_recursive() if isinstance(n, OnnxOp))


def test_scatters_onto_fills_match_onnxruntime_and_move_less():
    ws = workbench.open(_scatters_model())
    found = transform.find_matches(transform.get(NAME), ws.sdfg)
    assert sorted(m.description for m in found) == [
        "SE onto Fill (1.5 in 'ones')", "SND onto Zeros (0.0 in 'zeros')"]
    refused = {r.node: r.reason for r in transform.refusals(transform.get(NAME), ws.sdfg)}
    assert any("Plain" in node and "not the output of a fill" in reason
               for node, reason in refused.items())
    before = ws.data_movement().moved_bytes
    for match in found:
        predicted = ws.predict(match).delta_bytes
        ws.apply(match)
        assert predicted < 0
    # each fill's tensor was written once and read once, and the fills read their shapes
    # (2 int64 each) and Expand its value: all gone
    assert before - ws.data_movement().moved_bytes == 2 * 4 * (640 * 8 + 64 * 80) + 16 + 16 + 4
    assert _op_types(ws) == ["ScatterElementsOnFill", "ScatterND", "ScatterNDOnFill"]
    assert not {"zeros", "ones"} & set(ws.sdfg.arrays)
    report = ws.verify()
    assert report.match, report.text()


def _embedding_model():
    """y = Gather(table (700, 8), ids): a training program's gradient of the table is a
    scatter-add onto 5,600 zeros (more than ConstantFolding stores)."""
    table = np.random.default_rng(0).standard_normal((700, 8)).astype(np.float32)
    node = helper.make_node("Gather", ["table", "ids"], ["y"], name="Embed")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6, 8])],
        [numpy_helper.from_array(table, "table")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_embedding_gradient_after_auto_is_one_scatter_onto_zeros():
    tr = workbench.open(_embedding_model()).training(loss="mse", optimizer="sgd")
    assert "ConstantOfShape" in _op_types(tr)
    untuned_peak = tr.memory().peak_live_bytes
    tr.optimize("auto")
    assert NAME in [s["transformation"] for s in tr.history]
    ops = _op_types(tr)
    assert "ScatterNDOnFill" in ops and "ConstantOfShape" not in ops
    # the zeros became neither a weight (ConstantFolding leaves fills) nor a transient
    assert tr.memory().peak_live_bytes < untuned_peak
    report = tr.verify()
    assert report.match, report.text()
