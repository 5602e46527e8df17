"""Starting a Python worker process that talks over a pipe, and ending it with its parent.

Shared by the program runner (``workbench.runtime.isolated`` / ``run_worker``)
and the session replica (``workbench.session.replica``). A worker is
``python -m MODULE FD``: a fresh interpreter (no fork of a process that
holds Qt and OpenMP threads), the pipe's end passed as an inherited file
descriptor, the repository on its ``PYTHONPATH``, its stderr kept in a
temporary file so that the parent can quote a worker's last words.
"""
import os
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path


def start(module: str, env: dict = None):
    """``(process, connection, stderr file)`` of a new ``python -m module FD``."""
    parent, child = Pipe()
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", module, str(child.fileno())],
                            pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                            stderr=errors)
    child.close()
    return proc, parent, errors


def last_words(errors, limit: int = 400) -> str:
    """The end of a worker's stderr (``start``'s file)."""
    errors.seek(0, os.SEEK_END)
    errors.seek(max(0, errors.tell() - limit))
    return errors.read().decode(errors="replace").strip()


def connection(argv) -> Connection:
    """In the worker: the pipe ``start`` passed as the first argument."""
    return Connection(int(argv[0]))


def die_with_parent(every_s: float = 1.0) -> None:
    """In the worker: exit once the parent is gone. A watchdog thread, not
    PR_SET_PDEATHSIG: that fires when the parent *thread* ends, and the window
    starts workers from a job's short-lived thread."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)   # reparented: the parent is gone
    threading.Thread(target=watch, daemon=True, name="watchdog").start()
