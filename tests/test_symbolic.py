"""Symbolic dims kept symbolic (issue 30, item 1): one build runs at every size.

Every model here is imported with a named dim kept as a symbol
(``workbench.open(model, symbolic=[...])``), built once, and checked against
onnxruntime (which takes the model with the dim left symbolic) at several sizes.
What cannot be one program for every size is refused by name.
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import workbench
from workbench.importer.symbolic import NotSymbolic


def _symbolic_batch(model: str, path):
    """The bundled ``model`` with the first dim of its inputs and outputs named 'batch'."""
    m = onnx.load(str(workbench.resolve_model(model)))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    del m.graph.value_info[:]
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("model,symbol,shapes,sizes", [
    ("mlp", "batch", {}, (1, 4, 37)),
    ("zoo:resnet", "batch", {}, (1, 3)),
    ("zoo:bert", "batch", {"sequence": 16}, (1, 3)),
])
def test_one_build_matches_onnxruntime_at_every_size(model, symbol, shapes, sizes, tmp_path):
    source = _symbolic_batch(model, tmp_path / "m.onnx") if model == "mlp" else model
    ws = workbench.open(source, symbolic=[symbol], input_shapes=shapes)
    assert ws.symbols == {symbol: 1}
    assert any(str(d) == symbol for d in ws.inputs[0].shape)
    seconds = set()
    for size in sizes:
        report = ws.verify(sizes={symbol: size})
        assert report.match, report
        assert report.outputs[0].shape[0] == size
        seconds.add(report.timings["build_s"])
    assert len(seconds) == 1   # the one build served every size


def test_inputs_of_other_sizes_run_and_mismatched_ones_are_refused(tmp_path):
    ws = workbench.open(_symbolic_batch("mlp", tmp_path / "m.onnx"), symbolic=["batch"],
                        input_shapes={"batch": 2})
    assert ws.symbols == {"batch": 2}
    x = np.random.default_rng(0).standard_normal((5, 784)).astype(np.float32)
    out = ws.run({"input": x})["output"]
    assert out.shape == (5, 10)
    from workbench.errors import BadInputError
    with pytest.raises(BadInputError, match="784"):
        ws.run({"input": x[:, :700]})
    # the figures are taken at the default size: twice the rows, more bytes
    small = ws.data_movement().moved_bytes
    wider = workbench.open(_symbolic_batch("mlp", tmp_path / "m2.onnx"), symbolic=["batch"],
                           input_shapes={"batch": 4}).data_movement().moved_bytes
    assert wider > small > 0


def _graph(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_what_cannot_stay_symbolic_is_refused_by_name(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])
    # an outer product flattened: n*n elements, not a whole multiple of n plus a constant
    square = _graph([
        helper.make_node("Unsqueeze", ["x", "a1"], ["col"]),
        helper.make_node("Unsqueeze", ["x", "a0"], ["row"]),
        helper.make_node("Mul", ["col", "row"], ["outer"]),
        helper.make_node("Flatten", ["outer"], ["flat"], axis=0),
        helper.make_node("Squeeze", ["flat", "a0"], ["y"])],
        [x], [y], [helper.make_tensor("a0", TensorProto.INT64, [1], [0]),
                   helper.make_tensor("a1", TensorProto.INT64, [1], [1])])
    with pytest.raises(NotSymbolic, match="linearly"):
        workbench.open(square, symbolic=["n"])
    # the size read as a value by an operator that computes with it
    scaled = _graph([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "f"], ["y"])], [x], [y])
    with pytest.raises(NotSymbolic, match="Mul"):
        workbench.open(scaled, symbolic=["n"])
    with pytest.raises(NotSymbolic, match="not a symbolic dimension.*they are n"):
        workbench.open(scaled, symbolic=["batch"])
