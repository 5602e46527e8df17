"""The desktop window under faults, offscreen with pytest-qt.

A build that fails shows which ONNX node's code the compiler rejected and
marks the line; Cancel during a compile stops the compiler and leaves the
session as it was; a graph of more than 2,000 nodes is drawn and stays
usable; a session folder this workbench did not write is opened only after
the user accepts it. How fast the event loop answers meanwhile is measured
by ``python -m tests.gui_latency`` (timings do not belong in tests).
"""
import gzip
import json
import os

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from PyQt5.QtWidgets import QMessageBox  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
import gui_latency as scenarios  # noqa: E402
from test_gui import window  # noqa: E402,F401 (the fixture)
from workbench.build import cache_dir  # noqa: E402
from workbench.build.cancel import _children, _descendants, _working_in  # noqa: E402




def verify_and_wait(qtbot, w):
    with qtbot.waitSignal(w.ctl.verified, timeout=300_000) as got:
        w.ctl.verify()
    return got.args[0]


def test_a_failing_build_names_the_node_and_the_session_stays_usable(qtbot, window):
    w = window
    info = scenarios.failing_build(w)
    title, text = info["error"]
    assert title == "Build failed"
    assert "ONNX node '/fc1/Gemm'" in text and "error:" in text
    assert "no_such_function_in_cpp" in text
    assert "/fc1/Gemm" in info["code_info"] and "no_such_function_in_cpp" in info["code_info"]
    marked = w.code.text.document().findBlockByNumber(info["failed_line"] - 1).text()
    assert "no_such_function_in_cpp" in marked
    assert w.ctl.ws.position == 2 and w.ctl.last_build is None
    w.ctl.undo()
    qtbot.waitUntil(lambda: w.ctl.ws.position == 1 and scenarios.ready(w), timeout=120_000)
    assert verify_and_wait(qtbot, w).match
    assert "verified" in w.verify_label.text()


def test_cancel_during_the_compile_stops_it_and_changes_nothing(qtbot, window, tmp_path,
                                                                monkeypatch):
    # an empty unit cache: the build has units to compile, not only the program
    monkeypatch.setenv("WORKBENCH_UNIT_CACHE", str(tmp_path / "units"))
    w = window
    info = scenarios.cancelled_build(w, model="mlp")
    assert info["phases"][-1] == "compile"   # it was stopped there, no later phase began
    assert "Cancelled" in info["status"] and w.last_error is None   # a cancel is not an error
    assert w.ctl.last_build is None and w.ctl.current_report() is None
    assert w.ctl.ws._build is None and w.ctl.ws.position == 0
    mine = list((cache_dir() / "builds").glob(f"{os.getpid()}-{w.ctl.ws.build_slot}*"))
    assert mine and not [lib for f in mine for pattern in ("*/build/lib*.so",
                                                           "*/units-build/lib*.so")
                         for lib in f.glob(pattern)], "the compile was not stopped"
    kids = _children()
    assert not [p for p in _descendants(os.getpid(), kids) for f in mine
                if _working_in(p, str(f))]
    assert not w.cancel_button.isVisible()
    assert verify_and_wait(qtbot, w).match   # builds again in the same folder


def test_a_graph_of_over_2000_nodes_is_drawn_and_usable(qtbot, window):
    info = scenarios.large_graph(window, nodes=1000)
    assert info["graph_nodes"] >= 2000 and info["edges"] >= 2000
    assert f"{info['graph_nodes']} nodes" in info["legend"]
    assert window.ctl.focus is not None and window.ctl.focus.subtitle == "/b3/Gate"
    visible = window.graph.view.mapToScene(window.graph.view.viewport().rect()).boundingRect()
    assert any(visible.contains(i.sceneBoundingRect()) for i in window.graph.node_items.values())


def test_a_folder_from_elsewhere_opens_only_after_the_dialog(qtbot, window, tmp_path):
    import workbench
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    manifest = json.loads((tmp_path / "s" / "session.json").read_text())
    del manifest["signatures"]   # as written by another workbench (or an older one)
    (tmp_path / "s" / "session.json").write_text(json.dumps(manifest))
    steps = gzip.decompress((tmp_path / "s" / "steps" / "0001.sdfgz").read_bytes())
    w = window

    w.open_session(tmp_path / "s")
    qtbot.waitUntil(lambda: w.trust_box is not None, timeout=60_000)
    assert "C++" in w.trust_box.text() and str(tmp_path / "s") in w.trust_box.text()
    assert w.ctl.ws is None
    w.trust_box.button(QMessageBox.Cancel).click()
    qtbot.waitUntil(lambda: w.trust_box is None, timeout=10_000)
    assert w.ctl.ws is None and "Not opened" in w.statusBar().currentMessage()

    w.open_session(tmp_path / "s")
    qtbot.waitUntil(lambda: w.trust_box is not None, timeout=60_000)
    accept = next(b for b in w.trust_box.buttons() if b.text() == "Trust and Open")
    accept.click()
    qtbot.waitUntil(lambda: w.ctl.ws is not None and scenarios.ready(w), timeout=120_000)
    assert w.ctl.ws.position == 1
    assert gzip.decompress((tmp_path / "s" / "steps" / "0001.sdfgz").read_bytes()) == steps
    assert workbench.open_session(tmp_path / "s").position == 1   # signed now: no question
