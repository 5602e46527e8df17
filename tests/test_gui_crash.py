"""The window when a program crashes: it stays open, says so, and keeps every step.

A test transformation makes mlp's program write through a null pointer
(fault_helpers.native_fault_class). Verify runs it in the worker process:
the window shows "Program crashed" naming the build and the step, the
history keeps both steps, and after undo the next verify (a fresh worker)
matches onnxruntime.
"""
import os

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
import gui_latency as scenarios  # noqa: E402
from fault_helpers import native_fault_class, registered  # noqa: E402
from test_gui import window  # noqa: E402,F401 (the fixture)


def test_a_segfaulting_program_leaves_the_window_and_the_session(qtbot, window):
    w, ctl = window, window.ctl
    ctl.verify_steps = False   # this test is about the verify the user starts
    scenarios.open_and_wait(w, "mlp")
    scenarios.apply_and_wait(w, scenarios.first_match(w, "ExpandToMaps", "/fc1/Gemm"))
    fault = native_fault_class("segfault")
    with registered(fault):
        scenarios.apply_and_wait(w, scenarios.first_match(w, fault.name))
    steps = [dict(e) for e in ctl.ws.history]
    sdfg_json = ctl.ws.timeline[-1].sdfg_json
    w.last_error = None
    ctl.verify()
    qtbot.waitUntil(lambda: w.last_error is not None and ctl.runner.idle(), timeout=300_000)
    title, text = w.last_error
    assert title == "Program crashed"
    assert "segmentation fault" in text and "SIGSEGV" in text
    assert ctl.ws.build().sdfg.name in text and fault.name in text and "step 2" in text
    assert w.isVisible() and "Program crashed" in w.statusBar().currentMessage()
    assert ctl.ws.position == 2 and [dict(e) for e in ctl.ws.history] == steps
    assert ctl.ws.timeline[-1].sdfg_json == sdfg_json
    assert w.history.tree.topLevelItemCount() == 3 and ctl.current_report() is None
    # undo the faulty step: the next verify runs in a fresh worker and matches
    ctl.undo()
    qtbot.waitUntil(lambda: ctl.ws.position == 1 and scenarios.ready(w), timeout=120_000)
    with qtbot.waitSignal(ctl.verified, timeout=300_000) as got:
        ctl.verify()
    assert got.args[0].match and "verified" in w.verify_label.text()
    assert len(ctl.ws.steps) == 2   # the crashing step is still there to redo
