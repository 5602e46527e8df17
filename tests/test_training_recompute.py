"""What a training step keeps: the memory figure (a buffer lives until its last
reader ran) and RecomputeInBackward (a value computed again in the backward
pass), on MBConv's training program: SiLU's sigmoid is recomputed, the step
still matches onnxruntime and gives the same gradients, and `auto` after it
moves fewer bytes with a lower peak than `auto` alone."""
import numpy as np
import pytest
from onnx import helper

import workbench
from tests.test_transforms_global import _model
from workbench import transformation_api as transform
from workbench.analysis.memory import memory_figure
from workbench.training.naming import training_role

NAME = "RecomputeInBackward"


def _recompute(tr) -> list:
    return transform.find_matches(transform.get(NAME), tr.sdfg)


def test_a_buffer_lives_until_its_last_reader_ran():
    # a = relu(x); b = -a; c = exp(b); y = a + c: at exp, a and b are live; then a and c
    chain = [("Relu", ["x"], "a"), ("Neg", ["a"], "b"), ("Exp", ["b"], "c"),
             ("Add", ["a", "c"], "y")]
    model = _model([helper.make_node(op, ins, [out]) for op, ins, out in chain],
                   {"x": [256, 256]}, {"y": [256, 256]})
    ws = workbench.open(model)
    size = 256 * 256 * 4
    figure = memory_figure(ws.sdfg)
    assert figure.resident_bytes == 2 * size
    assert figure.allocated_bytes == 3 * size
    assert figure.peak_live_bytes == 2 * size + 2 * size


@pytest.fixture(scope="module")
def mbconv():
    ws = workbench.open("mbconv")
    tr = ws.training(loss="mse")
    batch = tr.random_batch(seed=1)
    return tr, batch, tr.gradients(batch), tr.memory()


def test_recompute_lowers_the_peak_and_keeps_the_gradients(mbconv):
    tr, batch, before, memory = mbconv
    found = _recompute(tr)
    assert found and all("peak live memory" in m.description for m in found)
    applied = 0
    while (found := _recompute(tr)):
        tr.apply(found[0])
        applied += 1
    assert applied >= 2
    after = tr.memory()
    assert after.peak_live_bytes < memory.peak_live_bytes - 1_000_000
    copies = [n for n, _ in tr.sdfg.all_nodes_recursive()
              if "/recompute/" in str(getattr(n, "onnx_name", ""))]
    assert len(copies) == applied and all(training_role(n.onnx_name) == "backward"
                                          for n in copies)
    report = tr.verify()
    assert report.match, report.text()
    got = tr.gradients(batch)
    for name in tr.program.params:
        np.testing.assert_allclose(got[name], before[name], rtol=1e-5, atol=1e-7)
    # refusals name their reason
    reasons = [r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)]
    assert any("is not element-wise" in r for r in reasons)
    tr.undo()
    assert tr.memory().peak_live_bytes > after.peak_live_bytes


def test_auto_keeps_the_recomputation_and_fuses_it(mbconv):
    """CSE would merge a copy with its original (the ordering edge tells them apart);
    the fusions fold the copy into the backward chain it feeds, and the fused node
    still waits for the backward pass (the edge, or the value it waited for)."""
    tr = mbconv[0]
    start = tr.position
    tr.optimize("auto")
    alone = (tr.memory().peak_live_bytes, tr.data_movement().moved_bytes)
    tr.goto(start)
    while (found := _recompute(tr)):
        tr.apply(found[0])
    tr.optimize("auto")
    peak, moved = tr.memory().peak_live_bytes, tr.data_movement().moved_bytes
    assert peak < alone[0] and moved < alone[1], (peak, moved, alone)
    fused = [n for n, _ in tr.sdfg.all_nodes_recursive()
             if "recompute" in str(getattr(n, "onnx_name", ""))]
    state = tr.sdfg.nodes()[0]

    def waits(node):   # on an ordering edge, or by reading a value the backward pass wrote
        return any(e.data.is_empty() or any(training_role(getattr(w.src, "onnx_name", ""))
                                            == "backward" for w in state.in_edges(e.src))
                   for e in state.in_edges(node))
    assert fused and all(waits(n) for n in fused)
    report = tr.verify()
    assert report.match, report.text()


def test_inference_programs_offer_nothing():
    ws = workbench.open("mbconv")
    assert not _recompute(ws)
