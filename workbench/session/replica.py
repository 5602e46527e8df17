"""A copy of a session in a worker process that lists transformations and predicts bytes.

Why a process: listing and predicting are pure Python (pattern matching,
deepcopy, sympy, memlet propagation): 20-30 s on a ViT-tiny export. In a
thread of the window's process they hold the GIL, and the UI thread, which
takes it back for every Python call Qt makes while painting, stalled for
100-280 ms at a time (``python -m tests.gui_latency``). In their own process
they cost the window nothing but the results.

The worker's side is ``workbench.session.replica_worker``.

Rules:
1. The worker opens the session the way the window's did: its source and input
   shapes (``workbench.open``), or its session folder (``Session.open_folder``,
   never writing into it). A session with neither has no replica (``spec`` is None).
2. Every request names the step it is for: the matches of the steps applied, in
   order. The worker reaches that step exactly: from the session folder when
   the folder's manifest records those steps (the saved SDFG is the step's own
   SDFG), else by going back to the longest common prefix of its own history
   and applying the rest (the transformations are deterministic on node
   identities; ``Match`` names nodes by identity, never by object).
3. A listing answers with the matches, then their predictions in batches, the
   rows the window names as wanted first (``want``). A newer request or
   ``stop`` ends the running one between two predictions.
4. The matches are the worker's ``Match`` objects (frozen dataclasses naming
   node identities): the window applies them to its own session, which checks
   them like any other match; a step that no longer applies is refused there.
5. The worker dies with the window's process (``worker_process.die_with_parent``);
   a crashed worker is an error for the request, and the next request starts
   a new one.
6. Predictions use both cores: the worker forks a helper that takes rows from
   the end of the list while the worker takes the wanted rows and then the
   front; both run at a lower priority than the window (``os.nice``), whose
   UI thread must get a core whenever it asks.
7. A large model file is opened in the worker while the window opens it
   (``prepare``): opening a ViT-tiny training program takes 5-6 s in each process,
   and the first listing waited for both in turn. The window's own spec then names
   the same source, stamp and shapes, and the worker keeps what it opened.
8. A symbolic program's figures are taken at the sizes the window's session takes
   them at (``Session.set_sizes``): the spec names them, and a spec that differs
   from the open session's only in its sizes sets them there instead of opening
   the session again.
"""
import itertools
import logging
import threading
import time
from collections import deque
from pathlib import Path

from workbench.runtime import worker_process

log = logging.getLogger(__name__)


def spec(ws):
    """How a worker re-opens ``ws`` (rule 1), or None when it cannot. The source
    comes first: it stays the same when the first step creates the session folder.
    A symbolic program's spec names the sizes its figures are taken at (rule 8)."""
    shapes = ws.input_shapes()
    sizes = {"sizes": dict(ws.model.symbols)} if ws.model.symbols else {}
    if ws.source is not None:
        out = {"source": ws.source, "shapes": shapes, "stamp": _stamp(ws.source)}
        return {**out, "symbolic": list(ws.model.symbols), **sizes} if sizes else out
    if ws.folder is not None and (Path(ws.folder) / "session.json").is_file():
        return {"folder": str(ws.folder), "shapes": shapes, **sizes}
    return None


def _stamp(source):
    path = Path(source)
    return [path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else None


def model_spec(model) -> dict:
    """The spec of ``model`` (a path, a bundled or zoo name) opened with its own input
    shapes, before the window has opened it (``Replica.prepare``)."""
    import workbench
    source = workbench.source_name(model)
    return {"source": source, "shapes": None, "stamp": _stamp(source)}


def state(ws) -> dict:
    """The step a request is for (rule 2): read on the caller's side, where ``ws`` is."""
    from workbench.transformation_api import Match
    return {"steps": [Match.from_json(e).to_json() for e in ws.history],
            "folder": str(ws.folder) if ws.folder is not None else None}


class ReplicaFailed(RuntimeError):
    """The worker could not open the session or reach the step; the caller lists in
    its own process instead."""


class Replica:
    """The window's side: one worker, started on first use, re-opened for a new session.

    Two lanes of the window use it at once (the listing and the analysis): each
    request has an id, and whichever caller reads the pipe files what it reads
    under its request's id, so neither waits for the other's answers."""

    def __init__(self):
        self.proc = self.conn = self.errors = None
        self._spec = None
        self._cond = threading.Condition()
        self._reading = False
        self._inbox = {}            # request id -> deque of (kind, payload)
        self._ids = itertools.count(1)

    def listing(self, spec_, state_, nodes, cancelled, wanted, report, every_s: float = 0.5):
        """The matches of the step ``state_`` names (touching ``nodes`` when given), each
        with its prediction: ``report(matches)`` once listed and as predictions arrive
        (every ``every_s`` or when a wanted row got its own). ``cancelled()`` stops it
        (returns what is known); ``wanted()`` names the matches on screen."""
        rid = self._begin(spec_, "list", state_, list(nodes) if nodes else None)
        matches, index, asked = None, {}, ()
        last = 0.0
        try:
            while True:
                if cancelled():
                    return self._stop(rid, matches)
                if matches is not None:
                    rows = tuple(index[m] for m in wanted() if m in index)
                    if rows != asked:
                        asked = rows
                        self._send("want", rid, rows)
                kind, payload = self._receive(rid)
                if kind == "listed":
                    matches = payload
                    index = {m: i for i, m in enumerate(matches)}
                    report(list(matches))
                    last = time.monotonic()
                elif kind == "predicted":
                    for i, delta in payload:
                        if delta is not None:
                            matches[i] = _with_delta(matches[i], delta)
                    urgent = any(i in asked for i, _ in payload)
                    if urgent or time.monotonic() - last > every_s:
                        report(list(matches))
                        last = time.monotonic()
                elif kind == "done":
                    return matches
                elif kind == "failed":
                    raise ReplicaFailed(payload)
        finally:
            self._end(rid)

    def prepare(self, spec_) -> None:
        """Start the worker opening ``spec_`` (``file_spec``) while the window opens it
        too: the first listing of a large model then finds it open (rule 7)."""
        with self._cond:
            self._opening(spec_)

    def analysis(self, spec_, state_, runtime: dict = None):
        """``(data movement, operator-class table, memory figure)`` of the step ``state_``
        names, as ``Session.data_movement()``, ``Session.class_table(runtime)`` and
        ``Session.memory()`` give them."""
        rid = self._begin(spec_, "analyse", state_, runtime)
        try:
            while True:
                kind, payload = self._receive(rid)
                if kind == "analysed":
                    return payload
                if kind == "failed":
                    raise ReplicaFailed(payload)
        finally:
            self._end(rid)

    def close(self) -> None:
        with self._cond:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.conn.send(("exit",))
                    self.proc.wait(5)
                except Exception as e:   # it did not stop when asked: it is killed
                    log.debug("the replica worker did not stop when asked (%s); killing it", e)
                    self.proc.kill()
                    self.proc.wait()
            self.proc = self.conn = self.errors = None
            self._spec = None
            self._cond.notify_all()

    def _opening(self, spec_) -> None:
        """The worker running (started again after a crash, rule 5) with ``spec_`` asked
        for. Called holding ``_cond``."""
        if self.proc is not None and self.proc.poll() is not None:
            self.close()
        if self.proc is None:
            self.proc, self.conn, self.errors = \
                worker_process.start("workbench.session.replica_worker")
        if spec_ != self._spec:
            self.conn.send(("open", spec_))
            self._spec = spec_

    def _begin(self, spec_, kind, *args) -> int:
        with self._cond:
            self._opening(spec_)
            rid = next(self._ids)
            self._inbox[rid] = deque()
            self.conn.send((kind, rid, *args))
            return rid

    def _send(self, *message) -> None:
        with self._cond:
            if self.conn is not None:
                self.conn.send(message)

    def _end(self, rid) -> None:
        with self._cond:
            self._inbox.pop(rid, None)

    def _receive(self, rid, timeout_s: float = 0.1):
        """The next message for ``rid``, or (None, None) after about ``timeout_s``.
        Waiting on the pipe or on the other reader releases the GIL."""
        with self._cond:
            if not self._inbox[rid] and self._reading:
                self._cond.wait(timeout_s)
            if self._inbox[rid]:
                return self._inbox[rid].popleft()
            if self._reading:
                return None, None
            if self.proc is None:
                raise ReplicaFailed("the listing worker was closed")
            self._reading = True
            conn, proc = self.conn, self.proc
        message, ended = None, False
        try:
            if conn.poll(timeout_s):
                message = conn.recv()
            elif proc.poll() is not None:
                ended = True
        except (EOFError, OSError):
            ended = True
        with self._cond:
            self._reading = False
            if message is not None and message[1] in self._inbox:
                self._inbox[message[1]].append((message[0], message[2]))
            self._cond.notify_all()
            if ended:
                words = worker_process.last_words(self.errors) if self.errors else ""
                self.close()
                raise ReplicaFailed(f"the listing worker ended{f': {words}' if words else ''}")
            return self._inbox[rid].popleft() if self._inbox[rid] else (None, None)

    def _stop(self, rid, matches):
        self._send("stop", rid)
        while True:
            kind, _ = self._receive(rid, timeout_s=1.0)
            if kind in ("done", "failed"):
                return matches


def _with_delta(match, delta):
    from dataclasses import replace
    return replace(match, delta_bytes=delta)
