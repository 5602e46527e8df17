"""Nothing lost, and text that fits: the window's sessions and its panels' text.

A model opened in the window autosaves into a session folder of its own
(``gui.sessions``, under ``$WORKBENCH_SESSIONS``, which tests/conftest.py
points at a throw-away folder): closing the window and reopening it from
Open Recent gives back the same steps; Save Session As moves the folder;
closing while a step runs waits for it. At the default window size no
history step, property key, match or level tab is cut off (elided text
only where its tooltip has it whole).
"""
import json
import os
from pathlib import Path

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from PyQt5.QtCore import QSettings, Qt  # noqa: E402
from PyQt5.QtGui import QFontMetrics  # noqa: E402
from PyQt5.QtWidgets import QStyle, QToolButton  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()   # before pytest-qt's qapp: same fonts as the window and the screenshots
from gui import sessions  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.match_rows import match_items  # noqa: E402


def new_window(qtbot, settings_path):
    """A shown window at its default size; steps are not verified in the background
    (what is tested here is saving, not checking)."""
    w = MainWindow(QSettings(str(settings_path), QSettings.IniFormat))
    w.ctl.verify_steps = False
    qtbot.addWidget(w)
    w.show()
    return w


def wait_ready(qtbot, w, timeout=120_000):
    runner = w.ctl.runner
    qtbot.waitUntil(lambda: not any(runner.busy(lane) for lane in ("session", "layout", "analysis"))
                    and w.graph.desc is not None and w.ctl.matches_state != "listing",
                    timeout=timeout)


def apply(qtbot, w, transformation, description=None):
    """Apply the first listed match of ``transformation`` (the whole graph's list)."""
    qtbot.waitUntil(lambda: w.ctl.matches_state != "listing", timeout=120_000)
    listed = [m for ms in w.transforms.matches_by_level.values() for m in ms]
    match = next(m for m in listed if m.transformation == transformation
                 and (description is None or description in m.description))
    position = w.ctl.ws.position
    w.ctl.apply(match)
    qtbot.waitUntil(lambda: w.ctl.ws.position == position + 1, timeout=120_000)
    wait_ready(qtbot, w)
    return match


def manifest(folder) -> dict:
    return json.loads((Path(folder) / "session.json").read_text())


def steps_of(ws) -> list:
    return [(e["transformation"], e["where"]) for e in ws.steps]


def closed(qtbot, w):
    assert w.close(), "the window closes (no step is running)"
    assert not w.isVisible()


def test_steps_survive_close_and_reopen_from_recent(qtbot, tmp_path):
    settings = tmp_path / "settings.ini"
    w = new_window(qtbot, settings)
    w.open_model("mlp")
    wait_ready(qtbot, w)
    ws = w.ctl.ws
    folder = Path(ws.folder)
    # a folder of its own under the sessions root, named in the title, empty until a step
    assert folder.parent == sessions.root() and folder.name.startswith("mlp-")
    assert folder.is_dir() and not any(folder.iterdir())
    assert str(folder) in w.windowTitle()

    apply(qtbot, w, "GemmEpilogueFusion")
    assert manifest(folder)["position"] == 1 and len(manifest(folder)["steps"]) == 1
    apply(qtbot, w, "ExpandToMaps", "/fc3/Gemm")
    w.ctl.undo()   # undone, still redo-able: saved too
    qtbot.waitUntil(lambda: w.ctl.ws.position == 1, timeout=60_000)
    wait_ready(qtbot, w)
    saved = manifest(folder)
    assert saved["position"] == 1 and len(saved["steps"]) == 2
    before, sdfg_before = steps_of(ws), ws.sdfg.to_json()
    recent = w.settings.value("recent", type=list)
    assert recent == [str(folder), "mlp"]   # the session above the model it came from
    closed(qtbot, w)
    assert folder.is_dir() and manifest(folder) == saved

    # a new window: Open Recent names the session and the model apart; the session
    # opens with the same steps, at the same step, autosaving into the same folder
    w2 = new_window(qtbot, settings)
    actions = w2.recent_menu.actions()
    assert [a.data() for a in actions] == [str(folder), "mlp"]
    assert actions[0].text().startswith("Session: mlp, step 1 of 2") and str(folder) in \
        actions[0].text()
    assert actions[1].text() == "Model: mlp"
    actions[0].trigger()
    qtbot.waitUntil(lambda: w2.ctl.ws is not None, timeout=120_000)
    wait_ready(qtbot, w2)
    ws2 = w2.ctl.ws
    assert steps_of(ws2) == before and ws2.position == 1
    assert ws2.sdfg.to_json() == sdfg_before
    assert Path(ws2.folder) == folder and str(folder) in w2.windowTitle()
    assert w2.history.tree.topLevelItemCount() == 3
    assert "GemmEpilogueFusion" in w2.history.tree.topLevelItem(1).text(1)
    w2.ctl.redo()
    qtbot.waitUntil(lambda: w2.ctl.ws.position == 2, timeout=60_000)
    wait_ready(qtbot, w2)
    assert manifest(folder)["position"] == 2
    closed(qtbot, w2)


def test_save_session_as_moves_and_ctrl_s_saves(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    w.open_model("mlp")
    wait_ready(qtbot, w)
    folder = Path(w.ctl.ws.folder)
    # Ctrl+S writes the session now, even before a step, and makes it a recent session
    w.activateWindow()
    w.graph.view.setFocus()
    with qtbot.waitSignal(w.ctl.saved, timeout=60_000):
        qtbot.keyClick(w.graph.view, Qt.Key_S, Qt.ControlModifier)
    assert manifest(folder)["steps"] == []
    assert w.settings.value("recent", type=list)[0] == str(folder)
    assert str(folder) in w.statusBar().currentMessage()

    apply(qtbot, w, "GemmEpilogueFusion")
    # Save As into a folder with other files refuses and changes nothing
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    w.save_session(busy)
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30_000)
    assert w.last_error[0] == "Saving the session failed" and "not an empty folder" in \
        w.last_error[1]
    assert Path(w.ctl.ws.folder) == folder and sorted(p.name for p in busy.iterdir()) == \
        ["notes.txt"]
    w.last_error = None
    w.save_session(folder / "inner")   # moving it into itself would remove it
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30_000)
    assert "inside the session folder" in w.last_error[1] and not (folder / "inner").exists()

    # Save As moves the automatic folder: the old one is gone, the title, the recent list
    # and the autosave follow the new one
    moved = tmp_path / "kept" / "my-mlp"
    with qtbot.waitSignal(w.ctl.saved, timeout=60_000):
        w.save_session(moved)
    assert not folder.exists()
    assert Path(w.ctl.ws.folder) == moved and manifest(moved)["position"] == 1
    assert str(moved) in w.windowTitle() and str(folder) not in w.windowTitle()
    recent = w.settings.value("recent", type=list)
    assert recent[0] == str(moved) and str(folder) not in recent
    apply(qtbot, w, "ExpandToMaps", "/fc3/Gemm")
    assert len(manifest(moved)["steps"]) == 2

    # a folder the user chose is copied from, not removed
    again = tmp_path / "copy"
    with qtbot.waitSignal(w.ctl.saved, timeout=60_000):
        w.save_session(again)
    assert manifest(moved)["position"] == 2 and manifest(again)["position"] == 2
    assert Path(w.ctl.ws.folder) == again
    closed(qtbot, w)


def test_close_while_a_step_runs_waits_for_it(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    w.open_model("mlp")
    wait_ready(qtbot, w)
    folder = Path(w.ctl.ws.folder)
    match = next(m for m in w.transforms.matches_by_level["fusion"]
                 if m.transformation == "GemmEpilogueFusion")
    w.ctl.apply(match)   # its result reaches the window only through the event loop
    assert not w.close(), "the window stays open while the step runs"
    assert w.isVisible() and w.close_box is not None
    assert "Applying GemmEpilogueFusion is still running" in w.close_box.text()
    assert str(folder) in w.close_box.text()
    later = next(b for b in w.close_box.buttons() if b.text() == "Close When Done")
    later.click()
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=120_000)
    saved = manifest(folder)
    assert saved["position"] == 1 and saved["steps"][0]["transformation"] == "GemmEpilogueFusion"


def test_a_session_without_steps_leaves_no_folder(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    w.open_model("mlp")
    wait_ready(qtbot, w)
    first = Path(w.ctl.ws.folder)
    w.open_model("mlp")   # a second session in the same window (same second, too)
    qtbot.waitUntil(lambda: Path(w.ctl.ws.folder) != first, timeout=120_000)
    wait_ready(qtbot, w)
    second = Path(w.ctl.ws.folder)
    assert not first.exists() and second.is_dir()
    closed(qtbot, w)
    assert not second.exists()
    assert w.settings.value("recent", type=list) == ["mlp"]


def test_no_writable_sessions_folder_is_said_and_the_model_still_opens(qtbot, tmp_path,
                                                                        monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("WORKBENCH_SESSIONS", str(blocker / "sessions"))
    w = new_window(qtbot, tmp_path / "settings.ini")
    w.open_model("mlp")
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=120_000)
    wait_ready(qtbot, w)
    assert w.last_error[0] == "No session folder" and str(blocker) in w.last_error[1]
    assert "Save Session As" in w.last_error[1]
    assert w.ctl.ws.name == "mlp" and w.ctl.ws.folder is None
    assert "mlp — step 0/0 — not verified — DaCe Workbench" == w.windowTitle()
    closed(qtbot, w)


def test_recent_names_a_folder_that_is_gone(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    gone = tmp_path / "deleted-session"
    settings.setValue("recent", [str(gone), "mlp"])
    settings.sync()
    w = new_window(qtbot, tmp_path / "settings.ini")
    actions = w.recent_menu.actions()
    assert [(a.text(), a.isEnabled()) for a in actions] == [(f"Gone: {gone}", False),
                                                            ("Model: mlp", True)]
    closed(qtbot, w)


def test_help_menu(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    w.open_model("mlp")
    wait_ready(qtbot, w)
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help")
    items = {a.text(): a for a in menu.actions()}
    items["&Keyboard Shortcuts"].trigger()
    shortcuts = w.help.browser.toPlainText()
    for line in ("Save Session", "Ctrl+S", "Undo", "Ctrl+Z", "Verify", "Ctrl+R"):
        assert line in shortcuts
    items["&Where Is This Session?"].trigger()
    text = w.help.browser.toPlainText()
    assert str(w.ctl.ws.folder) in text and "written at the first step" in text
    readme = items["&README"].menu().actions()
    titles = [a.text() for a in readme]
    assert "The desktop workbench" in titles and len(titles) >= 5
    readme[titles.index("The desktop workbench")].trigger()
    assert w.help.dialog.windowTitle() == "The desktop workbench"
    assert "python app.py" in w.help.browser.toPlainText() and w.help.browser.isReadOnly()
    assert "## Command line" not in w.help.browser.toPlainText()   # one section only
    closed(qtbot, w)


# -- text that fits ---------------------------------------------------------------
def _margin(widget) -> int:
    """The item delegate's text margin on each side (QCommonStyle's viewItem text)."""
    return widget.style().pixelMetric(QStyle.PM_FocusFrameHMargin, None, widget) + 1


def shown_text(tree, item, column) -> str:
    """The text the view draws for ``item``'s cell: elided to the cell as Qt does."""
    rect = tree.visualRect(tree.indexFromItem(item, column))
    assert rect.width() > 0, f"column {column} of '{item.text(column)}' is not shown"
    return QFontMetrics(item.font(column)).elidedText(item.text(column), Qt.ElideRight,
                                                      rect.width() - 2 * _margin(tree))


def cut(tree, items, column, tooltip_ok=False) -> list:
    """The cells of ``column`` whose drawn text is cut (unless their tooltip is whole)."""
    return [item.text(column) for item in items
            if shown_text(tree, item, column) != item.text(column)
            and not (tooltip_ok and item.toolTip(column) == item.text(column))]


def rows(tree) -> list:
    return [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]


def tabs_fit(w):
    tabs = w.transforms.tabs
    bar = tabs.tabBar()
    assert [bar.tabText(i).split(" ")[0] for i in range(bar.count())] == \
        ["local", "fusion", "layout", "global"]
    for i in range(bar.count()):
        need = QFontMetrics(bar.font()).horizontalAdvance(bar.tabText(i))
        assert bar.tabRect(i).width() >= need, bar.tabText(i)
    assert bar.tabRect(bar.count() - 1).right() < tabs.width()
    assert not any(b.isVisible() for b in bar.findChildren(QToolButton)), "scroll arrows"


def test_text_fits_at_the_default_size(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    assert (w.width(), w.height()) == (1600, 1000)
    w.open_model("mlp")
    wait_ready(qtbot, w)
    apply(qtbot, w, "GemmEpilogueFusion")
    apply(qtbot, w, "TransientReuse")
    qtbot.waitUntil(lambda: w.ctl.matches_state == "done", timeout=120_000)
    qtbot.wait(50)   # let the views lay out

    history = w.history.tree
    steps = rows(history)
    assert len(steps) == 3 and "fuse /Relu into /fc1/Gemm as its epilogue" in steps[1].text(1)
    for column in range(history.columnCount()):
        assert cut(history, steps, column) == [], f"history column {column}"

    # level tabs: whole, no scroll arrows, inside the panel
    tabs_fit(w)

    # matches: every row whole in every level (its cell; the tree scrolls sideways)
    for level, tree in w.transforms.trees.items():
        w.transforms.tabs.setCurrentWidget(tree)   # a tab is filled when shown
        qtbot.wait(50)
        # rows in a folded group (the "No change" group starts folded) are not drawn
        items = rows(tree) + [i for i in match_items(tree) if i.parent().isExpanded()]
        for column in range(tree.columnCount()):
            assert cut(tree, items, column) == [], f"{level} column {column}"

    # property keys whole (no fixed 130 px), of the model and of a selected node
    props = w.properties.tree
    assert cut(props, rows(props), 0) == [] and cut(props, rows(props), 1, True) == []
    assert w.graph.find_node("/fc2/Gemm")
    qtbot.waitUntil(lambda: w.properties.tree.topLevelItemCount() > 5, timeout=30_000)
    wait_ready(qtbot, w)
    keys = [item.text(0) for item in rows(props)]
    assert "operator bytes moved" in keys   # wider than the old 130 px column
    assert QFontMetrics(props.font()).horizontalAdvance("operator bytes moved") > 130 - \
        2 * _margin(props)
    assert cut(props, rows(props), 0) == [] and cut(props, rows(props), 1, True) == []

    # a large model's counts (a ViT export lists 845 matches): the tabs still fit, the
    # panel widens for them
    w.ctl.set_selection(())
    qtbot.waitUntil(lambda: w.ctl.matches_state == "done", timeout=120_000)
    listed = [m for ms in w.transforms.matches_by_level.values() for m in ms]
    before = w.docks["Transformations"].width()
    w.transforms.show_matches(listed * 400, True)
    qtbot.wait(50)
    counts = [w.transforms.tabs.tabText(i).split("(")[1] for i in range(4)]
    assert sum(len(c) >= 4 for c in counts) >= 2, counts   # "NNN)": 3 digits or more
    tabs_fit(w)
    assert w.docks["Transformations"].width() >= before
    closed(qtbot, w)
