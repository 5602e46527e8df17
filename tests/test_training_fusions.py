"""Training fusions: Softmax's backward pass, with the Dropout mask before it, as
one row kernel (SoftmaxBackwardFusion), and LayerNorm's input gradient as one
(LayerNormBackwardFusion), checked against onnxruntime running the unfused
training program, and against the unfused gradients."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform

NAME = "SoftmaxBackwardFusion"
LAYERNORM = "LayerNormBackwardFusion"


def _attention_with_dropout(axis: int = -1) -> onnx.ModelProto:
    """out = Dropout(Softmax(x @ Wq @ k^T)) @ v, heads on axis 1."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.5, "wq")
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="/attn/q/MatMul"),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="/attn/T"),
             helper.make_node("MatMul", ["q", "kt"], ["scores"], name="/attn/MatMul"),
             helper.make_node("Softmax", ["scores"], ["probs"], axis=axis, name="/attn/Softmax"),
             helper.make_node("Dropout", ["probs", "ratio"], ["dropped"], name="/attn/Dropout"),
             helper.make_node("MatMul", ["dropped", "v"], ["out"], name="/attn/MatMul_1")]
    ratio = numpy_helper.from_array(np.array(0.25, np.float32), "ratio")
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16, 8]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 4, 16, 8]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 4, 16, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 16, 8])],
        initializer=[w, ratio])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _fuse(tr, name=NAME) -> list:
    found = transform.find_matches(transform.get(name), tr.sdfg)
    for match in found:
        tr.apply(match)
    return found


@pytest.mark.parametrize("axis", [-1, 2])
def test_softmax_backward_and_its_mask_as_one_row_kernel(axis):
    tr = workbench.open(_attention_with_dropout(axis)).training(loss="mse", dropout=True)
    before = tr.data_movement().moved_bytes
    found = _fuse(tr)
    assert len(found) == 1 and "2 mask factor(s)" in found[0].description
    fused = [n for n, _ in tr.sdfg.all_nodes_recursive()
             if getattr(n, "op_type", "") == "SoftmaxGrad"]
    assert len(fused) == 1 and len([c for c in fused[0].onnx_inputs if c]) == 4
    # gone: g * y, its sum, g - s, and the two masked gradients (16x16 floats per row set)
    assert tr.data_movement().moved_bytes < before - 4 * 2 * 4 * 16 * 16 * 4
    report = tr.verify()
    assert report.match, report.text()


def test_the_fused_gradients_equal_the_unfused_ones():
    tr = workbench.open("bert-layer").training(loss="mse")
    batch = tr.random_batch(seed=2)
    expected = tr.gradients(batch)
    before = tr.data_movement().moved_bytes
    assert len(_fuse(tr)) == 1
    assert len(_fuse(tr, LAYERNORM)) == 2   # after the attention and after the MLP
    kernels = [getattr(n, "op_type", "") for n, _ in tr.sdfg.all_nodes_recursive()]
    assert kernels.count("SoftmaxGrad") == 1 and kernels.count("LayerNormGrad") == 2
    # each LayerNorm gradient no longer writes and reads back 5 tensors of 128 x 768
    assert tr.data_movement().moved_bytes < before - 2 * 5 * 2 * 128 * 768 * 4
    got = tr.gradients(batch)
    scale = max(float(np.abs(g).max()) for g in expected.values() if np.ndim(g))
    for name in tr.program.params:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-4 * scale)
    report = tr.verify()
    assert report.match, report.text()


def test_refusals_say_why():
    tr = workbench.open("bert-layer").training(loss="mse")
    reasons = {r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)}
    assert any("not over one axis" in r for r in reasons)

