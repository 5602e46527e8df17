"""Verified steps in the window: every applied step is checked in the background.

mlp, offscreen: a real step gets a check mark with its largest error, a
step that computes zeros a cross naming the output that differs, a step
whose program segfaults a cross saying it did not run (and no error box:
the check's finding is the mark). A check runs while the window applies
the next step (the check is held at its run until that step is applied,
so this does not depend on timing). "Undo failed step" and the row's
"Undo to before this step" go back to before the failed step, keeping it
for redo.

    python tests/test_gui_verified.py docs/verified_steps.png   # the README picture
"""
import os
import sys
import threading
from pathlib import Path

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
import gui_latency as scenarios  # noqa: E402
from fault_helpers import native_fault_class, registered  # noqa: E402
from gui.history_panel import CHECK, FAILED, PASSED  # noqa: E402
from test_gui import window  # noqa: E402,F401 (the fixture)


def mark(w, row):
    item = w.history.tree.topLevelItem(row)
    return item.text(CHECK), item.foreground(CHECK).color()


def checked(w, count):
    """The first ``count`` steps carry a verification and no check is running."""
    history = w.ctl.ws.history
    return (len(history) >= count and all("verified" in e for e in history[:count])
            and not w.ctl.runner.busy("checks") and scenarios.ready(w))


def test_steps_are_verified_in_the_background_and_marked(qtbot, window, monkeypatch):
    from workbench.session import step_checks
    w, ctl = window, window.ctl
    scenarios.open_and_wait(w, "mlp")
    assert ctl.ws.verify_steps
    scenarios.apply_and_wait(w, scenarios.first_match(w, "ExpandToMaps", "/fc1/Gemm"))
    qtbot.waitUntil(lambda: checked(w, 1), timeout=300_000)
    good = ctl.ws.history[0]["verified"]
    assert good["match"] and good["output"] == "output" and good["max_abs_err"] < 1e-3
    text, colour = mark(w, 1)
    assert text == f"✓ {good['max_abs_err']:.1e}" and colour == PASSED

    # the check of the wrong step waits at its run until the next step is applied
    release, held = threading.Event(), threading.Event()
    real = step_checks.run_and_compare

    def held_run(ws, step, finish, cancel=None):
        if step.entry["transformation"].startswith("NativeFaultWrong"):
            held.set()
            assert release.wait(300)
        return real(ws, step, finish, cancel)
    monkeypatch.setattr(step_checks, "run_and_compare", held_run)
    wrong, crash = native_fault_class("wrong"), native_fault_class("segfault")
    with registered(wrong, crash):
        scenarios.apply_and_wait(w, scenarios.first_match(w, wrong.name))
        qtbot.waitUntil(held.is_set, timeout=300_000)
        assert mark(w, 2)[0] == "…"   # being checked
        scenarios.apply_and_wait(w, scenarios.first_match(w, crash.name))
        assert ctl.ws.position == 3 and "verified" not in ctl.ws.history[1]
        release.set()
        qtbot.waitUntil(lambda: checked(w, 3), timeout=300_000)
    bad, crashed = ctl.ws.history[1]["verified"], ctl.ws.history[2]["verified"]
    assert not bad["match"] and bad["output"] == "output" and bad["max_abs_err"] > 1e-3
    assert mark(w, 2) == ("✗ output", FAILED)
    assert not crashed["match"] and "SIGSEGV" in crashed["error"]
    assert mark(w, 3) == ("✗ did not run", FAILED)
    assert w.last_error is None   # findings are marks, not error boxes

    # undo to before the first failed step; the failed steps stay for redo
    assert w.history.undo_failed_button.isEnabled()
    w.history.undo_failed_button.click()
    qtbot.waitUntil(lambda: ctl.ws.position == 1 and scenarios.ready(w), timeout=60_000)
    assert len(ctl.ws.steps) == 3 and not w.history.undo_failed_button.isEnabled()
    assert mark(w, 1)[0].startswith("✓")
    ctl.redo()
    qtbot.waitUntil(lambda: ctl.ws.position == 2 and scenarios.ready(w), timeout=60_000)
    menu = w.history.menu_for(2)
    undo = next(a for a in menu.actions() if a.text() == "Undo to before this step")
    assert undo.isEnabled() and undo.font().bold()   # offered first for a failed step
    undo.trigger()
    qtbot.waitUntil(lambda: ctl.ws.position == 1 and scenarios.ready(w), timeout=60_000)
    assert len(ctl.ws.steps) == 3
    scenarios.wait(lambda: ctl.runner.idle(), what="the window")


def screenshot(path) -> Path:
    """The README picture: mlp with verified steps, one of them computing zeros."""
    import workbench
    from gui.cli_screenshot import render
    ws = workbench.open("mlp")
    ws.apply(ws.transformations(level="fusion", predict=False)[0], verify=True)
    ws.apply(next(m for m in ws.transformations(names=["ExpandToMaps"], predict=False)
                  if "/fc2/Gemm" in m.description), verify=True)
    wrong = native_fault_class("wrong")
    with registered(wrong):
        ws.apply(ws.transformations(names=[wrong.name], predict=False)[0], verify=True)
    return render(ws, path, (1600, 1000), (None, None, None), select=None)


if __name__ == "__main__":
    print(screenshot(sys.argv[1] if len(sys.argv) > 1 else "docs/verified_steps.png"))
