"""Recipes survive one bad step; replays and recipes from another model change nothing;
exported programs draw the same seeded inputs as the workbench."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import workbench
from fault_helpers import half_applying_transformations, registered
from workbench.errors import BadInputError, TransformationError
from workbench.session.history import canonical_json
from workbench.runtime.reference import random_inputs
from workbench.session.recipe_run import RecipeResult

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=cwd)


def test_a_failing_step_is_skipped_and_the_rest_applies(tmp_path):
    raises, _ = half_applying_transformations()
    ws = workbench.open("mlp")
    recipe = {"name": "with-a-bad-step", "steps": [
        {"transformation": "RemoveIdentity", "all": True},
        {"transformation": "RaisesAfterDamageForTest", "all": True},      # apply raises
        {"transformation": "GemmEpilogueFusion", "all": True},
        # real nodes, but not a pattern the transformation matches: no longer applies
        {"transformation": "OnePassSoftmax", "where": [["softmax", "main:op:/fc1/Gemm#0"]]},
        {"transformation": "InPlaceElementwise", "all": True}]}
    with registered(raises):
        result = ws.optimize(recipe)
    assert isinstance(result, RecipeResult) and result == ws.history
    assert [s.step for s in result.skipped] == [2, 4], result.text()
    assert result.skipped[0].transformation == "RaisesAfterDamageForTest"
    assert "failed halfway" in result.skipped[0].reason
    assert "/fc1/Gemm" in result.skipped[1].where
    assert {e["transformation"] for e in result} >= {"GemmEpilogueFusion"}
    report = ws.verify()
    assert report.match, report.text()   # the session stayed valid through the skips


def test_cli_prints_the_skips(tmp_path):
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"steps": [
        {"transformation": "OnePassSoftmax", "where": [["softmax", "main:op:/fc1/Gemm#0"]]},
        {"transformation": "GemmEpilogueFusion", "all": True}]}))
    proc = _run(ROOT / "app.py", "--quiet", "info", "mlp", "--recipe", recipe, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "skipped step 1 (OnePassSoftmax" in proc.stdout
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["recipe"]["steps"] >= 1 and len(info["recipe"]["skipped"]) == 1


def test_unknown_transformation_is_bad_input_before_any_step(tmp_path):
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"steps": [{"transformation": "GemmEpilogueFusion", "all": True},
                                            {"transformation": "NoSuchTransformation",
                                             "all": True}]}))
    ws = workbench.open("mlp")
    with pytest.raises(BadInputError, match="step 2 names transformation 'NoSuchTransformation'"):
        ws.optimize(recipe)
    assert ws.history == []
    proc = _run(ROOT / "app.py", "verify", "mlp", "--recipe", recipe)
    assert proc.returncode == 2 and "NoSuchTransformation" in proc.stderr


def _two_input_model(flip: bool = False) -> onnx.ModelProto:
    """y = relu(a @ w) * m: two inputs, so their order matters."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 8)).astype(
        np.float32), "w")
    inputs = [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 8]),
              helper.make_tensor_value_info("m", onnx.TensorProto.FLOAT, [2, 8])]
    nodes = [helper.make_node("MatMul", ["a", "w"], ["h"], name="/mm"),
             helper.make_node("Relu", ["h"], ["r"], name="/relu"),
             helper.make_node("Mul", ["r", "m"], ["y"], name="/mask")]
    graph = helper.make_graph(nodes, "two", inputs[::-1] if flip else inputs,
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
                              initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_script_replays_exactly_and_refuses_another_model(tmp_path):
    ws = workbench.open("mlp")
    ws.optimize("default")
    ws.save_script(tmp_path / "steps.py")
    proc = _run(tmp_path / "steps.py")
    assert proc.returncode == 0 and "MATCH" in proc.stdout, proc.stdout + proc.stderr
    other = tmp_path / "other.onnx"
    onnx.save(_two_input_model(), other)
    proc = _run(tmp_path / "steps.py", other)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "recorded on another model" in proc.stderr and "Traceback" not in proc.stderr
    fresh = workbench.open(other)
    before = canonical_json(fresh.sdfg)
    with pytest.raises(BadInputError):
        fresh.replay([e for e in ws.recipe_steps()], fingerprint=None)
    assert fresh.history == [] and canonical_json(fresh.sdfg) == before


def test_replay_stops_at_the_first_failing_step_and_rewinds():
    ws = workbench.open("mlp")
    ws.optimize("default")
    steps = ws.recipe_steps()
    steps.insert(1, {**steps[0]})  # the same match again: it no longer applies
    fresh = workbench.open("mlp")
    with pytest.raises(TransformationError, match="replay step 2"):
        fresh.replay(steps)
    assert fresh.position == 0 and fresh.history == []


@pytest.mark.parametrize("flip", [False, True])
def test_export_of_a_two_input_model_checks_in_a_fresh_process(tmp_path, flip):
    """The exported runner and the workbench draw the same inputs whatever the order of
    the program's arguments (the DaCe program sorts them by name)."""
    model = tmp_path / "two.onnx"
    onnx.save(_two_input_model(flip), model)
    ws = workbench.open(model)
    result = ws.export(tmp_path / "out")
    assert result["check"]["match"]
    proc = _run("run.py", "--check", cwd=tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = json.loads((tmp_path / "out" / "program.json").read_text())
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        import importlib
        runner = importlib.import_module("run")
        importlib.reload(runner)
        drawn = runner.Program.random_inputs(type("P", (), {"spec": spec})(), 0)
    finally:
        sys.path.remove(str(tmp_path / "out"))
    mine = random_inputs(ws.inputs, 0)
    assert list(drawn) == list(mine)
    assert all(np.array_equal(drawn[k], mine[k]) for k in mine)


def _pairing_transformation():
    """Marks two operators in a row; every operator joins one pair at most, so after one
    pair is marked, the overlapping pair found with it no longer applies (stale)."""
    from transforms.graph import ident, onnx_ops
    from workbench import nodeid
    from workbench.transformation_api import Transformation

    class MarkPairs(Transformation):
        level, name, description = "global", "MarkPairsForTest", "marks operators in pairs"

        def find(self, sdfg, weights=None):
            free = [(s, n) for s, n in onnx_ops(sdfg) if not n.attrs.get("paired_for_test")]
            return [self.match({"a": ident(sdfg, s, a), "b": ident(sdfg, s, b)},
                               f"pair {a.onnx_name} with {b.onnx_name}")
                    for (s, a), (_, b) in zip(free, free[1:])]

        def apply(self, sdfg, match, weights=None):
            _, _, found = nodeid.resolve_all(sdfg, match.where_dict())
            if any(n.attrs.get("paired_for_test") for n in found.values()):
                raise TransformationError(f"{match.description}: already paired")
            for node in found.values():
                node.set_attrs({**node.attrs, "paired_for_test": 1})

    return MarkPairs


def test_an_all_step_finds_once_per_pass_and_keeps_stale_matches_out_of_the_skips(monkeypatch):
    from workbench import transformation_api as transform
    finds = []
    real = transform.find_matches

    def counting(t, *args, **kwargs):
        found = real(t, *args, **kwargs)
        finds.append((t.name, len(found)))
        return found
    monkeypatch.setattr(transform, "find_matches", counting)
    ws = workbench.open("bert-layer")
    operators = len([n for n, _ in ws.sdfg.all_nodes_recursive()
                     if type(n).__name__ == "OnnxOp"])
    with registered(_pairing_transformation()):
        result = ws.optimize({"steps": [{"transformation": "MarkPairsForTest", "all": True},
                                        {"transformation": "ReshapeAsView", "all": True}]})
    assert result.skipped == [], result.text()
    paired = [e for e in result if e["transformation"] == "MarkPairsForTest"]
    reshapes = [e for e in result if e["transformation"] == "ReshapeAsView"]
    # one pass marks every other pair of the chain of operators and finds the pairs in
    # between stale (not reported); the second find has nothing left
    assert len(paired) == operators // 2 and len(reshapes) >= 4, result.text()
    assert [n for name, n in finds if name == "MarkPairsForTest"] == [operators - 1, 0], finds
    assert [n for name, n in finds if name == "ReshapeAsView"] == [len(reshapes), 0], finds
    assert real(transform.get("ReshapeAsView"), ws.sdfg) == []   # the fixed point
