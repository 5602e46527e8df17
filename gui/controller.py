"""The bridge between the window and a ``workbench.Session``.

Panels call these methods; each one calls the Session in a worker (see
``gui.worker``) and emits a signal when it is done. The controller keeps
only view state: the selection, the hovered match, and which verification
belongs to which step. The model state is the Session's.

One lock (``Controller.lock``) is held by every worker while it touches the
Session: DaCe's SDFG objects are not safe to read in one thread while
another pattern-matches or copies them, and timings must not compete with
predictions for the CPU. Lanes still decide what waits for what and which
results are stale; the lock only keeps two of them off the Session at once.
It is also the Session's own lock (``ws.lock``).

Every applied step is verified in the background (``gui.check_lane``).
Programs run in a worker process (``workbench.runtime.isolated``): a crash is a
``ProgramCrashed`` shown as "Program crashed", and the session lives on.
"""
import threading
import time

from PyQt5.QtCore import QObject, pyqtSignal

from gui import sessions, timing_check
from gui.profile_names import as_shown
from gui.check_lane import CheckLane
from gui.qtapp import settle_long_lived_objects
from gui.worker import QtProgress, Runner
from workbench.runtime.threads import DEFAULT_THREADS
from workbench.session.replica import Replica, ReplicaFailed

REPLICA_MIN_NODES = 400


def predict_all(ws, matches, job, lock, wanted=lambda: (), every_s: float = 0.5) -> list:
    """Each match with ``delta_bytes``: bytes moved after applying it to a copy, minus now.

    The same measurement as ``Session.transformations(predict=True)``
    (``Session.predict``), one match at a time so the list fills in and a
    superseded job stops early. ``wanted()`` (read before each prediction)
    names the matches to do first: the rows on screen. The list goes to the
    window every ``every_s`` and as soon as no wanted row is left waiting. A
    match that does not apply to a copy keeps no prediction.
    """
    out = list(matches)
    pending = {id(m): i for i, m in enumerate(matches)}
    nxt, last, waited = 0, time.monotonic(), False
    while pending:
        if job.cancelled:
            return out
        first = [pending[id(m)] for m in wanted() if id(m) in pending]
        if first:
            i = first[0]
        else:
            while id(matches[nxt]) not in pending:
                nxt += 1
            i = nxt
        del pending[id(matches[i])]
        with lock:
            out[i] = ws.predict(matches[i])
        waited = waited or len(first) > 0
        if time.monotonic() - last > every_s or (waited and len(first) == 1):
            job.report(list(out))
            last, waited = time.monotonic(), False
    return out


def describe_error(error: BaseException) -> str:
    """One paragraph for a message box: typed errors already say what to do."""
    from workbench.errors import WorkbenchError
    if isinstance(error, WorkbenchError):
        return str(error)
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
    return (f"internal error ({type(error).__name__}: {first}). The session is unchanged; "
            f"this is a workbench bug, please report it.")


class Controller(QObject):
    opened = pyqtSignal()               # a new session (or none)
    changed = pyqtSignal()              # the SDFG or the history changed
    selectionChanged = pyqtSignal()     # selection (identities) or focus changed
    hovered = pyqtSignal(object)        # identities to highlight (tuple), () for none
    matchesReady = pyqtSignal(object, bool)   # matches, predicted
    built = pyqtSignal(object)          # workbench Build
    verified = pyqtSignal(object)       # verification report
    profiled = pyqtSignal(object)       # workbench Profile
    analysed = pyqtSignal(object)       # (DataMovement, class table rows)
    error = pyqtSignal(str, str)        # title, text
    buildFailed = pyqtSignal(object)    # the BuildError (CompileError: names the node)
    untrusted = pyqtSignal(str, str)    # session folder, why: ask before opening it
    status = pyqtSignal(str)            # a status-bar message
    saved = pyqtSignal(str)             # saved (Ctrl+S, Save Session As); the folder it left
    stepChecked = pyqtSignal(object)    # a history entry whose "verified" was just set
    _checkRequested = pyqtSignal(object, object)   # (session, step), from any thread

    def __init__(self, parent=None):
        super().__init__(parent)
        self.progress = QtProgress()
        self.lock = threading.RLock()   # held by any worker touching the Session
        self.runner = Runner(self.progress, latest_wins=("matches", "layout", "analysis"))
        self.analysis = None            # (DataMovement, class table) of the current step
        self.ws = None
        self.selection = ()             # identities of the selected nodes
        self.focus = None               # the selected graph element (gui.graph_model item)
        self.reports = {}               # step key -> verification report
        self.last_build = None
        self.last_profile = None
        self.profile_repeat, self.profile_warmup = 10, 2
        self.profile_threads = DEFAULT_THREADS   # OpenMP, BLAS and onnxruntime alike
        self.last_conditions = None     # gui.timing_check.TimingConditions of last_profile
        self.matches_state = "done"     # listing | predicting | done
        self.on_screen = ()             # the match rows the user sees: predicted first
        # Graphs this large are listed and predicted in a worker process (see
        # workbench.session.replica): ViT-tiny's 1,397 nodes took 20-40 s of pure Python
        # that stalled the window; a bundled block lists in a second, less than the
        # worker takes to start. None: never.
        self.replica_min_nodes = REPLICA_MIN_NODES
        self.replica = Replica()
        self.verify_steps = True        # check each applied step in the background
        self.checks = CheckLane(self)
        self.checking = self.checks.checking   # id() of history entries being checked
        self._checkRequested.connect(self._submit_check)   # queued: runs on the UI thread

    # -- opening -------------------------------------------------------------
    def open_model(self, model, on_done=None, autosave: bool = False) -> None:
        """Import ``model`` (a bundled name or an .onnx path) in a worker. With
        ``autosave`` the session saves after every step into a new folder under
        ``gui.sessions.root()`` (reserved when it opens, written at the first step)."""
        import workbench

        def work(job):
            settle_long_lived_objects()
            return workbench.open(model, progress=self.progress)

        def done(ws):
            if autosave:
                self._autosave_in_new_folder(ws)
            self.set_session(ws, on_done)
        self._session_job(f"Opening {model}", work, done, cancellable=True,
                          error_title="Open failed")

    def _autosave_in_new_folder(self, ws) -> None:
        from workbench.errors import BadInputError
        try:
            ws.folder = sessions.reserve(ws.name)   # what Session.save sets; nothing written yet
        except BadInputError as e:   # the session still opens; the user is told it is not saved
            self.error.emit("No session folder", f"{e} Steps are not saved until File › Save "
                                                 f"Session As.")

    def open_session_folder(self, folder, on_done=None, trust: bool = False) -> None:
        """Reopen a session folder; one this workbench did not write emits ``untrusted``
        (the window asks, then calls again with ``trust=True``)."""
        import workbench
        from workbench.errors import UntrustedSDFGError

        def work(job):
            settle_long_lived_objects()
            return workbench.open_session(folder, progress=self.progress, trust=trust)

        def failed(error):
            if isinstance(error, UntrustedSDFGError):
                self.untrusted.emit(str(folder), str(error))
            else:
                self._failed("Open failed", error)
        self.runner.submit("session", f"Opening session {folder}",
                           lambda job: self._locked(work, job),
                           on_done=lambda ws: self.set_session(ws, on_done), on_error=failed,
                           cancellable=True)

    def set_session(self, ws, on_done=None):
        """Show ``ws`` (opened here, or by the caller: the screenshot command)."""
        if self.ws is not None and self.ws is not ws:
            try:
                self.ws.close()   # unload the old session's compiled library
            except Exception:
                pass
            sessions.discard_if_empty(self.ws.folder)
        self.ws = ws
        ws.progress = self.progress
        ws.lock = self.lock
        ws.verify_steps = self.verify_steps
        ws.step_checks = self._checkRequested.emit   # called by ws.apply in a worker
        self.selection, self.focus = (), None
        self.reports, self.last_build, self.analysis = {}, None, None
        self.last_profile = as_shown(ws, ws.profiles[-1]) if ws.profiles else None
        self.last_conditions = None   # not measured in this window
        self.opened.emit()
        self.request_matches()
        self.request_analysis()
        if on_done:
            on_done(ws)

    # -- selection and matches -----------------------------------------------
    def set_selection(self, idents, focus=None) -> None:
        idents = tuple(sorted(set(idents)))
        changed = idents != self.selection
        self.selection, self.focus = idents, focus
        self.selectionChanged.emit()
        if changed:
            self.request_matches()

    def hover(self, idents) -> None:
        self.hovered.emit(tuple(idents or ()))

    def request_matches(self) -> None:
        """List matches for the selection (or the whole graph), then predict each one.

        Predictions fill in as they come (``matchesReady(matches, False)``
        every half second), the rows on screen first (``on_screen``, kept by
        the transformation panel), and stop early when a newer request
        supersedes this one; ``matchesReady(matches, True)`` ends the listing.
        A selection lists only its own matches, so its rows come first.
        """
        ws, nodes = self.ws, (list(self.selection) or None)
        self.matches_state = "listing"
        if ws is None:
            self.matches_state = "done"
            self.matchesReady.emit([], True)
            return

        replica = self._replica_request(ws)

        def work(job):
            from workbench import transformation_api as transform
            if replica is not None:
                try:
                    return self.replica.listing(*replica, nodes, lambda: job.cancelled,
                                                lambda: self.on_screen, job.report)
                except ReplicaFailed as e:   # listed here instead, as for a small graph
                    self.status.emit(f"Listing in the window's process ({e})")
            matches = []
            # one transformation at a time: on a large graph a listing takes minutes,
            # and a build, an apply or a newer listing must not wait for all of it
            for t in transform.all_transformations():
                if job.cancelled:
                    return matches
                with self.lock:
                    matches += ws.transformations(nodes=nodes, predict=False, names=[t.name])
            job.report(matches)
            return predict_all(ws, matches, job, self.lock, lambda: self.on_screen)

        def listed(matches):
            self.matches_state = "predicting"
            self.matchesReady.emit(matches, False)

        def done(matches):
            self.matches_state = "done"
            self.matchesReady.emit(matches, True)
        self.runner.submit("matches", "Listing transformations", work, on_done=done,
                           on_error=lambda e: self._failed("Listing transformations failed", e),
                           on_partial=listed)

    def _replica_request(self, ws):
        """(spec, state) for the listing worker (``workbench.session.replica``) when the
        graph has ``replica_min_nodes`` nodes or more, else None. Read here, on the UI
        thread: the step must be the one on screen, not one a later apply makes."""
        from workbench.session import replica
        if self.replica_min_nodes is None or \
                sum(st.number_of_nodes() for st in ws.sdfg.states()) < self.replica_min_nodes:
            return None
        spec = replica.spec(ws)
        return None if spec is None else (spec, replica.state(ws))

    def request_analysis(self) -> None:
        """Data movement and the operator-class table of the current step."""
        ws, prof = self.ws, self.last_profile
        if ws is None:
            return
        runtime = dict(prof.per_operator) if prof is not None else None
        replica = self._replica_request(ws)

        def work(job):
            if replica is not None:
                try:
                    return self.replica.analysis(*replica, runtime)
                except ReplicaFailed:   # measured here instead
                    pass
            with self.lock:
                return ws.data_movement(), ws.class_table(runtime=runtime)

        def done(result):
            self.analysis = result
            self.analysed.emit(result)
        self.runner.submit("analysis", "Analysing data movement", work, on_done=done,
                           on_error=lambda e: self._failed("Analysis failed", e))

    # -- steps ---------------------------------------------------------------
    def apply(self, match) -> None:
        self._step(f"Applying {match.transformation}", lambda: self.ws.apply(match),
                   "Transformation failed")

    def undo(self) -> None:
        self._step("Undo", lambda: self.ws.undo(), "Undo failed")

    def redo(self) -> None:
        self._step("Redo", lambda: self.ws.redo(), "Redo failed")

    def goto(self, step: int) -> None:
        self._step(f"Going to step {step}", lambda: self.ws.goto(step), "Going back failed")

    def optimize(self, recipe, on_done=None) -> None:
        def done(result):
            skipped = result.skipped
            if skipped:   # the recipe went on without them; say which and why
                self.status.emit(f"Recipe {recipe}: {len(result)} step(s) applied, "
                                 f"{len(skipped)} skipped ({skipped[0].text()}"
                                 f"{'; ...' if len(skipped) > 1 else ''})")
            if on_done:
                on_done()
        self._step(f"Recipe {recipe}", lambda: self.ws.optimize(recipe), "Recipe failed", done)

    def _step(self, title, call, error_title, on_done=None):
        if self.ws is None:
            return

        def done(result):
            self.changed.emit()
            self.request_matches()
            self.request_analysis()
            if on_done:
                on_done(result)

        def failed(error):
            self.changed.emit()   # the session is as it was; a partial recipe keeps its steps
            self.request_matches()
            self.request_analysis()
            self._failed(error_title, error)
        self.runner.submit("session", title, lambda job: self._locked(call), on_done=done,
                           on_error=failed)
        if self.runner.current("session") is not None and self.runner.pending("session"):
            self.status.emit(f"{title}: queued behind {self.runner.current('session').title}")

    # -- build, verify, profile -------------------------------------------------
    def verify(self, on_done=None) -> None:
        self._measure(profile=False, on_done=on_done)

    def profile(self, on_done=None) -> None:
        self._measure(profile=True, on_done=on_done)

    def build(self, on_done=None) -> None:
        if self.ws is None:
            return
        ws = self.ws

        def work(job):
            return self._with_sources(ws, ws.build()), None, None
        self._session_job("Building", work, lambda r: self.record(r, on_done),
                          cancellable=True, error_title="Build failed")

    def build_failed(self, error) -> None:
        """Tell the views a build failed (the code panel shows where)."""
        from workbench.errors import BuildError
        if isinstance(error, BuildError):
            self.buildFailed.emit(error)

    def _measure(self, profile: bool, on_done=None):
        if self.ws is None:
            return
        ws, repeat, warmup = self.ws, self.profile_repeat, self.profile_warmup
        threads = self.profile_threads

        def work(job):
            build = self._with_sources(ws, ws.build())
            report = ws.verify()
            if not profile:
                return build, report, None
            # the load just around the timed runs: a busy machine makes them too long
            conditions = timing_check.TimingConditions(threads, timing_check.cores(),
                                                       timing_check.load_average())
            prof = ws.profile(repeat=repeat, warmup=warmup, threads=threads)
            conditions.load_after = timing_check.load_average()
            return build, report, prof, conditions
        self._session_job("Profiling" if profile else "Verifying", work,
                          lambda r: self.record(r, on_done), cancellable=True,
                          error_title="Build failed")

    def _submit_check(self, ws, step) -> None:
        self.checks.submit(ws, step)

    @staticmethod
    def _with_sources(ws, build):
        from gui.code_panel import attach_source_map
        return attach_source_map(ws, build)

    def save_session(self, folder=None, on_done=None) -> None:
        """Save now into ``folder`` (default: where the session autosaves) and autosave
        there from then on; an automatic folder it leaves is removed (the session moved,
        see ``gui.sessions``). ``on_done(old_folder)`` runs on the UI thread."""
        ws = self.ws
        if ws is None:
            return
        from workbench.errors import BadInputError
        old = ws.folder
        try:
            folder = sessions.check_target(folder or old or sessions.reserve(ws.name), old)
        except BadInputError as e:   # a folder with other files in it: say so, save nothing
            self._failed("Saving the session failed", e)
            return

        def work(job):
            ws.save(folder)
            moved = sessions.remove_moved(old, folder)
            return moved

        def done(moved):
            where = "moved to" if moved else "saved in"
            self.status.emit(f"Session {where} {folder}; it autosaves there after every step")
            self.saved.emit(str(old) if old is not None else "")
            if on_done:
                on_done(old)
        self._session_job("Saving session", work, done, error_title="Saving the session failed")

    def close_session(self) -> None:
        """When the window closes, after ``shutdown``: write what is not on disk yet (a
        step's check result, say), or remove a reserved folder that never got a step."""
        ws = self.ws
        if ws is None or ws.folder is None:
            return
        if ws.steps or sessions.written(ws.folder):
            with self.lock:
                ws.save(ws.folder)
        else:
            sessions.discard_if_empty(ws.folder)

    def record(self, result, on_done=None):
        """Take (build, report, profile[, timing conditions]) results; any may be None."""
        build, report, prof = result[:3]
        if build is not None:
            self.last_build = build
            self.built.emit(build)
        if report is not None:
            self.reports[self.step_key()] = report
            self.verified.emit(report)
        if prof is not None:
            self.last_profile = as_shown(self.ws, prof)   # kernels named after the nodes
            self.last_conditions = result[3] if len(result) > 3 else None
            self.profiled.emit(self.last_profile)
            self.request_analysis()
        if on_done:
            on_done(result)

    def shutdown(self, timeout_ms: int = 60000) -> None:
        """Stop background checks and wait for every job (the window closes)."""
        self.checks.stop.set()
        self.runner.shutdown(timeout_ms)
        self.replica.close()

    def cancel(self) -> bool:
        if self.runner.cancel("session"):
            self.status.emit(f"Cancelled {self.runner.current('session').title.lower()}; "
                             "the result will be discarded")
            return True
        return False

    # -- saving --------------------------------------------------------------
    def save_recipe(self, path) -> None:
        self.ws.save_recipe(path)

    def save_script(self, path) -> None:
        self.ws.save_script(path)

    # -- what the views ask -----------------------------------------------------
    def step_key(self, position: int = None):
        """Identifies the SDFG of a step even after undo and a different step."""
        ws = self.ws
        position = ws.position if position is None else position
        entry = ws.history[position - 1] if 0 < position <= len(ws.history) else None
        return position, (entry or {}).get("time")

    def current_report(self):
        return self.reports.get(self.step_key()) if self.ws is not None else None

    def busy(self) -> bool:
        return self.runner.busy("session")

    def _locked(self, call, *args):
        with self.lock:
            return call(*args)

    def _session_job(self, job_title, work, on_done, cancellable=False, error_title="Failed"):
        self.runner.submit("session", job_title, lambda job: self._locked(work, job),
                           on_done=on_done,
                           on_error=lambda e: self._failed(error_title, e),
                           cancellable=cancellable)

    def _failed(self, title, error):
        from workbench.errors import Cancelled as AnyCancel   # the GUI's and the build's
        from workbench.errors import ProgramCrashed
        if isinstance(error, AnyCancel):
            self.status.emit("Cancelled: nothing changed")
            return
        if isinstance(error, ProgramCrashed):
            title = "Program crashed"
        self.build_failed(error)
        from workbench.errors import WorkbenchError
        if not isinstance(error, WorkbenchError):   # a bug: keep the traceback for the report
            import sys
            import traceback
            sys.stderr.write(f"{title}:\n" + "".join(traceback.format_exception(
                type(error), error, error.__traceback__)))
        self.error.emit(title, describe_error(error))
