"""Running Session calls off the UI thread.

A ``Runner`` has lanes. Each lane runs one job at a time in its own
``QThread``; the ``session`` lane queues jobs in order (apply, undo, build,
profile: they must not overlap), while "latest wins" lanes (match lists,
layouts) drop a pending job when a newer one arrives and ignore the result
of a running job that a newer one superseded.

Cancel never kills a thread: the job is marked cancelled and its result
(or error) is discarded when it arrives. Jobs that only read or build
(build, verify, profile, import) also stop early: ``QtProgress`` raises
``Cancelled`` when the next phase begins, which the Session treats like
any other failure (nothing is changed), and a compile in progress is
stopped by killing its compiler processes (``QtProgress.cancel_event``,
see ``workbench.build.cancel``). Jobs that change the session (apply,
undo) cannot be cancelled.
"""
import sys
import threading
import traceback
from collections import deque
from contextlib import contextmanager
import time

from PyQt5.QtCore import QObject, QThread, pyqtSignal

from workbench.errors import Cancelled as _CoreCancelled
from workbench.progress import Progress

_NOTHING = object()   # no intermediate result waiting


class Cancelled(_CoreCancelled):
    """Raised at a phase boundary once the user has cancelled the job."""


class QtProgress(QObject, Progress):
    """A ``workbench.progress.Progress`` that reports phases as Qt signals."""
    phaseStarted = pyqtSignal(str, int)      # name, total (0: unknown)
    stepped = pyqtSignal(int, int, str)      # done, total, label

    def __init__(self):
        QObject.__init__(self)
        Progress.__init__(self, None)
        self.cancel_event = threading.Event()

    @contextmanager
    def phase(self, name: str, total: int = None):
        if self.cancel_event.is_set():
            raise Cancelled(f"cancelled before '{name}'")
        self.phaseStarted.emit(name, int(total or 0))
        t0 = time.perf_counter()

        def step(done: int, label: str = ""):
            self.stepped.emit(int(done), int(total or 0), label)

        try:
            yield step
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0


class Job(QObject):
    """One call to run off the UI thread: ``fn(job)`` returns the result."""
    partial = pyqtSignal()

    def __init__(self, lane: str, title: str, fn, cancellable: bool, on_done, on_error,
                 on_partial):
        super().__init__()
        self.lane, self.title, self.fn, self.cancellable = lane, title, fn, cancellable
        self.on_done, self.on_error = on_done, on_error
        self.cancelled = False
        self._partial, self._partial_lock = _NOTHING, threading.Lock()
        if on_partial is not None:
            self.partial.connect(self._deliver_partial)
            self._on_partial = on_partial

    def report(self, value) -> None:
        """From the worker: hand an intermediate result to the UI thread. Each result
        replaces the one before it, so the UI thread takes only the newest: reports
        queued while it was busy (a training program's listing, 15-20 ms each to show)
        used to run back to back and held the window for 150 ms."""
        with self._partial_lock:
            waiting = self._partial is not _NOTHING
            self._partial = value
        if not waiting:
            self.partial.emit()

    def _deliver_partial(self):
        with self._partial_lock:
            value, self._partial = self._partial, _NOTHING
        if value is not _NOTHING and not self.cancelled:
            self._on_partial(value)


class _Thread(QThread):
    def __init__(self, job: Job):
        super().__init__()
        self.job = job
        self.result = self.error = None

    def run(self):
        try:
            self.result = self.job.fn(self.job)
        except BaseException as e:  # handed to the UI thread, never lost
            self.error = e
            self.error_text = traceback.format_exc()


class Runner(QObject):
    """Lanes of worker threads; ``started``/``finished`` carry the Job."""
    started = pyqtSignal(object)
    finished = pyqtSignal(object)

    def __init__(self, progress: QtProgress = None, latest_wins=("matches", "layout")):
        super().__init__()
        self.progress = progress
        self.latest_wins = set(latest_wins)
        self._queues = {}
        self._running = {}     # lane -> _Thread

    def submit(self, lane: str, title: str, fn, on_done=None, on_error=None, on_partial=None,
               cancellable: bool = False) -> Job:
        job = Job(lane, title, fn, cancellable, on_done, on_error, on_partial)
        queue = self._queues.setdefault(lane, deque())
        if lane in self.latest_wins:
            queue.clear()
            if lane in self._running:
                self._running[lane].job.cancelled = True   # superseded: ignore its result
        queue.append(job)
        self._next(lane)
        return job

    def busy(self, lane: str = None) -> bool:
        lanes = [lane] if lane else list(self._queues)
        return any(lane in self._running or self._queues.get(lane) for lane in lanes)

    def idle(self) -> bool:
        return not self.busy()

    def current(self, lane: str):
        thread = self._running.get(lane)
        return thread.job if thread else None

    def pending(self, lane: str) -> int:
        return len(self._queues.get(lane, ()))

    def cancel(self, lane: str = "session") -> bool:
        """Cancel the running job of ``lane`` if it may be cancelled."""
        job = self.current(lane)
        if job is None or not job.cancellable or job.cancelled:
            return False
        job.cancelled = True
        if self.progress is not None and lane == "session":
            self.progress.cancel_event.set()
        return True

    def shutdown(self, timeout_ms: int = 60000) -> None:
        """Cancel what can be cancelled and wait for running threads (window close)."""
        for queue in self._queues.values():
            queue.clear()
        for lane, thread in list(self._running.items()):
            thread.job.cancelled = True
            if self.progress is not None:
                self.progress.cancel_event.set()
            thread.wait(timeout_ms)

    def _next(self, lane: str) -> None:
        if lane in self._running or not self._queues.get(lane):
            return
        job = self._queues[lane].popleft()
        if lane == "session" and self.progress is not None:
            self.progress.cancel_event.clear()
        thread = _Thread(job)
        thread.finished.connect(self._on_thread_finished)
        self._running[lane] = thread
        self.started.emit(job)
        thread.start()

    def _on_thread_finished(self) -> None:
        thread = self.sender()
        job = thread.job
        if self._running.get(job.lane) is thread:
            del self._running[job.lane]
        thread.wait()
        thread.deleteLater()
        try:
            if not job.cancelled:
                if thread.error is not None:
                    if job.on_error is not None:
                        job.on_error(thread.error)
                    else:
                        sys.stderr.write(thread.error_text)
                elif job.on_done is not None:
                    job.on_done(thread.result)
        finally:
            self.finished.emit(job)
            self._next(job.lane)
