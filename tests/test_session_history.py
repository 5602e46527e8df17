"""History, failed steps, recipes, scripts and session folders."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workbench
from workbench.errors import BadInputError, TransformationError
from workbench.session.history import canonical_json
from workbench.transformation_api import Match

ROOT = Path(__file__).resolve().parents[1]


def exact(ws) -> str:
    return json.dumps(ws.sdfg.to_json(), sort_keys=True)


def first(ws, name):
    return next(m for m in ws.transformations(predict=False) if m.transformation == name)


@pytest.fixture
def mlp():
    return workbench.open("mlp")


def test_undo_redo_goto_restore_identical_json(mlp):
    j0 = exact(mlp)
    mlp.apply(first(mlp, "ExpandToMaps"))
    j1 = exact(mlp)
    mlp.apply(first(mlp, "ChooseImplementation"))
    j2 = exact(mlp)
    assert len({j0, j1, j2}) == 3 and mlp.position == 2 and len(mlp.history) == 2
    assert mlp.undo() and exact(mlp) == j1
    assert mlp.undo() and exact(mlp) == j0 and mlp.history == []
    assert not mlp.undo()
    assert mlp.redo() and exact(mlp) == j1
    mlp.goto(2)
    assert exact(mlp) == j2
    entry = mlp.history[0]
    assert {"transformation", "where", "bytes_before", "bytes_after", "time"} <= set(entry)


def test_new_step_after_undo_drops_the_redo_branch(mlp):
    mlp.apply(first(mlp, "ExpandToMaps"))
    mlp.undo()
    mlp.apply(first(mlp, "ChooseImplementation"))
    assert len(mlp.steps) == 1 and not mlp.redo()


def test_failing_apply_leaves_the_session_identical(mlp):
    j0 = exact(mlp)
    gone = Match("ExpandToMaps", (("node", "main:op:/no/such/node#0"),), "expand nothing")
    with pytest.raises(TransformationError, match="no longer exists"):
        mlp.apply(gone)
    assert exact(mlp) == j0 and mlp.history == []

    class Broken(workbench.transformation_api.Transformation):
        level, name, description = "global", "BrokenForTest", "half-applies, then fails"

        def find(self, sdfg):
            return []

        def apply(self, sdfg, match):
            sdfg.arrays.clear()  # damage, then fail validation
            raise RuntimeError("boom")

    workbench.transformation_api._REGISTRY["BrokenForTest"] = Broken()
    try:
        with pytest.raises(TransformationError, match="session is unchanged"):
            mlp.apply(Match("BrokenForTest", ()))
    finally:
        del workbench.transformation_api._REGISTRY["BrokenForTest"]
    assert exact(mlp) == j0
    assert mlp.verify().match


def test_recipe_and_script_replay_the_same_sdfg(mlp, tmp_path):
    mlp.apply(first(mlp, "ExpandToMaps"))
    mlp.apply(first(mlp, "MapTiling"))
    mlp.save_recipe(tmp_path / "steps.json")
    mlp.save_script(tmp_path / "steps.py")
    replay = workbench.open("mlp")
    replay.optimize(tmp_path / "steps.json")
    assert canonical_json(replay.sdfg) == canonical_json(mlp.sdfg)
    namespace = {}
    exec(compile((tmp_path / "steps.py").read_text(), "steps.py", "exec"), namespace)
    assert canonical_json(namespace["replay"]().sdfg) == canonical_json(mlp.sdfg)


def test_recipe_naming_a_node_the_model_never_had_changes_nothing(mlp, tmp_path):
    mlp.apply(first(mlp, "ExpandToMaps"))
    mlp.save_recipe(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    data["steps"].append({"transformation": "ExpandToMaps", "where": [["node", "main:op:/gone#0"]]})
    (tmp_path / "r.json").write_text(json.dumps(data))
    replay = workbench.open("mlp")
    before = canonical_json(replay.sdfg)
    with pytest.raises(BadInputError, match="step 2.*'/gone'.*another model"):
        replay.optimize(tmp_path / "r.json")
    assert replay.history == [] and canonical_json(replay.sdfg) == before


def test_session_folder_round_trip_and_corruption(tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    ws.apply(first(ws, "ExpandToMaps"))
    ws.apply(first(ws, "ChooseImplementation"))
    again = workbench.open_session(tmp_path / "s")
    assert exact(again) == exact(ws) and len(again.history) == 2 and not again.recovery_note
    (tmp_path / "s" / "steps" / "0002.sdfgz").write_bytes(b"not gzip")
    damaged = workbench.open_session(tmp_path / "s")
    assert damaged.position == 1 and "step 2" in damaged.recovery_note
    with pytest.raises(workbench.BadInputError, match="not a session folder"):
        workbench.open_session(tmp_path / "nothing")


CHILD = r"""
import os, sys, time
import workbench, workbench.session.folder as persist
folder, flag = sys.argv[1], sys.argv[2]
ws = workbench.open("mlp", session_dir=folder)
ws.apply(next(m for m in ws.transformations(predict=False) if m.transformation == "ExpandToMaps"))
real = persist.atomic_write
def slow(path, data):
    open(flag, "w").close()          # the parent kills us now, mid-write
    time.sleep(60)
    real(path, data)
persist.atomic_write = slow
ws.apply(next(m for m in ws.transformations(predict=False) if m.transformation == "ChooseImplementation"))
"""


def test_kill_9_mid_step_reopens_at_the_last_completed_step(tmp_path):
    folder, flag = tmp_path / "s", tmp_path / "writing"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), str(flag)], env=env)
    deadline = time.time() + 300
    while not flag.exists() and child.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert flag.exists(), "the child never reached its second step"
    child.send_signal(signal.SIGKILL)
    child.wait()
    ws = workbench.open_session(folder)
    assert ws.position == 1 and [h["transformation"] for h in ws.history] == ["ExpandToMaps"]
    assert not ws.recovery_note
    assert ws.verify().match


def test_undo_and_redo_to_built_states_compile_nothing():
    """Builds are cached by the SDFG's canonical JSON: going back and forth between
    built states loads the programs already compiled."""
    import workbench
    ws = workbench.open("mlp")
    first = ws.build()
    ws.apply(next(m for m in ws.transformations() if m.transformation == "GemmEpilogueFusion"))
    second = ws.build()
    assert second is not first
    ws.undo()
    assert ws.build() is first
    ws.redo()
    assert ws.build() is second
    assert ws.verify().match


def test_data_movement_is_analysed_once_per_sdfg(monkeypatch):
    """An apply analyses only the step's region (before and after, on small copies), never
    the whole graph again; predictions do not re-analyse the current one; undo and redo
    hand back each step's own figure without analysing anything."""
    from workbench.analysis import movement
    ws = workbench.open("mlp")
    calls = []
    real = movement.data_movement
    monkeypatch.setattr(movement, "data_movement",
                        lambda sdfg, names=None, **kw: calls.append(sdfg) or real(sdfg, names, **kw))
    imported = ws.data_movement()
    assert ws.data_movement() is imported and len(calls) == 1
    matches = ws.transformations()                      # one analysis per match's trial
    from workbench import transformation_api as transform
    measured = [m for m in matches if m.delta_bytes is not None
                and not transform.get(m.transformation).same_bytes]   # those predict 0
    assert len(calls) == 1 + len(measured)
    assert all(sdfg is not ws.sdfg for sdfg in calls[1:])
    calls.clear()
    chosen = next(m for m in matches if m.delta_bytes and m.transformation == "GemmEpilogueFusion")
    entry = ws.apply(chosen)
    assert ws.timeline.current.shape is not None        # spliced into the live graph
    whole = ws.sdfg.nodes()[0].number_of_nodes()
    assert len(calls) == 2 and all(sdfg is not ws.sdfg for sdfg in calls)  # the region, twice
    assert all(sdfg.nodes()[0].number_of_nodes() < whole for sdfg in calls)
    # the prediction (memlets propagated in the throwaway trial) is what the apply measured
    assert entry["bytes_after"] - entry["bytes_before"] == chosen.delta_bytes
    assert ws.data_movement().moved_bytes == entry["bytes_after"] and len(calls) == 2
    # the kept figure is the whole graph's, operator by operator
    assert movement.same_figure(ws.data_movement(), real(ws.sdfg, ws.operator_names()))
    calls.clear()
    ws.undo()
    assert ws.data_movement() is imported and not calls
    ws.redo()
    assert ws.data_movement().moved_bytes == entry["bytes_after"] and not calls


def test_steps_come_back_exactly_however_far(mlp):
    """Spliced steps share one SDFG object and come back exactly by their Shape, however
    many steps lie between; a step applied to a whole copy keeps its own object, and
    one whose object was dropped (more than history.LIVE visited since) is read back
    from its JSON."""
    from workbench.session import history
    j0 = exact(mlp)
    imported = mlp.sdfg
    mlp.apply(first(mlp, "ExpandToMaps"))
    assert mlp.sdfg is imported and mlp.timeline.current.shape is not None
    j1 = exact(mlp)
    assert mlp.undo() and exact(mlp) == j0 and mlp.redo() and exact(mlp) == j1
    applied, refused = 1, set()
    while applied <= history.LIVE:
        match = next(m for m in mlp.transformations(predict=False)
                     if m.transformation != "ChooseImplementation" and m.where not in refused)
        try:
            mlp.apply(match)
            applied += 1
        except TransformationError:
            refused.add(match.where)
    last = exact(mlp)
    mlp.goto(0)
    assert exact(mlp) == j0
    mlp.goto(1)
    assert exact(mlp) == j1
    mlp.goto(applied)
    assert exact(mlp) == last
    whole = [s for s in mlp.timeline.steps[1:] if s.shape is None]
    assert all(s.sdfg is not imported for s in whole)   # a whole step has its own object


def test_whole_steps_beyond_the_live_ones_come_back_from_their_json(monkeypatch):
    """Where steps cannot be spliced (a program of several states) every step is applied
    to a whole copy: older step objects are dropped to JSON and read back exactly."""
    from workbench.session import history, working_graph
    monkeypatch.setattr(working_graph, "splice_able", lambda sdfg: False)
    ws = workbench.open("mlp")
    jsons = [exact(ws)]
    refused = set()
    while len(jsons) <= history.LIVE + 1:
        match = next((m for m in ws.transformations(predict=False)
                      if m.transformation != "ChooseImplementation" and m.where not in refused),
                     None)
        if match is None:
            break
        try:
            ws.apply(match)
            jsons.append(exact(ws))
        except TransformationError:
            refused.add(match.where)
    assert all(s.shape is None for s in ws.timeline.steps)
    assert len(jsons) > history.LIVE + 1, "not enough steps to drop one"
    assert ws.timeline[0].sdfg is None and ws.timeline[1].sdfg is None   # dropped
    ws.goto(0)
    assert exact(ws) == jsons[0]
    ws.goto(1)
    assert exact(ws) == jsons[1] and ws.timeline[1].sdfg is ws.sdfg


def test_matches_and_predictions_are_found_once_per_step(monkeypatch):
    """A selection's list filters the step's list; a new step (and undo) lists afresh."""
    from workbench import transformation_api as transform
    ws = workbench.open("mlp")
    finds = []
    real = transform.find_matches
    monkeypatch.setattr(transform, "find_matches",
                        lambda t, *a, **kw: finds.append(t.name) or real(t, *a, **kw))
    everything = ws.transformations(predict=False)
    per_step = len(finds)
    assert per_step == len(transform.all_transformations())
    some = everything[0].nodes[:1]
    chosen = ws.transformations(nodes=some, predict=False)
    assert len(finds) == per_step and chosen and all(set(m.nodes) & set(some) for m in chosen)
    assert chosen == [m for m in everything if set(m.nodes) & set(some)]
    predicted = ws.transformations(nodes=some)
    assert [ws.predict(m).delta_bytes for m in chosen] == [m.delta_bytes for m in predicted]
    ws.apply(next(m for m in predicted if m.delta_bytes is not None))
    ws.transformations(predict=False)
    assert len(finds) == 2 * per_step
    ws.undo()
    assert ws.transformations(predict=False) == everything and len(finds) == 3 * per_step
