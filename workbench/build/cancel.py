"""Stopping a compilation that is running, and leaving its folder fit for the next one.

DaCe runs CMake and the compiler as child processes (a shell, cmake, ninja
or make, c++, cc1plus, as) whose working directory is the program's
``build`` folder. Cancelling kills exactly those: the descendants of this
process whose working directory lies inside the program folder (a layout
running ``dot`` in the same process is left alone).

Rules:
1. Freeze, then kill: every matching process is stopped (SIGSTOP) before
   any is killed, and the tree is scanned again until nothing new appears,
   so a compiler that ninja starts meanwhile is caught too (a killed
   parent would hand its children to init, out of our sight).
2. A killed compiler can leave a truncated object file that ``make`` would
   take as up to date; ``forget_outputs`` removes the objects and the
   library, so the next build compiles again (CMake's configuration stays).
3. DaCe answers a failed CMake configure by wiping the build folder and
   configuring again, so the watcher keeps killing until the compile call
   has returned.
4. Linux only (``/proc``); elsewhere a cancel waits for the compiler to end.
"""
import contextlib
import os
import signal
import threading
from collections import defaultdict
from pathlib import Path


def _children() -> dict:
    kids = defaultdict(list)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name (in parentheses) may hold spaces: parse after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(entry.name))
    return kids


def _descendants(pid: int, kids: dict) -> list:
    out, todo = [], list(kids.get(pid, ()))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def _working_in(pid: int, folder: str) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return cwd == folder or cwd.startswith(folder + os.sep)


def kill_processes_in(folder) -> int:
    """Kill this process's descendants working inside ``folder``; how many were killed."""
    if not os.path.isdir("/proc"):
        return 0
    folder = os.path.realpath(folder)
    frozen = set()
    for _ in range(20):
        kids = _children()
        parent = {c: p for p, cs in kids.items() for c in cs}
        new = set()
        for pid in _descendants(os.getpid(), kids):
            if pid in frozen:
                continue
            if _working_in(pid, folder) or any(p in frozen for p in _ancestors(pid, parent)):
                new.add(pid)
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    return len(frozen)


def _ancestors(pid: int, parent: dict) -> list:
    out = []
    while pid in parent and parent[pid] != pid:
        pid = parent[pid]
        out.append(pid)
    return out


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def stoppable(cancel_event, folder, poll_s: float = 0.05):
    """While inside, setting ``cancel_event`` kills the compilers working in ``folder``."""
    if cancel_event is None:
        yield
        return
    done = threading.Event()

    def watch():
        # keep killing until the compile returns: DaCe retries a failed configure once
        while not done.wait(poll_s):
            if cancel_event.is_set():
                kill_processes_in(folder)
    watcher = threading.Thread(target=watch, name="compile-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def forget_outputs(program_folder, name: str) -> None:
    """Remove what an interrupted compile may have left half-written (rule 2)."""
    build = Path(program_folder) / "build"
    for pattern in ("CMakeFiles/**/*.o", f"lib{name}.*", f"libdacestub_{name}.*"):
        for path in build.glob(pattern):
            path.unlink(missing_ok=True)
