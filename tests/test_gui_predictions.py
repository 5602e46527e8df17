"""Byte predictions that arrive in seconds, and profiles that name the graph's nodes.

* The region prediction (``workbench.analysis.prediction``) equals the
  whole-graph measurement on every match of bundled models (imported and
  after ``auto``) and on a sample of a ViT-tiny export's matches.
* The window predicts the rows on screen first, sorts rows as predictions
  arrive and folds the matches that change nothing under "No change".
* After ``auto`` on mbconv every profiled kernel colours a node of the graph,
  the chart names nodes by their labels, and a busy machine is said so.
"""
import os
import random
from pathlib import Path

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"
pytest.importorskip("pytestqt")

from PyQt5.QtCore import QSettings, Qt  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
import workbench  # noqa: E402
import workbench.analysis.prediction as prediction  # noqa: E402
from workbench import transformation_api as transform  # noqa: E402
from gui import timing_check  # noqa: E402
from gui.controller import predict_all  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.profile_names import node_times  # noqa: E402
from gui.match_rows import GROUP, NO_CHANGE, LEVELS, match_items  # noqa: E402

# where `python tests/exports/make_exports.py --full vit` writes the ViT-tiny export
FULL_EXPORTS = Path(os.environ.get("WORKBENCH_ZOO_FULL", "~/.cache/dace-workbench/zoo-full"))


def whole(ws, match):
    try:
        return ws._predict_whole(match)
    except Exception:
        return None


def check_exact(ws, matches) -> int:
    """Assert region == whole graph for ``matches``; returns how many the region answered."""
    answered = 0
    for m in matches:
        expected = whole(ws, m)
        try:
            local = ws._predict_local(m)
        except Exception:
            local = None   # the session then asks the whole graph
        if local is not None:
            answered += 1
            assert local == expected, (m.transformation, m.description, local, expected)
        assert ws.predict(m).delta_bytes == expected, (m.transformation, m.description)
    return answered


@pytest.mark.parametrize("model,recipe", [("mlp", None), ("mbconv", None), ("resblock", None),
                                          ("bert-layer", None), ("mbconv", "auto"),
                                          ("mbconv", "train"), ("mlp", "train")])
def test_region_prediction_equals_whole_graph(monkeypatch, model, recipe):
    """"train": the SGD training program, whose shape and axes constants are shared by
    dozens of readers (regions leave those readers out, ``StateIndex.region``)."""
    monkeypatch.setattr(prediction, "MAX_REGION_SHARE", 1.0)   # the region path on every match
    ws = workbench.open(model)
    if recipe == "train":
        ws = ws.training(loss="mse", optimizer="sgd")
    elif recipe:
        ws.optimize(recipe)
    matches = ws.transformations(predict=False)
    answered = check_exact(ws, matches)
    # global ones decide on the whole program (PersistentAllocation, RecomputeInBackward's
    # peak memory) and are measured whole
    local = [m for m in matches if transform.get(m.transformation).level != "global"]
    assert answered >= len(local) and answered > 0


def _local(ws, match):
    try:
        return ws._predict_local(match)
    except AssertionError:
        raise
    except Exception:
        return "refused"


def test_equal_regions_are_measured_once(monkeypatch):
    """Regions equal up to names (``region_key``) are measured once, in this step and the
    next; each remembered figure equals the region measured again."""
    monkeypatch.setattr(prediction, "_MEASURED", {})
    ws = workbench.open("bert-layer").training(loss="mse", optimizer="sgd")
    matches = ws.transformations(predict=False)
    measured = []
    real = prediction._measure
    monkeypatch.setattr(prediction, "_measure", lambda *a: measured.append(a[3]) or real(*a))
    first = [_local(ws, m) for m in matches]
    answered = [f for f in first if f not in (None, "refused")]
    assert len(answered) > 100 and len(measured) < 0.8 * len(answered), \
        (len(answered), len(measured))
    monkeypatch.setattr(ws, "full_checks", True)   # measure every one again and compare
    assert [_local(ws, m) for m in matches] == first
    # the next step: the regions it left alone are not measured again
    ws.apply(next(m for m in matches if m.transformation == "ExpandToMaps"))
    measured.clear()
    monkeypatch.setattr(ws, "full_checks", False)
    again = ws.transformations(predict=False)
    [_local(ws, m) for m in again]
    assert len(measured) < 0.1 * len(again), (len(measured), len(again))


def test_region_prediction_on_a_vit_export():
    path = FULL_EXPORTS.expanduser() / "vit.onnx"
    if not path.exists():
        pytest.skip(f"no ViT-tiny export at {path} (make_exports.py --full vit)")
    ws = workbench.open(str(path), input_shapes={"batch": 1})   # as zoo:vit-full opens it
    matches = ws.transformations(predict=False)
    by_kind = {}
    for m in matches:
        by_kind.setdefault(m.transformation, []).append(m)
    rng = random.Random(0)
    sample = [m for group in by_kind.values() for m in rng.sample(group, min(4, len(group)))]
    answered = check_exact(ws, sample)
    assert len(matches) > 800 and answered >= len(sample) - 2


def test_rows_on_screen_are_predicted_first():
    ws = workbench.open("mbconv")
    matches = ws.transformations(predict=False)
    wanted = [matches[-1], matches[len(matches) // 2]]
    asked, predict = [], ws.predict

    def recording(m):
        asked.append(m)
        return predict(m)
    ws.predict = recording

    class Job:
        cancelled = False
        reports = []

        def report(self, value):
            self.reports.append(value)
    job = Job()
    out = predict_all(ws, matches, job, ws.lock, wanted=lambda: wanted)
    assert asked[:2] == wanted and asked[2] == matches[0]
    assert len(asked) == len(matches) and [m.transformation for m in out] == \
        [m.transformation for m in matches]
    # the list went to the window as soon as the wanted rows were done
    first = job.reports[0]
    assert all(first[matches.index(w)].delta_bytes is not None for w in wanted
               if whole(ws, w) is not None)


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.ctl.shutdown(timeout_ms=300_000)   # background step checks included


def wait_idle(qtbot, w, timeout=300_000):
    qtbot.waitUntil(lambda: w.ctl.ws is not None and w.ctl.runner.idle()
                    and w.graph.desc is not None and w.ctl.matches_state == "done",
                    timeout=timeout)


def test_no_change_group_and_sorted_rows(qtbot, window):
    w = window
    w.open_model("bert-layer")
    wait_idle(qtbot, w)
    seen_group = False
    for level in LEVELS:
        tree = w.transforms.trees[level]
        w.transforms.tabs.setCurrentWidget(tree)   # a tab is filled when shown
        found = w.transforms.matches_by_level[level]
        unchanged = [m for m in found if m.delta_bytes == 0]
        groups = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
        folded = [g for g in groups if g.data(0, GROUP) == NO_CHANGE]
        if not unchanged:
            assert not folded
            continue
        seen_group = True
        assert len(folded) == 1 and groups[-1] is folded[0] and not folded[0].isExpanded()
        rows = [folded[0].child(j).data(0, Qt.UserRole) for j in range(folded[0].childCount())]
        assert sorted(map(id, rows)) == sorted(map(id, unchanged))
        for g in groups[:-1]:   # the other groups: changes only, the largest saving first
            deltas = [g.child(j).data(0, Qt.UserRole).delta_bytes for j in range(g.childCount())]
            assert 0 not in deltas
            known = [d for d in deltas if d is not None]
            assert known == sorted(known)
        assert len(match_items(tree)) == len(found)
    assert seen_group   # bert-layer has matches that move the same bytes


def test_selection_rows_first_and_on_screen_tracked(qtbot, window):
    w = window
    w.open_model("mbconv")
    wait_idle(qtbot, w)
    ops = [n for n in w.graph.desc.nodes.values() if n.kind == "onnx"]
    w.ctl.set_selection([ops[0].ident])
    wait_idle(qtbot, w)
    listed = [m for ms in w.transforms.matches_by_level.values() for m in ms]
    assert listed and all(ops[0].ident in m.nodes for m in listed)
    assert all(m.delta_bytes is not None for m in listed
               if m.transformation != "PersistentAllocation")
    # what the worker reads first is the visible rows of the current tab (none waiting now)
    assert w.ctl.on_screen == [] and w.transforms.on_screen() == []
    # with the whole graph's rows still waiting, the rows at the top of the tab are first
    w.ctl.set_selection(())
    wait_idle(qtbot, w)
    with w.ctl.lock:
        waiting = w.ctl.ws.transformations(predict=False)
    w.transforms.show_matches(waiting, False)
    tree = w.transforms.tabs.currentWidget()
    shown = [tree.topLevelItem(i).child(j).data(0, Qt.UserRole)
             for i in range(tree.topLevelItemCount()) if tree.topLevelItem(i).isExpanded()
             for j in range(tree.topLevelItem(i).childCount())]
    first = w.transforms.on_screen()
    assert first and w.ctl.on_screen == first and len(first) < len(shown)
    assert all(m.delta_bytes is None for m in first)
    assert [id(m) for m in first] == [id(m) for m in shown[:len(first)]]


def test_profile_names_meet_the_graph_after_auto(qtbot, window, monkeypatch):
    w, ctl = window, window.ctl
    ctl.profile_repeat, ctl.profile_warmup = 3, 1
    ctl.verify_steps = False   # sixteen background builds are not what this test is about
    w.open_model("mbconv")
    wait_idle(qtbot, w)
    done = []
    ctl.optimize("auto", on_done=lambda *_: done.append(1))
    qtbot.waitUntil(lambda: bool(done) and ctl.runner.idle(), timeout=300_000)
    wait_idle(qtbot, w)
    # the machine is "busy" while this profile runs: load above the cores
    monkeypatch.setattr(timing_check, "load_average", lambda: timing_check.cores() + 3.0)
    w.profile.threads.setValue(1)
    ctl.profile()
    qtbot.waitUntil(lambda: ctl.last_profile is not None and ctl.runner.idle(), timeout=600_000)
    prof = ctl.last_profile
    assert prof.threads == 1 and ctl.last_conditions.threads == 1
    raw = ctl.ws.profiles[-1]
    times, lost = node_times(raw, ctl.ws.sdfg, ctl.ws.operator_names())
    assert lost == [] and len(times) >= 6
    operators = {n.operator for n in w.graph.desc.nodes.values() if n.operator}
    assert set(prof.per_operator) <= operators
    # every operator node of the graph (fused ones included) is coloured by its time
    from gui.graph_canvas import heat
    hottest = max(prof.per_operator.values())
    onnx_items = [i for i in w.graph.node_items.values() if i.gnode.kind == "onnx"]
    assert len(onnx_items) == len(times)
    qtbot.waitUntil(lambda: all(
        i.fill == heat(prof.per_operator[i.gnode.operator] / hottest) for i in onnx_items),
        timeout=30_000)
    # the chart's bars are the nodes' labels: op type and ONNX name
    assert any(label.startswith("ConvEpilogue") for label in w.profile.plotted["labels"])
    # beside each bar, onnxruntime's nodes that cover the same ONNX operators
    assert prof.by_op and w.profile.plotted["against"]
    assert {n for r in prof.by_op for n in r["workbench"]} == set(prof.per_operator)
    assert "uncoloured: arrays" in w.profile.colours.text()
    # the fused convolutions' time counts as tensor contraction in the class table
    def runtime_share(cls):
        rows = ctl.analysis[1] if ctl.analysis else []
        return next((r.get("runtime_pct") for r in rows if r["class"] == cls), None)
    qtbot.waitUntil(lambda: runtime_share("tensor contraction") is not None, timeout=60_000)
    assert runtime_share("tensor contraction") > 50
    # the busy machine is said, visibly, with the details in the tooltip
    assert w.profile.timing.isVisible() and "Machine busy" in w.profile.timing.text()
    assert "several times too long" in w.profile.timing.toolTip()
    assert any("busy" in warning for warning in w.profile.warned)


def test_quiet_machine_and_wide_spread_warnings():
    from workbench.runtime.profiling import Profile
    quiet = timing_check.TimingConditions(threads=2, cores=2, load_before=0.5, load_after=1.2)
    steady = Profile(step=0, total_ms=10.0, min_ms=9.5, max_ms=11.0, samples_ms=[9.5, 10, 11])
    assert timing_check.warnings(quiet, steady) == []
    busy = timing_check.TimingConditions(threads=2, cores=2, load_before=0.4, load_after=3.1)
    assert busy.busy and "load 3.1" in timing_check.warnings(busy, steady)[0]
    spread = Profile(step=0, total_ms=168.0, min_ms=18.8, max_ms=300.0,
                     samples_ms=[18.8, 168.0, 300.0])
    said = timing_check.warnings(quiet, spread)
    assert len(said) == 1 and "8.9×" in said[0]
    assert timing_check.headline(said[0]) == "Wide spread: the median run took 8.9× the fastest."


def test_screenshot_says_what_was_not_ready(tmp_path, capsys):
    from gui.cli_screenshot import render
    ws = workbench.open("bert-layer")
    out = render(ws, str(tmp_path / "shot.png"), (1200, 800), (None, None, None),
                 timeout_s=0.0)
    assert out.exists() and out.stat().st_size > 10_000
    assert "not ready yet:" in capsys.readouterr().err


def test_window_lists_in_the_worker_process(qtbot, window):
    """Above ``replica_min_nodes`` the list comes from ``workbench.session.replica``: the
    same rows and byte predictions as the session's own, before and after a step."""
    w = window
    w.ctl.replica_min_nodes = 0   # every graph: mbconv stands in for a ViT-sized one
    answered, listing = [], w.ctl.replica.listing

    def recording(*args):
        answered.append(listing(*args))   # a ReplicaFailed (listed here instead) is not
        return answered[-1]
    w.ctl.replica.listing = recording
    w.open_model("mbconv")
    wait_idle(qtbot, w)
    assert w.ctl.replica.proc is not None and w.ctl.replica.proc.poll() is None

    def shown():
        return [m for ms in w.transforms.matches_by_level.values() for m in ms]

    def expected():
        return w.ctl.ws.transformations(predict=True)
    rows = shown()
    assert sorted(map(repr, rows)) == sorted(map(repr, expected()))   # delta_bytes in repr
    step = next(m for m in rows if m.transformation == "ConvEpilogueFusion")
    w.ctl.apply(step)
    qtbot.waitUntil(lambda: w.ctl.ws.position == 1, timeout=300_000)
    wait_idle(qtbot, w)
    assert sorted(map(repr, shown())) == sorted(map(repr, expected()))
    assert len(answered) == 2 and all(answered)
    assert w.ctl.analysis[0] == w.ctl.ws.data_movement()
    # the memory figure comes with it and stands beside the bytes moved
    assert w.ctl.analysis[2] == w.ctl.ws.memory()
    assert "peak live" in w.profile.movement.text()
    w.ctl.shutdown()
    assert w.ctl.replica.proc is None


def test_a_long_list_is_laid_out_over_several_turns(qtbot, window):
    """Rows are made ``ROW_CHUNK`` per turn of the event loop before the layout (a
    training program's 4,243 rows at once held the window for 110-125 ms)."""
    import dataclasses
    from gui import transform_panel
    w = window
    w.open_model("mbconv")
    wait_idle(qtbot, w)
    tree = w.transforms.tabs.currentWidget()
    level = next(k for k, t in w.transforms.trees.items() if t is tree)
    base = w.transforms.matches_by_level[level][0]
    n = 2 * transform_panel.ROW_CHUNK + 7
    many = [dataclasses.replace(base, description=f"{base.description} #{k}",
                                delta_bytes=-k) for k in range(n)]
    w.transforms.show_matches(many, True)
    assert len(match_items(tree)) < n          # the rows are still being made
    qtbot.waitUntil(lambda: len(match_items(tree)) == n, timeout=10_000)
    shown = [item.data(0, Qt.UserRole) for item in match_items(tree)]
    assert [m.delta_bytes for m in shown] == sorted(m.delta_bytes for m in many)
    assert w.transforms._spare == {}           # every row made ahead was used


def test_reports_queued_while_the_window_was_busy_arrive_as_the_newest(qtbot):
    """``Job.report``: a worker's intermediate results replace each other, so the UI
    thread shows only the newest (back-to-back listings held it for 150 ms)."""
    import threading
    from gui.worker import Runner
    runner = Runner()
    reported, release, got, done = threading.Event(), threading.Event(), [], []

    def work(job):
        for k in range(50):
            job.report(k)
        reported.set()
        release.wait(30)
        return "end"
    runner.submit("session", "reports", work, on_done=done.append, on_partial=got.append)
    assert reported.wait(30)    # all 50 reported before the UI thread looks
    qtbot.waitUntil(lambda: got == [49], timeout=10_000)
    release.set()
    qtbot.waitUntil(lambda: done == ["end"], timeout=10_000)
    assert got == [49]
