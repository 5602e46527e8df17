"""LayerNormGradEpilogue: the Dropout mask multiply and the dense bias gradient's column
sums run in the LayerNormGrad row kernel. Checked against onnxruntime (the session's
verify), against the unfused gradients on the same feeds (masks included), and by the
bytes the data-movement figure counts."""
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform
from workbench.ops.layernorm_grad_epilogue import blocks, layout

NAME = "LayerNormGradEpilogue"
B, S, D = 2, 32, 64
AUTO = json.loads((Path(__file__).parents[1] / "transforms/recipes/auto.json").read_text())
# auto up to its fusions (the later steps reuse buffers, which this fusion precedes)
# auto's fusion steps up to GemmOnOneDNN, without this one: the tests apply it themselves
FUSIONS = [s for s in AUTO["steps"][:[s["transformation"] for s in AUTO["steps"]]
                                    .index("GemmOnOneDNN")] if s["transformation"] != NAME]


def _block(bias: bool = True) -> onnx.ModelProto:
    """y = LayerNorm(Dropout(h @ w1 + b1) + h), h = x @ w0: a BERT output sublayer."""
    rng = np.random.default_rng(0)

    def weight(name, shape, s=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)
    inits = [weight("w0", (D, D)), weight("w1", (D, D)), weight("b1", (D,)),
             weight("gamma", (D,), 1.0), weight("beta", (D,)),
             numpy_helper.from_array(np.array(0.25, np.float32), "ratio")]
    dense = [helper.make_node("MatMul", ["h", "w1"], ["a0" if bias else "a"],
                              name="/dense/MatMul")]
    if bias:
        dense.append(helper.make_node("Add", ["a0", "b1"], ["a"], name="/dense/Add"))
    else:
        inits = [i for i in inits if i.name != "b1"]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="/in/MatMul"), *dense,
             helper.make_node("Dropout", ["a", "ratio"], ["dr"], name="/dropout/Dropout"),
             helper.make_node("Add", ["dr", "h"], ["r"], name="/residual/Add"),
             helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-5, name="/ln/LayerNormalization")]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _kernels(tr) -> list:
    return [getattr(n, "op_type", "") for n, _ in tr.sdfg.all_nodes_recursive()]


def _gradients(tr, feeds) -> dict:
    out = tr.run(dict(feeds))
    return {p: np.array(out[g]) for p, g in tr.program.gradients.items()}


def _check_gradients(got, expected, biases):
    """Everything but the bias gradients is the same arithmetic; a bias gradient sums the
    rows in another order (double partials per block of rows, not ReduceSum's float)."""
    for name, value in expected.items():
        if name in biases:
            scale = float(np.abs(value).max())
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6 * scale)
        else:
            np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=0)


def _fuse(tr) -> list:
    found = transform.find_matches(transform.get(NAME), tr.sdfg)
    for match in found:
        tr.apply(match)
    return found


def test_the_mask_and_the_bias_gradient_join_the_row_kernel():
    tr = workbench.open(_block()).training(loss="mse", dropout=True)
    tr.optimize(FUSIONS)
    feeds = tr.feeds(tr.random_batch(seed=3))   # one draw of the Dropout mask for both runs
    expected = _gradients(tr, feeds)
    before, kernels = tr.data_movement().moved_bytes, _kernels(tr)
    found = _fuse(tr)
    assert len(found) == 1
    assert "FusedElementwise /dropout/backward" in found[0].description
    assert "column sums /dense/backward/ReduceSum" in found[0].description
    after = _kernels(tr)
    assert after.count("ReduceSum") == kernels.count("ReduceSum") - 1
    assert after.count("FusedElementwise") == kernels.count("FusedElementwise") - 1
    (node,) = [n for n, _ in tr.sdfg.all_nodes_recursive()
               if getattr(n, "op_type", "") == "LayerNormGrad"]
    # dx stays (the residual gradient's Sum reads it), the masked gradient stays (the
    # MatMul for w1's gradient reads it), the column sums are new
    assert node.onnx_outputs == ["dx", "y0", "db"] and node.attrs["colsum"] == "y0"
    # gone: the mask multiply's read of dx and the ReduceSum's read of the masked gradient
    # (B*S*D floats each) and of its axes (2 int64); new: the partials (double, per block)
    tensor = B * S * D * 4
    assert before - tr.data_movement().moved_bytes == 2 * tensor + 16 - 2 * 8 * blocks(B * S) * D
    _check_gradients(_gradients(tr, feeds), expected, {"b1"})
    report = tr.verify()
    assert report.match, report.text()


def test_without_dropout_the_bias_gradient_joins():
    tr = workbench.open(_block()).training(loss="mse")
    tr.optimize(FUSIONS)
    feeds = tr.feeds(tr.random_batch(seed=4))
    expected = _gradients(tr, feeds)
    before = tr.data_movement().moved_bytes
    found = _fuse(tr)
    assert len(found) == 1 and "FusedElementwise" not in found[0].description
    (node,) = [n for n, _ in tr.sdfg.all_nodes_recursive()
               if getattr(n, "op_type", "") == "LayerNormGrad"]
    assert node.onnx_outputs == ["dx", "db"] and node.attrs["colsum"] == "dx"
    assert not node.attrs["code"]
    tensor = B * S * D * 4
    assert before - tr.data_movement().moved_bytes == tensor + 16 - 2 * 8 * blocks(B * S) * D
    _check_gradients(_gradients(tr, feeds), expected, {"b1"})
    report = tr.verify()
    assert report.match, report.text()


def test_the_adamw_step_with_dropout_matches_onnxruntime():
    tr = workbench.open(_block()).training(loss="mse", optimizer="adamw", dropout=True)
    tr.optimize(FUSIONS)
    assert len(_fuse(tr)) == 1
    report = tr.verify()
    assert report.match, report.text()


def test_refusals_say_why():
    # no bias: the only reader left is the residual gradient's Sum, whose other operand is
    # the gradient through the dense layer, computed from dx
    tr = workbench.open(_block(bias=False)).training(loss="mse")
    tr.optimize(FUSIONS)
    reasons = [r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)]
    assert len(reasons) == 1 and "would make a cycle" in reasons[0], reasons
    assert not transform.find_matches(transform.get(NAME), tr.sdfg)
    # a node that already runs its epilogue does not take a second one
    tr = workbench.open(_block()).training(loss="mse")
    tr.optimize(FUSIONS)
    assert len(_fuse(tr)) == 1
    reasons = [r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)]
    assert any("already runs an epilogue" in r for r in reasons), reasons


def test_what_a_row_kernel_can_read():
    shape, axis = (2, 32, 64), 2
    assert layout(shape, axis, (2, 32, 64)) == ("row", 64)
    assert layout(shape, axis, (2, 32, 1)) == ("per_row", 64)
    assert layout(shape, axis, (64,)) == ("suffix", 64)
    assert layout(shape, axis, ()) == ("suffix", 1)
    assert layout(shape, axis, (2, 1, 64)) is None     # per batch and feature: not a row
    assert layout(shape, axis, (32, 1)) is None        # per position of every batch
    assert blocks(4096) == 16 and blocks(8) == 1


def test_bert_layer_bias_gradients_join_and_the_residual_sum_stays_outside():
    tr = workbench.open("bert-layer").training(loss="mse")
    tr.optimize([{"transformation": t, "all": True}
                 for t in ("LayerNormBackwardFusion", "ElementwiseChainFusion")])
    feeds = tr.feeds(tr.random_batch(seed=2))
    expected = _gradients(tr, feeds)
    before = tr.data_movement().moved_bytes
    refused = [r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)]
    assert not refused
    found = transform.find_matches(transform.get(NAME), tr.sdfg)
    # after the MLP: the Sum of the residual gradient reads the gradient through the MLP,
    # computed from dx (a cycle): only the bias gradient joins; after the attention too
    assert len(found) == 2 and all("column sums" in m.description for m in found)
    assert all(dict(m.options).get("reader") is False for m in found)
    for match in found:
        tr.apply(match)
    nodes = [n for n, _ in tr.sdfg.all_nodes_recursive()
             if getattr(n, "op_type", "") == "LayerNormGrad"]
    assert len(nodes) == 2 and all(n.attrs["colsum"] == "dx" for n in nodes)
    # each: one read of dx (128 x 768 floats) and of the axes (2 int64) less, the partials
    # of 8 blocks of 16 rows (768 doubles each, written and read) more
    assert before - tr.data_movement().moved_bytes == 2 * (128 * 768 * 4 + 16 - 2 * 8 * 8 * 768)
    _check_gradients(_gradients(tr, feeds), expected,
                     {"output.dense.bias", "attention.output.dense.bias"})
    report = tr.verify()
    assert report.match, report.text()
