"""Programs run in a worker process: a crash or a hang is a typed error, not an exit.

A program made to segfault, abort or loop forever on purpose (a test
transformation writes that C++ into a tasklet, see fault_helpers) raises
``ProgramCrashed`` / ``ProgramTimedOut`` naming the build and the last step;
the session keeps every step (history, SDFG JSON, session folder) and the
next run, in a fresh worker, works. A normal run gives the same outputs as
the same program called in this process.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench
from fault_helpers import native_fault_class, registered
from workbench.errors import ProgramCrashed, ProgramTimedOut


def _fault_session(tmp_path, kind):
    """mlp with /fc1/Gemm expanded to maps and then made to ``kind`` at run time."""
    ws = workbench.open("mlp", session_dir=tmp_path / "session")
    expand = next(m for m in ws.transformations(names=["ExpandToMaps"], predict=False)
                  if "/fc1/Gemm" in m.description)
    ws.apply(expand)
    fault = native_fault_class(kind)
    with registered(fault):
        ws.apply(ws.transformations(names=[fault.name], predict=False)[0])
    return ws, fault


def _saved(folder):
    return json.loads((folder / "session.json").read_text())


@pytest.mark.parametrize("kind", ["segfault", "abort"])
def test_a_crashing_program_is_a_typed_error_and_the_session_lives_on(tmp_path, kind):
    ws, fault = _fault_session(tmp_path, kind)
    history, sdfg_json = [dict(e) for e in ws.history], ws.timeline[-1].sdfg_json
    with pytest.raises(ProgramCrashed) as caught:
        ws.verify()
    error = caught.value
    assert error.exit_code == 1 and not isinstance(error, ProgramTimedOut)
    assert ("SIGSEGV" if kind == "segfault" else "SIGABRT") in error.cause
    build = ws.build()
    assert error.program == build.sdfg.name and error.folder == str(build.folder)
    assert fault.name in error.step and "step 2" in error.step
    assert build.sdfg.name in str(error) and fault.name in str(error)
    # every step kept, in memory and in the session folder
    assert ws.position == 2 and [dict(e) for e in ws.history] == history
    assert ws.timeline[-1].sdfg_json == sdfg_json
    assert [s["transformation"] for s in _saved(tmp_path / "session")["steps"]] == \
        [h["transformation"] for h in history]
    # the next verify (a fresh worker) of a good state works
    ws.undo()
    report = ws.verify()
    assert report.match
    assert ws.position == 1 and len(ws.steps) == 2


def test_a_hanging_program_times_out(tmp_path):
    ws, fault = _fault_session(tmp_path, "hang")
    ws.run_timeout = 3
    with pytest.raises(ProgramTimedOut) as caught:
        ws.run(ws.random_inputs())
    assert "did not finish within 3 s" in str(caught.value)
    assert caught.value.cause == "timeout" and fault.name in caught.value.step
    assert ws.position == 2 and len(ws.history) == 2
    ws.goto(0)
    # the default limit again: the 3 s were for the hang, and a fresh worker's start
    # (importing DaCe, loading the library) can take that long on a loaded machine
    ws.run_timeout = None
    assert ws.verify().match


@pytest.mark.parametrize("model", ["mlp", "bert-layer"])
def test_outputs_are_the_same_as_in_process(model):
    ws = workbench.open(model)
    inputs = ws.random_inputs(seed=3)
    isolated = ws.run(inputs)
    again = ws.run(inputs)          # the warm worker, the program already loaded
    ws.isolated = False
    in_process = ws.run(inputs)
    assert isolated.keys() == in_process.keys()
    for name in isolated:
        assert isolated[name].dtype == in_process[name].dtype
        np.testing.assert_array_equal(isolated[name], in_process[name])
        np.testing.assert_array_equal(again[name], in_process[name])
    ws.isolated = True
    other = ws.random_inputs(seed=4)   # new inputs reach the loaded program
    changed = ws.run(other)
    ws.isolated = False
    expected = ws.run(other)
    for name in changed:
        np.testing.assert_array_equal(changed[name], expected[name])
        assert not np.array_equal(changed[name], isolated[name])


def test_the_cli_says_so_and_exits_1(tmp_path):
    """``verify`` on the session folder of a crashing program: one error paragraph, exit 1."""
    ws, fault = _fault_session(tmp_path, "segfault")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "app.py"), "verify", str(ws.folder)],
                          capture_output=True, text=True, cwd=root, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 1, proc.stderr
    assert "error: the program" in proc.stderr and "segmentation fault" in proc.stderr
    assert fault.name in proc.stderr and "Traceback" not in proc.stderr


def test_unloading_programs_that_only_ran_in_the_worker(tmp_path):
    """The session's own copy of a program is never initialized when every run goes to
    the worker; ending it anyway called ``__dace_exit(NULL)`` and killed the process
    (SqueezeNet: ``close`` after a build, or the second ``profile`` after a step).
    Run in a child process so that a crash is this test's failure."""
    script = (
        "import workbench\n"
        "ws = workbench.open('zoo:squeezenet')\n"
        "build = ws.build()\n"
        "assert not build.compiled._initialized\n"
        "ws.profile(repeat=3, warmup=1, reference=False)\n"
        "ws.apply(ws.transformations(names=['ExpandToMaps'], predict=False)[0])\n"
        "ws.profile(repeat=3, warmup=1, reference=False)\n"
        "ws.close()\n"
        "print('unloaded')\n")
    # the shared test cache (its export and units), DaCe's build folder its own
    env = {**os.environ, "DACE_default_build_folder": str(tmp_path / "dacecache")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=600, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0 and "unloaded" in done.stdout, done.stderr[-3000:]


def test_carried_state_stays_in_the_worker_and_matches_in_process():
    """A training step carries its state (``run(carry=)``): the next values are not
    copied out, and passed back they are not copied in; the steps equal the same
    program's steps called in this process, and ``state`` hands out copies."""
    from workbench.runtime import isolated
    ts = workbench.open("mlp").training(loss="mse", optimizer="adamw")
    here = workbench.open("mlp").training(loss="mse", optimizer="adamw")
    here.isolated = False
    batch = ts.random_batch(0)
    copied = []
    original = np.copyto

    def counting(dst, src, **kw):
        copied.append(np.asarray(dst).nbytes)
        return original(dst, src, **kw)

    ts.step(batch)   # loads the program: the state is copied in once
    snapshot = ts.state
    kept = {k: v.copy() for k, v in snapshot.items()}
    state_bytes = sum(v.nbytes for v in snapshot.values())
    isolated.np.copyto = counting
    try:
        losses = [ts.step(batch) for _ in range(3)]
    finally:
        isolated.np.copyto = original
    assert sum(copied) < state_bytes / 2, (sum(copied), state_bytes)
    for k, v in snapshot.items():   # the snapshot did not move with the steps
        np.testing.assert_array_equal(v, kept[k], err_msg=k)
    assert any(not np.array_equal(ts.state[p], snapshot[p]) for p in ts.program.params)
    expected = [here.step(batch) for _ in range(4)]
    assert losses == expected[1:]
    mine, theirs = ts.state, here.state
    assert set(mine) == set(theirs)
    for k in mine:
        np.testing.assert_array_equal(mine[k], theirs[k], err_msg=k)
