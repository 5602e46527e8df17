"""The worker process of ``workbench.session.replica``: a copy of the window's session
that lists transformations, predicts their bytes and measures data movement.

    python -m workbench.session.replica_worker FD   (started by ``Replica``, never by hand)

The rules are ``workbench.session.replica``'s; the numbers below refer to them.
"""
import json
import mmap
import os
import signal
import struct
import sys
import time
from collections import deque
from pathlib import Path

from workbench.runtime import worker_process
from workbench.session.replica import ReplicaFailed

# A listing this long gets a forked helper for its predictions (rule 6): a fork costs
# ~0.1 s; a bundled block's 50 predictions take about a second. (Tests set it lower.)
HELPER_MIN_MATCHES = int(os.environ.get("WORKBENCH_REPLICA_HELPER_MIN", "100"))
_NONE = -(2 ** 63)    # "no prediction" on the helper's pipe
_ENDED = object()


class _Worker:
    def __init__(self, conn):
        self.conn = conn
        self.ws = self.ws_spec = None
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
        if self._opened_as(spec_) or self._resized(spec_):
            return
        self.ws, self.ws_spec, self.open_error = None, None, None
        try:
            if "folder" in spec_:
                self.ws = Session.open_folder(spec_["folder"], trust=True, autosave=False)
            else:
                path = Path(spec_["source"])
                if spec_["stamp"] is not None and \
                        [path.stat().st_size, path.stat().st_mtime_ns] != spec_["stamp"]:
                    raise ReplicaFailed(f"'{path}' changed on disk since the window opened it")
                self.ws = workbench.open(spec_["source"], input_shapes=spec_["shapes"],
                                         symbolic=spec_.get("symbolic", ()))
            if spec_.get("sizes"):   # rule 8 (a folder's manifest may say others)
                self.ws.set_sizes(spec_["sizes"])
            self.ws_spec = spec_
        except Exception as e:
            self.ws, self.open_error = None, f"{type(e).__name__}: {e}"

    def _resized(self, spec_) -> bool:
        """True when ``spec_`` is the open session's but for its sizes, which are set on
        it then (rule 8): nothing is opened again."""
        before, sized = self.ws_spec, ("shapes", "sizes")
        if self.ws is None or before is None or not before.get("sizes") \
                or not spec_.get("sizes"):
            return False
        if {k: v for k, v in before.items() if k not in sized} != \
                {k: v for k, v in spec_.items() if k not in sized}:
            return False
        try:
            self.ws.set_sizes(spec_["sizes"])
        except Exception:   # opened again, which says what is wrong
            return False
        self.ws_spec = spec_
        return True

    def _opened_as(self, spec_) -> bool:
        """True when the session open now is ``spec_``'s untouched: the same file and
        shapes, opened ahead by ``Replica.prepare`` with the model's own (rule 7)."""
        ws, before = self.ws, getattr(self, "ws_spec", None)
        if ws is None or before is None or "source" not in spec_ or ws.history:
            return False
        if list(ws.model.symbols) != list(spec_.get("symbolic", ())):
            return False
        if spec_.get("sizes") and spec_["sizes"] != ws.symbols:
            return False
        shapes = ws.input_shapes()
        return (before.get("source") == spec_["source"]
                and before.get("stamp") == spec_["stamp"]
                and (spec_["shapes"] is None or spec_["shapes"] == shapes))

    def _session(self):
        if self.ws is None:
            raise ReplicaFailed(f"the session could not be opened: {self.open_error}")
        return self.ws

    def _analyse(self, rid, state_, runtime) -> None:
        try:
            self._reach(state_)
            ws = self._session()
            self._answer("analysed", rid, (ws.data_movement(), ws.class_table(runtime=runtime),
                                              ws.memory()))
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
