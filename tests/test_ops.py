"""Every registered ONNX op, checked against onnxruntime on real compiles.

The cases of one op type sit side by side in one model (one compile per op
type and implementation); each case has its own outputs, so a mismatch
names the case. An op type registered without a row in ``CASES`` fails
``test_every_registered_op_has_cases``.
"""
from pathlib import Path

import pytest

from op_cases import CASES, Case  # noqa: F401
from op_cases.base import ints, rand
from onnx_helpers import assert_matches_onnxruntime, combine, onnx_ops, single_node_model
from workbench.ops import implementations_of, supported_op_types


def case_model(op_type: str, case: Case):
    """One node; its tensors carry the case id so cases can share a model."""
    def rename(name):
        return f"{case.id}_{name}" if name else ""

    node_inputs = case.node_inputs
    if node_inputs is not None:
        node_inputs = [rename(n) for n in node_inputs]
    model = single_node_model(
        op_type, {rename(n): v for n, v in case.inputs.items()}, case.attrs,
        outputs=({rename(n): t for n, t in case.outputs.items()} if isinstance(case.outputs, dict)
                 else [rename(n) for n in case.outputs]), opset=case.opset,
        initializers={rename(n): v for n, v in case.init.items()}, node_inputs=node_inputs,
        name=f"{op_type}_{case.id}")
    return model, {rename(n): v for n, v in case.inputs.items()}


def op_models(op_type: str):
    """(model, feeds) per opset used by the op's cases."""
    by_opset = {}
    for case in CASES[op_type]:
        by_opset.setdefault(case.opset, []).append(case_model(op_type, case))
    out = []
    for opset, built in sorted(by_opset.items()):
        feeds = {k: v for _, f in built for k, v in f.items()}
        out.append((combine([m for m, _ in built], f"{op_type}_opset{opset}"), feeds))
    return out


# Op types onnxruntime does not run here (preview domains, Swish inside SwiGLU) or of another
# domain than a case row can name: the node suite's cases judge them (tests/test_more_ops.py).
# onnxruntime's QGemm (com.microsoft) has no node-suite case: tests/test_quantized_kernels.py
# and tests/test_qlinear_fusion.py compare it with onnxruntime.
NODE_SUITE_ONLY = {"FlexAttention", "SwiGLU", "Momentum", "Adagrad", "Adam", "Binarizer",
                   "ArrayFeatureExtractor", "TreeEnsemble", "QGemm"}


def test_every_registered_op_has_cases():
    missing = sorted(supported_op_types() - set(CASES) - NODE_SUITE_ONLY)
    assert not missing, f"registered op types without a case in tests/op_cases/: {missing}"
    stale = sorted(set(CASES) - supported_op_types())
    assert not stale, f"cases for op types no longer registered: {stale}"


def _params():
    return [pytest.param(op, impl, id=f"{op}-{impl}")
            for op in sorted(supported_op_types() & set(CASES))
            for impl in implementations_of(op)]


@pytest.mark.parametrize("op_type, implementation", _params())
def test_op_matches_onnxruntime(op_type, implementation):
    library_calls = 0
    for model, feeds in op_models(op_type):
        ws = assert_matches_onnxruntime(model, feeds, implementation=implementation)
        nodes = [n for n in onnx_ops(ws.sdfg) if n.op_type == op_type]
        assert len(nodes) == sum(1 for n in model.graph.node)
        assert {n.implementation for n in nodes} == {implementation}
        if implementation == "blas":  # at least one case must really call the library
            source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
            assert "cblas_" in source or "sgemm" in source, "no BLAS call in the generated code"
        if implementation == "onednn":  # cases it lacks (float64, Indices) fall back to pure
            source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
            library_calls += "wb_dnnl_" in source
    assert implementation != "onednn" or library_calls, "no case called oneDNN"


def test_tensor_names_that_equal_tasklet_variables():
    """ONNX tensors named x, y, a, b, w, c, o, v ... as exporters often write them.

    The generated C++ must not confuse an array with a tasklet's local
    variable of the same name, nor two arrays read crosswise (``b`` into
    ``a``'s slot and ``a`` into ``b``'s).
    """
    import onnx
    from onnx import helper, numpy_helper
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Sub", ["b", "a"], ["o"], name="sub"),
             helper.make_node("Gemm", ["y", "w", "c"], ["v"], name="gemm"),
             helper.make_node("MatMul", ["v", "k"], ["m"], name="matmul"),
             helper.make_node("Transpose", ["m"], ["i0"], name="transpose"),
             helper.make_node("Concat", ["o", "o"], ["n"], axis=0, name="concat"),
             helper.make_node("Gather", ["src", "idx"], ["j"], axis=1, name="gather")]
    graph = helper.make_graph(
        nodes, "names",
        [helper.make_tensor_value_info(n, f, s) for n, s in
         (("x", [3, 4]), ("a", [2, 3]), ("b", [2, 3]), ("src", [2, 3]))],
        [helper.make_tensor_value_info("i0", f, [2, 3]),
         helper.make_tensor_value_info("n", f, [4, 3]),
         helper.make_tensor_value_info("j", f, [2, 2])],
        initializer=[numpy_helper.from_array(rand(4, 5), "w"),
                     numpy_helper.from_array(rand(5), "c"),
                     numpy_helper.from_array(rand(5, 2), "k"),
                     numpy_helper.from_array(ints(2, -1), "idx")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    assert_matches_onnxruntime(model, {"x": rand(3, 4), "a": rand(2, 3), "b": rand(2, 3),
                                       "src": rand(2, 3)}, implementation="pure")


def test_relu_keeps_nan_as_onnxruntime_does():
    """max(x, 0) is (x > 0 ? x : 0) in DaCe's C++: NaN became 0 (an EmbeddingBag max over
    an empty bag gives -inf, a Linear then NaN, which the next ReLU hid)."""
    import numpy as np
    from onnx import TensorProto, helper

    import workbench
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    value = np.array([np.nan, -1, 0, 2, -np.inf, np.inf], np.float32)
    ws = workbench.open(model)
    assert ws.verify({"x": value}).match
    got = ws.run({"x": value})["y"]
    np.testing.assert_array_equal(got, [np.nan, 0, 0, 2, 0, np.inf])   # NaNs compare equal
