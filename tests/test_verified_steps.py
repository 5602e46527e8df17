"""Verified steps from Python: ``apply(m, verify=True)`` and ``ws.verify_steps``.

The result is recorded in the step's history entry as
``verified = {"match", "max_abs_err", "output"}`` (with ``error`` when the
program did not run), saved with the step in the session folder and read
back by ``open_session``. A step that computes zeros is a mismatch naming
the output; one whose program segfaults is recorded, not raised.
"""
import json

import workbench
from fault_helpers import native_fault_class, registered


def _expand(ws, node):
    return next(m for m in ws.transformations(names=["ExpandToMaps"], predict=False)
                if node in m.description)


def test_apply_with_verify_records_and_persists_the_result(tmp_path):
    folder = tmp_path / "session"
    ws = workbench.open("mlp", session_dir=folder)
    entry = ws.apply(_expand(ws, "/fc1/Gemm"), verify=True)
    verified = entry["verified"]
    assert verified["match"] is True and verified["output"] == "output"
    assert 0 <= verified["max_abs_err"] < 1e-3
    assert ws.verify().outputs[0].max_abs_err == verified["max_abs_err"]   # the same program
    wrong = native_fault_class("wrong")
    with registered(wrong):
        bad = ws.apply(ws.transformations(names=[wrong.name], predict=False)[0], verify=True)
    assert bad["verified"]["match"] is False and bad["verified"]["output"] == "output"
    assert bad["verified"]["max_abs_err"] > 1e-3
    saved = json.loads((folder / "session.json").read_text())["steps"]
    assert [s["verified"] for s in saved] == [verified, bad["verified"]]
    again = workbench.open_session(folder)
    assert [e["verified"] for e in again.history] == [verified, bad["verified"]]


def test_verify_steps_checks_every_step_in_the_background(tmp_path):
    folder = tmp_path / "session"
    ws = workbench.open("mlp", session_dir=folder)
    ws.verify_steps = True
    first = ws.apply(_expand(ws, "/fc2/Gemm"))
    crash = native_fault_class("segfault")
    with registered(crash):
        second = ws.apply(ws.transformations(names=[crash.name], predict=False)[0])
    ws.wait_checks(timeout=600)
    assert first["verified"]["match"] is True
    assert second["verified"]["match"] is False and second["verified"]["max_abs_err"] is None
    assert "SIGSEGV" in second["verified"]["error"]
    assert ws.position == 2   # the crash changed nothing
    saved = json.loads((folder / "session.json").read_text())["steps"]
    assert saved[1]["verified"] == second["verified"]
    ws.undo()
    assert ws.verify().match


def test_a_cancelled_check_records_nothing():
    import threading

    import pytest
    from workbench.session import step_checks
    from workbench.errors import Cancelled
    ws = workbench.open("mlp")
    entry = ws.apply(_expand(ws, "/fc1/Gemm"))
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        step_checks.check_now(ws, ws.timeline[-1], ws.lock, stop)
    assert "verified" not in entry
