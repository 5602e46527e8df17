"""The desktop workbench, driven offscreen with pytest-qt.

The whole flow on ``mlp`` and ``bert-layer``: open, select a node, list
its matches, apply one (a fusion when the library has one, else
ExpandToMaps), see the graph and history change, undo, verify and profile
in the worker, and see the plot, the title and the status bar show it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from PyQt5.QtCore import QSettings, Qt  # noqa: E402

from gui.qtapp import ensure_app, has_display  # noqa: E402

ensure_app()   # before pytest-qt's qapp: same fonts as the window and the screenshots
from gui.main_window import MainWindow  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIRST_OP = {"mlp": "/fc1/Gemm", "bert-layer": "/attention/self/query/MatMul"}


@pytest.fixture
def window(qtbot, tmp_path):
    """A shown window with its own settings file (test_gui_faults.py uses it too)."""
    w = MainWindow(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.ctl.runner.shutdown(timeout_ms=300_000)  # a cancelled compile may still be winding down


def wait_ready(qtbot, w, timeout=120_000):
    """Session, layout and analysis done, matches listed (predictions may still run)."""
    runner = w.ctl.runner
    qtbot.waitUntil(lambda: not any(runner.busy(lane) for lane in ("session", "layout", "analysis"))
                    and w.graph.desc is not None and w.ctl.matches_state != "listing",
                    timeout=timeout)


def wait_idle(qtbot, w, timeout=120_000):
    """Everything done, predictions included."""
    qtbot.waitUntil(lambda: w.ctl.runner.idle() and w.graph.desc is not None
                    and w.ctl.matches_state == "done", timeout=timeout)


def open_model(qtbot, w, name):
    w.open_model(name)
    wait_ready(qtbot, w)
    assert w.ctl.ws is not None and w.ctl.ws.name == name


def graph_signature(w):
    return sorted((n.kind, n.title, n.subtitle) for n in w.graph.desc.nodes.values())


def pick_match(qtbot, w, node_ident):
    """A fusion match of the node if the library has one, else ExpandToMaps on it."""
    fusion = w.transforms.matches_by_level["fusion"]
    if fusion:
        return fusion[0]
    return next(m for m in w.transforms.matches_by_level["local"]
                if m.transformation == "ExpandToMaps" and node_ident in m.nodes)


@pytest.mark.parametrize("model", ["mlp", "bert-layer"])
def test_whole_flow(qtbot, window, model):
    w, ctl = window, window.ctl
    ctl.profile_repeat, ctl.profile_warmup = 3, 1
    open_model(qtbot, w, model)
    ws = ctl.ws
    state = ws.sdfg.states()[0]
    assert len(w.graph.node_items) == len(state.nodes())
    assert len(w.graph.edge_items) == len(state.edges())
    assert model in w.windowTitle() and "not verified" in w.windowTitle()
    assert w.history.tree.topLevelItemCount() == 1
    whole_graph = sum(len(v) for v in w.transforms.matches_by_level.values())
    assert whole_graph > 0

    # select a node by name: the matches shrink to those touching it
    assert w.graph.find_node(FIRST_OP[model])
    wait_idle(qtbot, w)
    ident = ctl.selection[0]
    assert ctl.focus.subtitle == FIRST_OP[model]
    listed = [m for ms in w.transforms.matches_by_level.values() for m in ms]
    assert listed and all(ident in m.nodes for m in listed)
    assert all(m.delta_bytes is not None for m in listed)
    props = dict(w.properties.rows())
    assert props["ONNX name"] == FIRST_OP[model] and "op type" in props

    # hovering a match highlights its nodes
    ctl.hover((ident,))
    item = w.graph.node_items[w.graph.desc.by_ident[ident]]
    assert item.highlighted
    ctl.hover(())
    assert not item.highlighted

    # apply (through the panel: select the row, press Apply)
    match = pick_match(qtbot, w, ident)
    before = graph_signature(w)
    assert w.transforms.select_match(match)
    w.transforms.apply_button.click()
    qtbot.waitUntil(lambda: ctl.ws.position == 1, timeout=60_000)
    wait_ready(qtbot, w)
    assert graph_signature(w) != before
    assert w.history.tree.topLevelItemCount() == 2
    assert match.transformation in w.history.tree.topLevelItem(1).text(1)
    assert "step 1/1" in w.windowTitle()
    assert w.history.undo_button.isEnabled() and not w.history.redo_button.isEnabled()

    # undo with the keyboard; the undone step stays listed (greyed) for redo
    w.activateWindow()
    w.graph.view.setFocus()
    qtbot.keyClick(w.graph.view, Qt.Key_Z, Qt.ControlModifier)
    qtbot.waitUntil(lambda: ctl.ws.position == 0, timeout=60_000)
    wait_ready(qtbot, w)
    assert graph_signature(w) == before
    assert w.history.tree.topLevelItemCount() == 2 and w.history.redo_button.isEnabled()

    # verify + profile in the worker; plot, title and status bar show it
    assert w.graph.find_node(FIRST_OP[model])
    wait_idle(qtbot, w)
    with qtbot.waitSignal(ctl.profiled, timeout=300_000):
        w.profile.profile_button.click()
        assert w.progress_bar.isVisible() and w.cancel_button.isEnabled()
    wait_idle(qtbot, w)
    assert w.profile.plotted["operators"] > 0 and w.profile.plotted["steps"] >= 1
    assert w.profile.ax_steps.lines, "the runtime-per-step line is drawn"
    assert "verified ✓" in w.windowTitle()
    assert "verified" in w.verify_label.text()
    assert w.profile.table.rowCount() == 4 and w.profile.table.item(0, 4).text()
    assert w.history.tree.topLevelItem(0).text(4).endswith("ms")
    assert "cblas" in w.code.text.toPlainText() or "for (" in w.code.text.toPlainText()
    assert w.code.highlighted_lines, "the selected operator's code is highlighted"
    timed = ctl.last_profile.per_operator
    hot = [i for i in w.graph.node_items.values() if i.gnode.operator in timed]
    assert hot and any(i.fill.name() != "#e6f2e1" for i in hot)


def test_errors_leave_the_session_unchanged(qtbot, window, tmp_path):
    from workbench.transformation_api import Match
    w, ctl = window, window.ctl
    open_model(qtbot, w, "mlp")
    ctl.apply(Match("ExpandToMaps", (("node", "main:op:/nowhere#0"),), "a node that is gone"))
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30_000)
    assert w.last_error[0] == "Transformation failed" and ctl.ws.position == 0
    assert "/nowhere" in w.last_error[1]
    wait_ready(qtbot, w)

    # cancel: the result is discarded, nothing is recorded
    ctl.profile()
    assert ctl.cancel()
    qtbot.waitUntil(ctl.runner.idle, timeout=120_000)
    assert ctl.last_profile is None and ctl.current_report() is None
    assert w.last_error[0] == "Transformation failed"   # a cancel is not an error

    # a recipe saved from the history replays on a fresh import
    expand = next(m for m in w.transforms.matches_by_level["local"]
                  if m.transformation == "ExpandToMaps")
    ctl.apply(expand)
    qtbot.waitUntil(lambda: ctl.ws.position == 1, timeout=60_000)
    wait_ready(qtbot, w)
    path = tmp_path / "steps.json"
    ctl.save_recipe(path)
    assert json.loads(path.read_text())["steps"][0]["transformation"] == "ExpandToMaps"
    import workbench
    fresh = workbench.open("mlp")
    fresh.optimize(str(path))
    assert fresh.position == 1

    # a saved session folder reopens at the same step
    if hasattr(workbench, "open_session"):
        before = ctl.ws
        ctl.save_session(tmp_path / "session")
        w.open_session(tmp_path / "session")
        qtbot.waitUntil(lambda: ctl.ws is not before and ctl.runner.idle()
                        and ctl.ws.position == 1 and bool(ctl.ws.history), timeout=60_000)
        assert ctl.ws.history[0]["transformation"] == "ExpandToMaps"


def test_open_by_drop_recent_files_and_bad_files(qtbot, window, tmp_path):
    from PyQt5.QtCore import QMimeData, QPointF, QUrl
    from PyQt5.QtGui import QDropEvent
    import sdfg_models
    w = window
    path = sdfg_models.path_for("mlp", tmp_path)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    w.dropEvent(QDropEvent(QPointF(5, 5), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))
    wait_ready(qtbot, w)
    assert w.ctl.ws.name == "mlp" and w.settings.value("recent", type=list) == [str(path)]
    assert [a.data() for a in w.recent_menu.actions()] == [str(path)]
    assert [a.text() for a in w.recent_menu.actions()] == [f"Model: {path}"]
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    w.open_model(str(bad))
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30_000)
    assert w.last_error[0] == "Open failed" and "broken.onnx" in w.last_error[1]
    assert w.ctl.ws.name == "mlp"   # the open session is kept


def test_nested_sdfg_expands_and_fallback_layout(qtbot, window):
    import workbench
    from gui import layout
    w = window
    ws = workbench.open("bert-layer")
    softmax = next(m for m in ws.transformations(predict=False)
                   if m.transformation == "ExpandToMaps" and "Softmax" in m.description)
    ws.apply(softmax)
    w.ctl.set_session(ws)
    wait_ready(qtbot, w)
    nested = [i for i in w.graph.node_items.values() if i.gnode.kind == "nsdfg"]
    assert nested and not nested[0].gnode.expanded
    collapsed = len(w.graph.node_items)
    w.graph._activated(nested[0])            # what a double-click does
    # the scene fills in slices and names its description once complete
    qtbot.waitUntil(lambda: len(w.graph.node_items) > collapsed and w.graph.desc is not None,
                    timeout=60_000)
    assert any(c.kind == "nsdfg" for c in w.graph.desc.clusters.values())
    assert any(i.gnode.sdfg is not ws.sdfg for i in w.graph.node_items.values())
    placed = layout.layered_layout(w.graph.desc)   # the no-Graphviz fallback
    assert set(placed.nodes) == set(w.graph.desc.nodes) and placed.clusters


def app(*args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=600)


def test_screenshot_command(tmp_path):
    out = tmp_path / "shot.png"
    proc = app("--quiet", "screenshot", "mlp", "-o", str(out), "--no-profile", "--select", "/Relu")
    assert proc.returncode == 0, proc.stderr
    from PyQt5.QtGui import QImage
    image = QImage(str(out))
    assert image.width() >= 1200 and image.height() >= 800
    proc = app("screenshot", "mlp", "-o", str(out), "--recipe", "no-such-recipe")
    assert proc.returncode == 2 and "unknown recipe" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_display_runs_the_headless_report(monkeypatch, capsys):
    import app as app_module
    import workbench.cli
    seen = []
    monkeypatch.setattr(workbench.cli, "main", lambda argv, extra=(): seen.append(argv) or 0)
    for key in ("DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert not has_display()
    assert app_module.main([]) == 0
    assert seen[-1] == ["verify", "bert-layer"] and "no display" in capsys.readouterr().out
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM")
    assert has_display()
    assert app_module.main([]) == 0 and seen[-1] == ["gui", "bert-layer"]
