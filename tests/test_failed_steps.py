"""Failed steps: every apply is all or nothing, and a failed build says where.

A seeded property test walks random sequences of matches on the bundled
models, mixing current matches with stale ones from earlier steps (which
may no longer apply): after a success the program still verifies against
onnxruntime; after a failure the SDFG JSON, the weights, the history and
the session folder are byte-identical to before. Transformations that
damage the graph and then fail show that this is a rollback, not luck.
"""
import json
import random

import numpy as np
import pytest

import workbench
from fault_helpers import (BAD_CODE, break_transformation_class, half_applying_transformations,
                           registered)
from workbench.errors import CompileError, TransformationError
from workbench.transformation_api import Match

# steps per random sequence; every successful step is verified (a real build)
STEPS = {"mlp": 5, "mbconv": 4, "bert-layer": 3}
STALE_SHARE = 0.4    # how often a stale match is tried instead of a current one


def pick(rng, matches):
    """A transformation uniformly (ExpandToMaps alone has dozens of matches), then a match."""
    name = rng.choice(sorted({m.transformation for m in matches}))
    return rng.choice([m for m in matches if m.transformation == name])


def exact(ws) -> str:
    return json.dumps(ws.sdfg.to_json(), sort_keys=True)


def snapshot(ws):
    """Everything a failed step must leave as it was."""
    folder = ws.folder
    return {"sdfg": exact(ws), "position": ws.position, "history": json.dumps(ws.history),
            "weights": ws.model.weights, "weight_names": sorted(ws.model.weights),
            "manifest": (folder / "session.json").read_bytes() if folder else None,
            "step_files": sorted(p.name for p in (folder / "steps").iterdir()) if folder else None}


def assert_unchanged(ws, before):
    after = snapshot(ws)
    assert after["sdfg"] == before["sdfg"], "the SDFG changed on a failed step"
    assert after["weights"] is before["weights"] and after["weight_names"] == before["weight_names"]
    for key in ("position", "history", "manifest", "step_files"):
        assert after[key] == before[key], f"{key} changed on a failed step"


@pytest.mark.parametrize("model", list(STEPS))
def test_random_steps_succeed_and_verify_or_change_nothing(model, tmp_path):
    rng = random.Random(f"failed-steps/{model}")
    ws = workbench.open(model, session_dir=tmp_path / "session")
    stale, outcomes = [], []
    for _ in range(STEPS[model]):
        current = ws.transformations(predict=False)
        use_stale = stale and (not current or rng.random() < STALE_SHARE)
        match = pick(rng, stale if use_stale else current)
        before = snapshot(ws)
        try:
            ws.apply(match)
        except TransformationError:
            assert_unchanged(ws, before)
            outcomes.append(("failed", match.transformation))
            continue
        outcomes.append(("applied", match.transformation))
        ws.sdfg.validate()
        report = ws.verify()
        assert report.match, f"{model} after {outcomes}: {report.text()}"
        stale.extend(current)
    assert any(kind == "applied" for kind, _ in outcomes), outcomes
    again = workbench.open_session(tmp_path / "session")
    assert exact(again) == exact(ws) and again.history == ws.history


def test_half_applied_transformations_roll_back(tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "session")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    weights_before = {k: v.copy() for k, v in ws.model.weights.items()}
    with registered(*half_applying_transformations()):
        for name in ("RaisesAfterDamageForTest", "LeavesInvalidForTest"):
            match = next(m for m in ws.transformations(predict=False) if m.transformation == name)
            before = snapshot(ws)
            with pytest.raises(TransformationError, match="session is unchanged"):
                ws.apply(match)
            assert_unchanged(ws, before)
    assert sorted(ws.model.weights) == sorted(weights_before)
    assert all(np.array_equal(ws.model.weights[k], v) for k, v in weights_before.items())
    # a stale match (its node is gone) fails the same way
    gone = Match("ExpandToMaps", (("node", "main:op:/no/such/node#0"),), "expand nothing")
    before = snapshot(ws)
    with pytest.raises(TransformationError):
        ws.apply(gone)
    assert_unchanged(ws, before)
    assert ws.verify().match


def test_compiler_error_names_the_onnx_node_and_the_session_stays_usable():
    ws = workbench.open("mlp")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps" and "/fc1/Gemm" in m.description))
    with registered(break_transformation_class()):
        ws.apply(next(m for m in ws.transformations(predict=False)
                      if m.transformation == "WriteBadCppForTest"))
    with pytest.raises(CompileError) as failed:
        ws.build()
    e = failed.value
    assert e.node == "/fc1/Gemm"
    assert "no_such_function_in_cpp" in e.first_error and "error:" in e.first_error
    assert "ONNX node '/fc1/Gemm'" in str(e) and e.first_error in str(e)
    source = e.first_error.split(":")[0]
    assert source.startswith(e.sources) and BAD_CODE in open(source).read()
    assert e.exit_code == 1
    # the session is as it was: undo and the program builds and verifies; redo fails again
    assert ws.undo() and ws.verify().match
    assert ws.redo()
    with pytest.raises(CompileError):
        ws.verify()
    ws.undo()
    assert ws.verify().match
