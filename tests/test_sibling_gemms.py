"""SiblingGemmsAsOne: the Q/K/V weight gradients of a training program as one GEMM over
their dY laid side by side, and the optimizer update reading the gradients as column
slices (UpdateInOnePass over rows). Checked against onnxruntime running the same
training graph, against the parameters the unmerged program produces, by its byte
prediction and its refusals."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from transforms.fusion.sibling_gemms import row_strides
from workbench import transformation_api as transform
from workbench.ops.multi_sweep import row_layout
from workbench.ops.node import OnnxOp
from workbench.recipe import load_recipe
from workbench.training.naming import training_role

from tests.training_helpers import attention_block

NAME = "SiblingGemmsAsOne"


def _before_update() -> dict:
    """``auto`` up to this step (UpdateInOnePass and the rest come after it)."""
    steps = load_recipe("auto")["steps"]
    return {"name": "auto-before", "steps": steps[:[s["transformation"] for s in steps]
                                                  .index(NAME)]}


def _after_it() -> dict:
    steps = load_recipe("auto")["steps"]
    return {"name": "auto-after", "steps": steps[[s["transformation"] for s in steps]
                                                 .index(NAME) + 1:]}


def _training(optimizer="adamw"):
    tr = workbench.open(attention_block()).training(loss="mse", optimizer=optimizer, lr=1e-2)
    tr.optimize(_before_update())
    return tr


def _gemms(tr) -> list:
    return [n for n, _ in tr.sdfg.all_nodes_recursive()
            if isinstance(n, OnnxOp) and n.op_type == "Gemm"]


def test_row_strides_split_a_tensor_into_rows_of_its_slice():
    assert row_strides((1, 128, 12, 64), 768, 2304) == (294912, 2304, 64, 1)
    assert row_strides((128, 768), 768, 2304) == (2304, 1)
    assert row_strides((128, 768), 384, 2304) is None   # 384 cuts a dimension
    assert row_strides((4, 6), 4, 12) is None
    assert row_strides((2, 3, 4), 12, 20) == (20, 4, 1)


def test_row_layout_reads_column_slices_and_nothing_else():
    import dace
    sdfg = dace.SDFG("layouts")
    sdfg.add_array("flat", (6, 4), dace.float32)
    sdfg.add_array("cols", (6, 4), dace.float32, strides=(12, 1))
    sdfg.add_array("heads", (1, 6, 2, 2), dace.float32, strides=(72, 12, 2, 1))
    sdfg.add_array("transposed", (6, 4), dace.float32, strides=(1, 6))
    assert row_layout(sdfg.arrays["flat"]) is None
    assert row_layout(sdfg.arrays["cols"]) == (4, 12)
    assert row_layout(sdfg.arrays["heads"]) == (4, 12)
    assert row_layout(sdfg.arrays["transposed"]) is False


def _two_branches() -> onnx.ModelProto:
    """relu(x @ W1 + b1) + relu(x @ W2 + b2): the branches' dY are written by element-wise
    kernels (the ReLU gradients), and their bias gradients read them directly."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
             for n, s in (("w1", (16, 24)), ("b1", (24,)), ("w2", (16, 8)), ("b2", (8,)),
                          ("w3", (8, 24)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="/a/MatMul"),
             helper.make_node("Add", ["m1", "b1"], ["s1"], name="/a/Add"),
             helper.make_node("Relu", ["s1"], ["r1"], name="/a/Relu"),
             helper.make_node("MatMul", ["x", "w2"], ["m2"], name="/b/MatMul"),
             helper.make_node("Add", ["m2", "b2"], ["s2"], name="/b/Add"),
             helper.make_node("Relu", ["s2"], ["r2"], name="/b/Relu"),
             helper.make_node("MatMul", ["r2", "w3"], ["r3"], name="/b/up/MatMul"),
             helper.make_node("Add", ["r1", "r3"], ["out"], name="/Add")]
    return _on_x(nodes, inits, out_cols=24)


def _on_x(nodes, inits, out_cols: int) -> onnx.ModelProto:
    """The model of ``nodes`` from x [6, 16] to out [6, out_cols]."""
    graph = helper.make_graph(
        nodes, "model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [6, out_cols])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _update_kernels(tr) -> list:
    return [n.op_type for n, _ in tr.sdfg.all_nodes_recursive()
            if isinstance(n, OnnxOp) and training_role(n.onnx_name) == "update"]


@pytest.mark.parametrize("model, widths, a_bytes", [
    (attention_block, "16x16+16+16", 8 * 16 * 4),
    # the Q/K/V input gradients (dY @ W^T, Gemms) read the dY columns in place
    (lambda: attention_block(project_input=True), "16x16+16+16", 8 * 16 * 4),
    (_two_branches, "16x24+8", 6 * 16 * 4)])
def test_weight_gradients_sharing_an_input_run_as_one_gemm(model, widths, a_bytes):
    def session():
        tr = workbench.open(model()).training(loss="mse", optimizer="adamw", lr=1e-2)
        tr.optimize(_before_update())
        return tr

    tr, unmerged = session(), session()
    gemms = len(_gemms(tr))
    (match,) = transform.find_matches(transform.get(NAME), tr.sdfg)
    assert widths in match.description
    siblings = widths.count("+") + 1
    # A (x) is read once instead of once per sibling; nothing else changes
    predicted = tr.predict(match).delta_bytes
    before = tr.data_movement().moved_bytes
    tr.apply(match)
    assert predicted == tr.data_movement().moved_bytes - before == -(siblings - 1) * a_bytes
    assert len(_gemms(tr)) == gemms - siblings + 1
    for t in (tr, unmerged):
        t.optimize(_after_it())
    # every update kernel, the strided gradients' too, in the one pass (and its scalars)
    assert set(_update_kernels(tr)) == {"MultiSweep"}
    assert _update_kernels(tr) == _update_kernels(unmerged)
    report = tr.verify()
    assert report.match, report.text()
    batch = tr.random_batch(seed=1)
    for _ in range(2):
        np.testing.assert_allclose(tr.step(batch), unmerged.step(batch), rtol=1e-5)
    for name in tr.program.params:
        np.testing.assert_allclose(tr.parameters[name], unmerged.parameters[name],
                                   rtol=1e-5, atol=1e-6)


def test_gradients_the_program_returns_are_left_apart():
    tr = workbench.open(attention_block()).training(loss="mse")   # no optimizer: dW are outputs
    tr.optimize(_before_update())
    assert not transform.find_matches(transform.get(NAME), tr.sdfg)
    reasons = {r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)}
    assert any("not a transient array written once, here" in r for r in reasons), reasons


def test_a_gemm_with_a_transposed_b_or_alone_says_why():
    tr = _training()
    reasons = {r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)}
    assert any("without C or a transposed B" in r for r in reasons), reasons
    assert any("no other Gemm reads" in r for r in reasons), reasons


def _chained_gradients() -> onnx.ModelProto:
    """v = relu(x @ W1) + x @ W2, out = v * v: the gradient of x @ W1 is computed from
    that of x @ W2 (the ReLU's backward reads dv)."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.5).astype(np.float32),
                                     n) for n in ("w1", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="/a/MatMul"),
             helper.make_node("Relu", ["m1"], ["u"], name="/a/Relu"),
             helper.make_node("MatMul", ["x", "w2"], ["m2"], name="/b/MatMul"),
             helper.make_node("Add", ["u", "m2"], ["v"], name="/Add"),
             helper.make_node("Mul", ["v", "v"], ["out"], name="/Mul")]
    return _on_x(nodes, inits, out_cols=8)


def test_a_b_its_sibling_s_writer_reads_is_left_apart():
    # untuned: the ReLU's backward is its own Where (auto fuses it with what it reads)
    tr = workbench.open(_chained_gradients()).training(loss="mse", optimizer="adamw")
    reasons = {r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)}
    assert not transform.find_matches(transform.get(NAME), tr.sdfg), reasons
    assert any("feeds the writer of another" in r for r in reasons), reasons
    report = tr.verify()
    assert report.match, report.text()
