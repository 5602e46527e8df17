"""Shapes that depend on values known at import but not folded (fold rule 5).

With folding limited to Constant/Shape/Size (the ONNX backend), a node such
as Range(Size(Shape(x))) keeps running as compiled code, but its value is
known at import. A node reading it alongside run-time data (ReduceMean's
axes, Split's sizes) used to leave onnx's inference without a shape (the
node suite's *_expanded functions: "no static shape after inference and
folding") or let onnxruntime's symbolic engine guess one (an even Split,
which then disagreed with the op). Such nodes now read the known value as
an initializer.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench.importer import import_model

F = TensorProto.FLOAT


def _model():
    """RMS over the last axis with the axes computed from the rank, then an uneven
    split whose sizes are computed too: [16, 0] from [head] and [head - head]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank"]),
        helper.make_node("Sub", ["rank", "one"], ["last"]),
        helper.make_node("Range", ["last", "rank", "one"], ["axes"]),
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"]),
        helper.make_node("Sqrt", ["ms"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["normed"]),
        helper.make_node("Identity", ["head"], ["rotate"]),
        helper.make_node("Sub", ["head", "rotate"], ["rest"]),
        helper.make_node("Concat", ["rotate", "rest"], ["sizes"], axis=0),
        helper.make_node("Split", ["normed", "sizes"], ["a", "b"], axis=-1),
        helper.make_node("Neg", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "known", [helper.make_tensor_value_info("x", F, [2, 4, 16])],
        [helper.make_tensor_value_info("y", F, [2, 4, 16])],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array([16], np.int64), "head")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_unfolded_known_values_give_static_and_right_shapes():
    imported = import_model(_model(), name="known", fold=False)
    shapes = {t.onnx_name: t.shape for t in imported.inputs + imported.outputs}
    assert shapes["y"] == (2, 4, 16)
    ops = {n.op_type for n in imported.folded_model.graph.node}
    assert {"Range", "Concat", "ReduceMean", "Split"} <= ops  # still compiled, not folded


def test_unfolded_known_values_match_onnxruntime():
    """Through the ONNX backend, which imports with folding limited as above."""
    import onnxruntime as ort
    from workbench.backend import WorkbenchBackend
    model = _model()
    x = np.random.default_rng(5).standard_normal((2, 4, 16)).astype(np.float32)
    (got,) = WorkbenchBackend.run_model(model, [x])
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
