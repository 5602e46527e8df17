"""UpdateInOnePass: the optimizer's per-parameter update kernels as one MultiSweep node,
one parallel region over all of them. Checked against onnxruntime running the same
training graph, against the parameters the unmerged kernels produce over two steps,
by the kernels it leaves, its byte prediction, and its refusals."""
import re

import numpy as np
import pytest

import workbench
from workbench import nodeid
from workbench import transformation_api as transform
from workbench.errors import TransformationError
from workbench.ops.node import OnnxOp
from workbench.recipe import load_recipe
from workbench.training.naming import training_role

NAME = "UpdateInOnePass"
SGD = dict(optimizer="sgd", momentum=0.9, weight_decay=1e-4)


# auto's steps without this one: most tests apply it themselves, after the rest of auto
WITHOUT = {"name": "auto-without", "steps": [s for s in load_recipe("auto")["steps"]
                                             if s["transformation"] != NAME]}


def _training(model: str, recipe=None, **options):
    tr = workbench.open(model).training(loss="mse", **options)
    if recipe == "auto":
        tr.optimize(WITHOUT)
    elif recipe == "auto-with":
        tr.optimize("auto")
    elif recipe == "chains":   # what auto does to the update before this step
        _apply_all(tr, "RemoveIdentity")
        _apply_all(tr, "ElementwiseChainFusion")
    return tr


def _apply_all(tr, name: str) -> list:
    found = transform.find_matches(transform.get(name), tr.sdfg)
    for match in found:
        tr.apply(match)
    return found


def _param_writers(tr) -> list:
    """Op types of the kernels writing a parameter's next value."""
    nexts = {_bare(tr.program.next_state[p]) for p in tr.program.params}
    return [n.op_type for n, st in tr.sdfg.all_nodes_recursive() if isinstance(n, OnnxOp)
            and any(_bare(e.dst.data) in nexts for e in st.out_edges(n))]


def _bare(name: str) -> str:
    """A tensor name as letters and digits (SDFG array names replace the others)."""
    return re.sub(r"[^0-9A-Za-z]", "", name)


def _update_kernels(tr) -> list:
    return [n for n, _ in tr.sdfg.all_nodes_recursive()
            if isinstance(n, OnnxOp) and training_role(n.onnx_name) == "update"]


def _merge_checked(tr, members: int, shared_scalar_reads: int, itemsize: int = 4):
    """Apply the one match (``members`` kernels); the predicted and the actual change
    in bytes moved are the repeated scalar reads it drops, exactly."""
    (match,) = transform.find_matches(transform.get(NAME), tr.sdfg)
    assert len(match.where) == members, match.description
    predicted = tr.predict(match).delta_bytes
    before = tr.data_movement().moved_bytes
    tr.apply(match)
    actual = tr.data_movement().moved_bytes - before
    assert predicted == actual == -shared_scalar_reads * itemsize
    return match


def test_sgd_momentum_and_decay_after_auto_match_onnxruntime():
    tr = _training("resblock", "auto", **SGD)
    assert _param_writers(tr) == ["FusedElementwise"] * 4
    # the learning rate, read through one access node by 2 kernels, is read once
    _merge_checked(tr, members=2, shared_scalar_reads=1)
    # the convolution weights' updates (decay included) stay apart: their gradient is a
    # strided View (the weight-gradient product, transposed), which the one pass cannot
    # index flat; each is one kernel of its own (the row kernel steps by its strides)
    assert sorted(_param_writers(tr)) == ["FusedElementwise", "FusedElementwise", "MultiSweep"]
    assert sorted(n.op_type for n in _update_kernels(tr)) == sorted(_param_writers(tr))
    report = tr.verify()
    assert report.match, report.text()


def test_adamw_after_auto_matches_onnxruntime():
    # eps 1e-3: with PyTorch's 1e-8 the first step is about lr * sign(g), and a gradient
    # of ~1e-8 that onnxruntime sums in another order flips it (the program without this
    # step misses the same rtol on conv1.weight)
    tr = _training("resblock", "auto", optimizer="adamw", eps=1e-3)
    kernels = len(_update_kernels(tr))
    # lr / (1 - b1^t), sqrt(1 - b2^t) and 1 - lr * decay are read by both merged kernels
    _merge_checked(tr, members=2, shared_scalar_reads=3)
    assert sorted(_param_writers(tr)) == ["FusedElementwise", "FusedElementwise", "MultiSweep"]
    assert len(_update_kernels(tr)) == kernels - 1
    report = tr.verify()
    assert report.match, report.text()


def test_auto_merges_the_update_before_buffers_are_shared():
    """In ``auto`` it runs before InPlaceElementwise and TransientReuse, which then see
    the merged node's reads: the same kernels merge as after the whole of auto."""
    tr = _training("resblock", "auto-with", **SGD)
    assert NAME in [s["transformation"] for s in tr.history]
    assert sorted(_param_writers(tr)) == ["FusedElementwise", "FusedElementwise", "MultiSweep"]
    report = tr.verify()
    assert report.match, report.text()


def test_two_steps_equal_those_of_the_separate_kernels():
    batches = None
    params = []
    for merge in (False, True):
        tr = _training("mlp", "chains", **SGD)
        assert _param_writers(tr) == ["FusedElementwise"] * 6
        if merge:
            _merge_checked(tr, members=6, shared_scalar_reads=5)
            assert _param_writers(tr) == ["MultiSweep"]
        batches = batches or [tr.random_batch(seed=s) for s in (1, 2)]
        start = tr.parameters
        for batch in batches:
            tr.step(batch)
        params.append(tr.parameters)
    moved = 0
    for name, value in params[0].items():
        np.testing.assert_allclose(params[1][name], value, rtol=1e-6, atol=1e-9)
        moved += not np.allclose(value, start[name], rtol=0, atol=1e-7)
    assert moved == len(params[0])   # every parameter took the steps


@pytest.fixture(scope="module")
def resblock():
    return _training("resblock", "auto", optimizer="adamw", eps=1e-3)


def test_refusals_say_why(resblock):
    reasons = [r.reason for r in transform.refusals(transform.get(NAME), resblock.sdfg)]
    # AdamW's bias corrections are update kernels the members read
    assert any("/optimizer/{Pow,Sub,Div}'s result is read by the update kernel" in r
               for r in reasons), reasons
    # the convolution weights' update reads their gradient, a transposed View (not rows)
    assert sum("reads 'grad_Transpose" in r and "or as rows of contiguous values" in r
               for r in reasons) == 2, reasons
    forward = next(n for n, st in resblock.sdfg.all_nodes_recursive()
                   if isinstance(n, OnnxOp) and n.op_type == "Relu"
                   and training_role(n.onnx_name) == "forward")
    key = nodeid.identity(resblock.sdfg, resblock.sdfg.start_state, forward)
    (alone,) = transform.refusals(transform.get(NAME), resblock.sdfg, nodes={key})
    assert "not part of the optimizer's update" in alone.reason


def test_a_member_feeding_another_is_refused_on_apply(resblock):
    (match,) = transform.find_matches(transform.get(NAME), resblock.sdfg)
    state = resblock.sdfg.start_state
    correction = next(n for n in state.nodes()
                      if getattr(n, "onnx_name", "") == "/optimizer/{Pow,Sub,Div}")
    where = dict(match.where)
    where[f"op{len(where)}"] = nodeid.identity(resblock.sdfg, state, correction)
    stale = transform.get(NAME).match(where, match.description)
    with pytest.raises(TransformationError, match="feeds another member"):
        transform.get(NAME).apply(resblock.sdfg, stale)


def test_one_parameter_is_nothing_to_merge():
    tr = _training("mlp", "chains", params=["fc3.bias"], **SGD)
    assert transform.find_matches(transform.get(NAME), tr.sdfg) == []
    reasons = [r.reason for r in transform.refusals(transform.get(NAME), tr.sdfg)]
    assert any("the only float32 update kernel" in r for r in reasons), reasons


def test_plain_update_operators_merge_too():
    """Without ElementwiseChainFusion the update is plain operators: SGD's p - g * lr
    per parameter; the Subs merge (each reads its own Mul's product), nothing shared."""
    tr = _training("mlp", optimizer="sgd")
    match = _merge_checked(tr, members=6, shared_scalar_reads=0)
    assert all(":op:/optimizer/Sub" in key for _, key in match.where)
    report = tr.verify()
    assert report.match, report.text()
