"""A copy of a session in a worker process that lists transformations and predicts bytes.

Why a process: listing and predicting are pure Python (pattern matching,
deepcopy, sympy, memlet propagation): 20-30 s on a ViT-tiny export. In a
thread of the window's process they hold the GIL, and the UI thread, which
takes it back for every Python call Qt makes while painting, stalled for
100-280 ms at a time (``python -m tests.gui_latency``). In their own process
they cost the window nothing but the results.

    python -m workbench.session.replica FD   (started by ``Replica``, never by hand)

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
"""
import itertools
import json
import mmap
import os
import signal
import struct
import sys
import threading
import time
from collections import deque
from pathlib import Path

from workbench.runtime import worker_process


# A listing this long gets a forked helper for its predictions (rule 6): a fork costs
# ~0.1 s; a bundled block's 50 predictions take about a second. (Tests set it lower.)
HELPER_MIN_MATCHES = int(os.environ.get("WORKBENCH_REPLICA_HELPER_MIN", "100"))
_NONE = -(2 ** 63)    # "no prediction" on the helper's pipe
_ENDED = object()


def spec(ws):
    """How a worker re-opens ``ws`` (rule 1), or None when it cannot. The source
    comes first: it stays the same when the first step creates the session folder."""
    shapes = {i.onnx_name: list(i.shape) for i in ws.inputs}
    if ws.source is not None:
        path = Path(ws.source)
        stamp = [path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else None
        return {"source": ws.source, "shapes": shapes, "stamp": stamp}
    if ws.folder is not None and (Path(ws.folder) / "session.json").is_file():
        return {"folder": str(ws.folder), "shapes": shapes}
    return None


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

    def analysis(self, spec_, state_, runtime: dict = None):
        """``(data movement, operator-class table)`` of the step ``state_`` names, as
        ``Session.data_movement()`` and ``Session.class_table(runtime)`` give them."""
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
                except Exception:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = self.conn = self.errors = None
            self._spec = None
            self._cond.notify_all()

    def _begin(self, spec_, kind, *args) -> int:
        with self._cond:
            if self.proc is not None and self.proc.poll() is not None:
                self.close()   # crashed since the last request (rule 5)
            if self.proc is None:
                self.proc, self.conn, self.errors = \
                    worker_process.start("workbench.session.replica")
            if spec_ != self._spec:
                self.conn.send(("open", spec_))
                self._spec = spec_
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


# -- the worker ---------------------------------------------------------------------

class _Worker:
    def __init__(self, conn):
        self.conn = conn
        self.ws = None
        self.open_error = "no session was opened"
        self.queued = deque()   # requests that arrived while a listing ran

    def serve(self) -> None:
        while True:
            message = self.queued.popleft() if self.queued else self.conn.recv()
            kind = message[0]
            if kind == "exit":
                return
            if kind == "open":
                self._open(message[1])
            elif kind == "list":
                self._list(*message[1:])
            elif kind == "analyse":
                self._analyse(*message[1:])
            # a "want" or "stop" for a request that already ended needs no answer

    def _answer(self, kind, rid, payload=None) -> None:
        self.conn.send((kind, rid, payload))

    def _open(self, spec_) -> None:
        import workbench
        from workbench.session import Session
        self.ws, self.open_error = None, None
        try:
            if "folder" in spec_:
                self.ws = Session.open_folder(spec_["folder"], trust=True, autosave=False)
            else:
                path = Path(spec_["source"])
                if spec_["stamp"] is not None and \
                        [path.stat().st_size, path.stat().st_mtime_ns] != spec_["stamp"]:
                    raise ReplicaFailed(f"'{path}' changed on disk since the window opened it")
                self.ws = workbench.open(spec_["source"], input_shapes=spec_["shapes"])
        except Exception as e:
            self.open_error = f"{type(e).__name__}: {e}"

    def _session(self):
        if self.ws is None:
            raise ReplicaFailed(f"the session could not be opened: {self.open_error}")
        return self.ws

    def _analyse(self, rid, state_, runtime) -> None:
        try:
            self._reach(state_)
            ws = self._session()
            self._answer("analysed", rid, (ws.data_movement(), ws.class_table(runtime=runtime)))
        except Exception as e:
            self._answer("failed", rid, f"{type(e).__name__}: {e}")

    def _list(self, rid, state_, nodes) -> None:
        from workbench import transformation_api as transform
        try:
            self._reach(state_)
            matches = []
            for t in transform.all_transformations():
                if self._interrupted(rid, state_):
                    return self._answer("done", rid)
                matches += self.ws.transformations(nodes=nodes, predict=False, names=[t.name])
        except Exception as e:
            return self._answer("failed", rid, f"{type(e).__name__}: {e}")
        self._answer("listed", rid, matches)
        self._predict(rid, state_, matches)

    def _predict(self, rid, state_, matches) -> None:
        """Predict every match, the wanted rows first, with a forked helper taking
        rows from the end of the list on the machine's other core (rule 6)."""
        n = len(matches)
        claimed = mmap.mmap(-1, max(n, 1))   # shared with the helper: 1 = taken
        known, wanted, batch, last = {}, [], [], time.monotonic()
        helper = _Helper(self.ws, matches, claimed) \
            if n >= HELPER_MIN_MATCHES and (os.cpu_count() or 1) > 1 else None
        try:
            nxt = 0
            while len(known) < n:
                if self._interrupted(rid, state_, wanted):
                    break
                if helper is not None:
                    batch += helper.results(known)
                wanted[:] = [i for i in wanted if not claimed[i]]
                i = wanted.pop(0) if wanted else None
                urgent = i is not None
                if i is None:
                    while nxt < n and claimed[nxt]:
                        nxt += 1
                    i = nxt if nxt < n else None
                if i is None:   # everything is taken: the helper's last rows, or its end
                    if helper is None or not helper.wait(known, batch):
                        # the helper ended: what it claimed and did not answer is done here
                        i = next((k for k in range(n) if k not in known), None)
                if i is not None:
                    claimed[i] = 1
                    known[i] = self.ws.predict(matches[i]).delta_bytes
                    batch.append((i, known[i]))
                if batch and (urgent or time.monotonic() - last > 0.25 or len(known) == n):
                    self._answer("predicted", rid, batch)
                    batch, last = [], time.monotonic()
        finally:
            if helper is not None:
                helper.stop()
        if batch:
            self._answer("predicted", rid, batch)
        self._answer("done", rid)

    def _interrupted(self, rid, state_, wanted=None) -> bool:
        """Read what arrived while listing ``rid`` (rule 3): its wanted rows update
        ``wanted``; an analysis of the same step is answered at once; its stop, or a
        request for another step, ends the listing (that request is served next)."""
        while self.conn.poll():
            message = self.conn.recv()
            kind, other = message[0], message[1] if len(message) > 1 else None
            if kind == "want" and other == rid and wanted is not None:
                wanted[:] = list(message[2])
            elif kind == "stop" and other == rid:
                return True
            elif kind == "analyse" and message[2] == state_:
                self._analyse(*message[1:])
            elif kind in ("want", "stop"):
                continue   # for a request that already ended
            else:
                self.queued.append(message)
                return True
        return False

    def _reach(self, state_) -> None:
        """Make the replica's current step the one ``state_`` names (rule 2)."""
        from workbench.transformation_api import Match
        ws = self._session()
        wanted = [Match.from_json(e) for e in state_["steps"]]
        have = [Match.from_json(e) for e in ws.history]
        if have == wanted:
            return
        if state_["folder"] and self._from_folder(state_["folder"], wanted):
            return
        common = 0
        while common < min(len(have), len(wanted)) and have[common] == wanted[common]:
            common += 1
        ws.goto(common)
        for match in wanted[common:]:
            ws.apply(match)

    def _from_folder(self, folder, wanted) -> bool:
        from workbench.session.folder import MANIFEST, read_session
        from workbench.transformation_api import Match
        try:
            manifest = json.loads((Path(folder) / MANIFEST).read_text())
        except (OSError, ValueError):
            return False
        recorded = [Match.from_json(e) for e in manifest.get("steps", [])]
        if recorded[:len(wanted)] != wanted:
            return False
        saved = read_session(folder, trust=True)
        if len(saved.steps) < len(wanted):
            return False
        self.ws.goto(0)
        self.ws.timeline.drop_after(0)
        self.ws.timeline.restore(saved.steps)
        self.ws.goto(len(wanted))
        return True


class _Helper:
    """A fork of the worker that predicts rows from the end of the list (rule 6).

    Rows are claimed in a shared byte map before they are predicted, so the two
    meet in the middle with at most a row done twice (the same number). Its
    results go to this session's cache (``Session.remember_prediction``) as well
    as to the window. A helper that dies leaves its claimed rows unanswered; the
    worker predicts them itself."""

    def __init__(self, ws, matches, claimed):
        self.ws, self.matches = ws, matches
        reader, writer = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:   # the helper: no threads but this one, nothing shared but the map
            os.close(reader)
            code = 0
            try:
                os.nice(5)
                out = os.fdopen(writer, "wb", buffering=0)
                for i in range(len(matches) - 1, -1, -1):
                    if not claimed[i]:
                        claimed[i] = 1
                        delta = ws.predict(matches[i]).delta_bytes
                        out.write(struct.pack("<qq", i, _NONE if delta is None else delta))
            except BaseException:
                code = 1
            os._exit(code)
        os.close(writer)
        self.pipe = os.fdopen(reader, "rb", buffering=0)
        self._partial = b""

    def results(self, known, timeout_s: float = 0.0) -> list:
        """Rows the helper finished since the last call (also put in ``known``)."""
        import select
        out = []
        while select.select([self.pipe], [], [], timeout_s)[0]:
            chunk = self.pipe.read(16 * 256)
            if not chunk:
                self.pipe.close()
                self.pipe = _ENDED
                break
            self._partial += chunk
            timeout_s = 0.0
        whole = len(self._partial) // 16 * 16
        for off in range(0, whole, 16):
            i, delta = struct.unpack_from("<qq", self._partial, off)
            delta = None if delta == _NONE else delta
            if i not in known:
                known[i] = delta
                out.append((i, delta))
                self.ws.remember_prediction(self.matches[i], delta)
        self._partial = self._partial[whole:]
        return out

    def wait(self, known, batch) -> bool:
        """Wait for a result of the helper; False once it has ended."""
        if self.pipe is _ENDED:
            return False
        batch += self.results(known, timeout_s=0.2)
        return True

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        if self.pipe is not _ENDED:
            self.pipe.close()


def main(argv=None) -> int:
    worker_process.die_with_parent()
    os.nice(5)   # the window first (rule 6)
    _Worker(worker_process.connection(sys.argv[1:] if argv is None else argv)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
