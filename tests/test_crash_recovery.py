"""kill -9 at the worst moments: reopening gives the last completed step.

tests/test_session_history.py kills a process while it writes a step's
SDFG file; here a process is killed at the commit point (the new manifest
written but not yet renamed into place) and in the middle of a build,
while its compiler runs. No half-written file is read afterwards, a dead
process's build folder is never reused, and the session builds again.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import workbench
import workbench.build as build
from workbench.build.cancel import _children, _descendants, _working_in

ROOT = Path(__file__).resolve().parents[1]

AT_COMMIT = r"""
import os, sys, time
import workbench, workbench.session.folder as persist
folder, flag = sys.argv[1], sys.argv[2]
ws = workbench.open("mlp", session_dir=folder)
ws.apply(next(m for m in ws.transformations(predict=False) if m.transformation == "ExpandToMaps"))
real = persist.os.fsync
def fsync(fd):
    real(fd)
    if "session.json" in os.readlink(f"/proc/self/fd/{fd}"):
        open(flag, "w").close()      # the new manifest is in its temporary file: kill now
        time.sleep(120)
persist.os.fsync = fsync
ws.apply(next(m for m in ws.transformations(predict=False)
              if m.transformation == "ChooseImplementation"))
"""

MID_BUILD = r"""
import sys
import workbench
folder = sys.argv[1]
ws = workbench.open("mlp", session_dir=folder)
ws.apply(next(m for m in ws.transformations(predict=False) if m.transformation == "ExpandToMaps"))
print("step done", flush=True)
ws.build()
print("build finished before the kill", flush=True)
"""


def child(script, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # its own process group, so that the compilers it leaves behind can be cleaned up
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(predicate, proc, timeout=300):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the child ended early: {proc.stdout.read()}"
        assert time.time() < deadline, "the child never got there"
        time.sleep(0.05)


def kill_9(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # what it left running (compilers)
    except ProcessLookupError:
        pass


def test_kill_9_at_the_commit_point_keeps_the_previous_step(tmp_path):
    folder, flag = tmp_path / "s", tmp_path / "committing"
    proc = child(AT_COMMIT, folder, flag)
    wait_for(flag.exists, proc)
    kill_9(proc)
    leftovers = list(folder.glob(".session.json.*.tmp"))
    assert leftovers, "the killed writer left its temporary manifest"
    assert (folder / "steps" / "0002.sdfgz").is_file()   # written, but never committed
    ws = workbench.open_session(folder)
    assert ws.position == 1 and [h["transformation"] for h in ws.history] == ["ExpandToMaps"]
    assert not ws.recovery_note
    assert not list(folder.glob(".session.json.*.tmp")), "a dead writer's file was not removed"
    # the uncommitted step 2 file is replaced by the next step, which commits normally
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ChooseImplementation"))
    again = workbench.open_session(folder)
    assert again.position == 2 and again.sdfg.to_json() == ws.sdfg.to_json()


def test_kill_9_mid_build_reopens_and_builds_in_a_fresh_folder(tmp_path):
    folder = tmp_path / "s"
    proc = child(MID_BUILD, folder)
    assert proc.stdout.readline().strip() == "step done"
    builds = build.cache_dir() / "builds"

    def compiling():
        """A compiler process of the child runs in the child's build folder."""
        kids = _children()
        return any(_working_in(pid, str(f)) for f in builds.glob(f"{proc.pid}-*")
                   for pid in _descendants(proc.pid, kids)
                   if _command(pid) in ("cc1plus", "c++", "g++", "ninja", "cmake", "make"))
    wait_for(compiling, proc)
    kill_9(proc)
    dead_folders = list(builds.glob(f"{proc.pid}-*"))
    assert dead_folders

    ws = workbench.open_session(folder)
    assert ws.position == 1 and [h["transformation"] for h in ws.history] == ["ExpandToMaps"]
    assert not ws.recovery_note
    report = ws.verify()
    assert report.match
    assert not str(ws._build.folder).startswith(str(builds / f"{proc.pid}-"))
    # a new process removes the dead one's folders (once per process; pretend to be new)
    build._pruned = False
    build.session_build_folder("after-crash")
    assert not any(f.exists() for f in dead_folders)


def test_half_written_temporaries_are_never_read(tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    folder = tmp_path / "s"
    dead = _dead_pid()
    # what a writer killed mid-write leaves: truncated files under temporary names
    (folder / f".session.json.{dead}-abc123.tmp").write_text('{"format": 1, "steps": [')
    (folder / "steps" / f".0002.sdfgz.{dead}-abc123.tmp").write_bytes(b"\x1f\x8b\x08")
    live = folder / f".session.json.{os.getpid()}-live.tmp"   # a writer still at work
    live.write_text("{")
    again = workbench.open_session(folder)
    assert again.position == 1 and not again.recovery_note
    assert not list(folder.glob(f"**/.*.{dead}-*.tmp")) and live.exists()


def test_save_as_writes_every_step_into_the_new_folder(tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "a")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    ws.save(tmp_path / "b")   # steps saved in "a" must be written again in "b"
    again = workbench.open_session(tmp_path / "b")
    assert again.position == 1 and not again.recovery_note
    assert again.sdfg.to_json() == ws.sdfg.to_json()


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
