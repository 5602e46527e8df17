"""RecomputeBlock (activation checkpointing) on small hand-made training programs: a
block's values are computed again in the backward pass from what it reads, the step
still matches onnxruntime, the gradients and updated parameters are those of the
program without it, the peak of live memory falls by what the test derives from the
program's order, `auto` after it still verifies, and the blocks it must not touch
are refused with their reasons."""
import copy

import numpy as np
import pytest
from onnx import helper

import workbench
from tests.test_transforms_global import _model
from workbench import transformation_api as transform
from workbench.ops.node import OnnxOp
from workbench.training.naming import training_role

NAME = "RecomputeBlock"
N, D = 1024, 64      # a (N, D) activation: 256 kB, 16 times a (D, D) weight
A = N * D * 4


def _matches(tr) -> dict:
    return {m.options_dict()["scope"]: m
            for m in transform.find_matches(transform.get(NAME), tr.sdfg)}


def _reasons(sdfg) -> list:
    return [r.reason for r in transform.refusals(transform.get(NAME), sdfg)]


def _copies(tr) -> list:
    return [n for n in tr.sdfg.nodes()[0].nodes()
            if isinstance(n, OnnxOp) and "/recompute/" in str(n.onnx_name)]


def _linear(blocks: int = 3):
    """x -> [u = x W_k; a = u V_k] per block /block{k}: each block keeps u and a."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], {}, "x"
    for k in range(blocks):
        inits[f"w{k}"] = (rng.standard_normal((D, D)) / 8).astype(np.float32)
        inits[f"v{k}"] = (rng.standard_normal((D, D)) / 8).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"u{k}"], name=f"/block{k}/fc1/MatMul"),
                  helper.make_node("MatMul", [f"u{k}", f"v{k}"], [f"a{k}"],
                                   name=f"/block{k}/fc2/MatMul")]
        x = f"a{k}"
    return _model(nodes, {"x": [N, D]}, {x: [N, D]}, inits)


def _normed(blocks: int = 3):
    """Blocks of MatMul, LayerNormalization (three outputs), Tanh, Dropout, MatMul, and a
    bias scope /shift (Add, Add) whose values the backward pass does not read."""
    rng = np.random.default_rng(1)
    nodes, inits, x = [], {}, "x"
    for k in range(blocks):
        p = f"/block{k}"
        inits.update({f"w{k}": (rng.standard_normal((D, D)) / 8).astype(np.float32),
                      f"v{k}": (rng.standard_normal((D, D)) / 8).astype(np.float32),
                      f"g{k}": (1 + rng.standard_normal(D) / 8).astype(np.float32),
                      f"c{k}": (rng.standard_normal(D) / 8).astype(np.float32)})
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"u{k}"], name=f"{p}/fc1/MatMul"),
                  helper.make_node("LayerNormalization", [f"u{k}", f"g{k}", f"c{k}"],
                                   [f"n{k}"], name=f"{p}/norm/LayerNormalization", axis=-1),
                  helper.make_node("Tanh", [f"n{k}"], [f"t{k}"], name=f"{p}/act/Tanh"),
                  helper.make_node("Dropout", [f"t{k}"], [f"d{k}"], name=f"{p}/drop/Dropout"),
                  helper.make_node("MatMul", [f"d{k}", f"v{k}"], [f"a{k}"],
                                   name=f"{p}/fc2/MatMul")]
        x = f"a{k}"
    inits.update({"b0": np.full(D, 0.5, np.float32), "b1": np.full(D, -0.25, np.float32)})
    nodes += [helper.make_node("Add", [x, "b0"], ["s0"], name="/shift/Add"),
              helper.make_node("Add", ["s0", "b1"], ["y"], name="/shift/Add_1")]
    return _model(nodes, {"x": [N, D]}, {"y": [N, D]}, inits)


@pytest.fixture(scope="module")
def linear():
    ws = workbench.open(_linear())
    tr = ws.training(loss="mse")
    batch = tr.random_batch(seed=3)
    return tr, batch, tr.gradients(batch), tr.memory()


def test_a_block_is_computed_again_and_its_buffers_freed(linear):
    tr, batch, grads, memory = linear
    found = _matches(tr)
    assert set(found) == {"/block0", "/block1", "/block2"}
    start = tr.position
    # The untuned order computes every activation gradient (dL/da, dL/du), then the
    # weight gradients. At block0's fc1 the 5 saved activations (u0 a0 u1 a1 u2; a2
    # only feeds the loss) and 6 activation gradients are live: 11 A at the peak.
    assert memory.peak_live_bytes - memory.resident_bytes == 11 * A
    tr.apply(found["/block0"])
    after = tr.memory()
    # u0 and a0 now die after their forward reads. Their copies are made before
    # block1's fc1 weight gradient (which reads a0): then the saved u1 a1 u2, the 5
    # activation gradients not yet used up, u0' and a0' are live: 10 A.
    assert after.peak_live_bytes - after.resident_bytes == 10 * A
    assert f"-> {(10 * A) / 1e6:.2f} MB" in found["/block0"].description
    copies = _copies(tr)
    assert sorted(n.onnx_name for n in copies) == ["/block0/backward/recompute/fc1/MatMul",
                                                   "/block0/backward/recompute/fc2/MatMul"]
    assert all(training_role(n.onnx_name) == "backward" for n in copies)
    state = tr.sdfg.nodes()[0]
    # the originals are read by forward operators only now
    for name in ("u0", "a0"):
        readers = [e.dst for a in state.data_nodes() if a.data == name
                   for e in state.out_edges(a)]
        assert readers and all(training_role(r.onnx_name) == "forward" for r in readers)
    got = tr.gradients(batch)
    for name in tr.program.params:
        np.testing.assert_allclose(got[name], grads[name], rtol=1e-6, atol=1e-7)
    report = tr.verify()
    assert report.match, report.text()
    assert any("/block0: the backward pass reads none of its values" in r
               for r in _reasons(tr.sdfg))
    tr.goto(start)


def test_every_block_then_auto(linear):
    """All three blocks, the last first: each block's copies then read the copy of its
    checkpoint that the block before it makes (taken first, block0 would be offered
    again for block1's copies). `auto` afterwards still verifies."""
    tr, batch, grads, memory = linear
    start = tr.position
    for scope in ("/block2", "/block1", "/block0"):
        tr.apply(_matches(tr)[scope])
    assert not _matches(tr) and len(_copies(tr)) == 5
    assert tr.memory().peak_live_bytes < memory.peak_live_bytes
    tr.optimize("auto")
    report = tr.verify()
    assert report.match, report.text()
    got = tr.gradients(batch)
    for name in tr.program.params:
        np.testing.assert_allclose(got[name], grads[name], rtol=1e-5, atol=1e-6)
    tr.goto(start)


def test_layer_norm_and_dropout_blocks_take_the_same_steps():
    """LayerNormalization is copied whole (its mean and inverse deviation too, to fresh
    arrays); the Dropout's mask is an input the host draws, read again by the copy.
    Two SGD steps update the parameters as the program without recomputation does."""
    model = _normed()
    ws = workbench.open(model)
    tr = ws.training(loss="mse", optimizer="sgd", dropout=True)
    ref = workbench.open(model).training(loss="mse", optimizer="sgd", dropout=True)
    found = _matches(tr)
    assert "/block0" in found and "/shift" not in found
    assert any("block /shift: the backward pass reads none of its values" in r
               for r in _reasons(tr.sdfg))
    peak = tr.memory().peak_live_bytes
    while (found := _matches(tr)):
        tr.apply(next(iter(found.values())))
    assert tr.memory().peak_live_bytes < peak
    norms = [n for n in _copies(tr) if n.op_type == "LayerNormalization"]
    state = tr.sdfg.nodes()[0]
    assert norms and all(len(state.out_edges(n)) == 3 for n in norms)
    batch = tr.random_batch(seed=5)
    for _ in range(2):
        assert tr.step(batch) == pytest.approx(ref.step(batch), rel=1e-6)
    for name, value in ref.parameters.items():
        np.testing.assert_allclose(tr.parameters[name], value, rtol=1e-5, atol=1e-6)
    report = tr.verify()
    assert report.match, report.text()


def test_batchnorm_running_statistics_are_not_written_again():
    """A training-mode BatchNormalization is batch statistics written as ordinary
    operators, and its running statistics' update reads them: the recomputation copies
    only what the backward pass reads, so the statistics are updated once."""
    rng = np.random.default_rng(2)
    inits = {"wc": (rng.standard_normal((8, 4, 3, 3)) / 8).astype(np.float32),
             "wc2": (rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32),
             "sc": np.ones(8, np.float32), "bi": np.zeros(8, np.float32),
             "mean": np.zeros(8, np.float32), "var": np.ones(8, np.float32),
             "mean2": np.zeros(8, np.float32), "var2": np.ones(8, np.float32)}
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "wc"], ["c1"], name="/stem/conv/Conv", pads=pads),
        helper.make_node("BatchNormalization", ["c1", "sc", "bi", "mean", "var"], ["n1"],
                         name="/stem/bn/BatchNormalization"),
        helper.make_node("Relu", ["n1"], ["r1"], name="/stem/relu/Relu"),
        helper.make_node("Conv", ["r1", "wc2"], ["c2"], name="/body/conv/Conv", pads=pads),
        helper.make_node("BatchNormalization", ["c2", "sc", "bi", "mean2", "var2"], ["n2"],
                         name="/body/bn/BatchNormalization"),
        helper.make_node("Relu", ["n2"], ["y"], name="/body/relu/Relu")]
    model = _model(nodes, {"x": [8, 4, 32, 32]}, {"y": [8, 8, 32, 32]}, inits)
    tr = workbench.open(model).training(loss="mse", optimizer="sgd")
    ref = workbench.open(model).training(loss="mse", optimizer="sgd")
    found = _matches(tr)
    assert "/stem" in found
    tr.apply(found["/stem"])
    copies = _copies(tr)
    state = tr.sdfg.nodes()[0]
    written = {e.dst.data for n in copies for e in state.out_edges(n)}
    assert written and all(name.endswith("_recomputed") and tr.sdfg.arrays[name].transient
                           for name in written)
    batch = tr.random_batch(seed=7)
    tr.step(batch)
    ref.step(batch)
    for name, value in ref.state.items():
        np.testing.assert_allclose(tr.state[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    report = tr.verify()
    assert report.match, report.text()


def test_a_nondeterministic_operator_is_refused(linear):
    """The importer takes no random operators (a Dropout that would draw its own mask
    is refused there too), so one is planted in a copy of the program."""
    sdfg = copy.deepcopy(linear[0].sdfg)
    op = next(n for n in sdfg.nodes()[0].nodes()
              if isinstance(n, OnnxOp) and n.onnx_name == "/block1/fc2/MatMul")
    op.op_type = "RandomNormalLike"
    assert not any(m.options_dict()["scope"] == "/block1"
                   for m in transform.find_matches(transform.get(NAME), sdfg))
    assert any(r.startswith("block /block1: /block1/fc2/MatMul (RandomNormalLike) draws "
                            "random numbers") for r in _reasons(sdfg))


def test_inference_programs_offer_nothing():
    ws = workbench.open(_linear())
    assert not transform.find_matches(transform.get(NAME), ws.sdfg)
