"""The ONNX Backend API over the workbench, and the conformance machinery."""
import json
import unittest

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import workbench.backend as backend
from workbench.conformance import report, runner


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_supports_cpu_only():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")


def test_unsupported_op_skips_in_prepare():
    model = _model([helper.make_node("Multinomial", ["x"], ["y"], name="draw")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 1])])
    with pytest.raises(unittest.SkipTest, match="Multinomial"):
        backend.prepare(model)


def test_run_binds_shape_inputs_and_computes():
    """Reshape's shape arrives as a graph input, as in the node suite."""
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                    helper.make_node("Relu", ["r"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                    helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])])
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = backend.run_model(model, [x, np.array([6, 4], dtype=np.int64)])
    np.testing.assert_allclose(y, np.maximum(x.reshape(6, 4), 0))


def test_runner_reports_and_summarizes():
    names = ["test_relu_cpu", "test_transpose_default_cpu"]
    results = runner.run_suite(names, workers=1, timeout=300)
    assert {r["status"] for r in results.values()} == {"passed"}, results
    summary = report.summarize(results, {"test_relu_cpu": "Relu",
                                         "test_transpose_default_cpu": "Transpose"})
    assert summary["pass_rate"] == 1.0 and summary["op_types_passing"] == 2
    assert report.regressions(results, {"results": {"test_relu_cpu": {"status": "passed"}}}) == []
    broken = {**results, "test_relu_cpu": {"status": "failed", "reason": "x", "seconds": 0}}
    assert report.regressions(broken, {"results": {"test_relu_cpu": {"status": "passed"}}}) == \
        ["test_relu_cpu"]
    json.dumps(summary)  # the CLI prints it as JSON
