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

Where transformations are listed and which rows are predicted first is
``workbench.session.listing``; build, verify and profile are
``gui.program_runs``. Every applied step is verified in the background
(``gui.check_lane``).
Programs run in a worker process (``workbench.runtime.isolated``): a crash is a
``ProgramCrashed`` shown as "Program crashed", and the session lives on.
"""
import logging
import threading

from PyQt5.QtCore import QObject, pyqtSignal

from gui import sessions
from gui.profile_names import as_shown
from gui.check_lane import CheckLane
from gui.program_runs import ProgramRuns
from gui.qtapp import settle_long_lived_objects, settle_session
from gui.worker import QtProgress, Runner
from workbench.runtime.threads import DEFAULT_THREADS
from workbench.session import listing
from workbench.session.listing import REPLICA_MIN_NODES, predict_all  # noqa: F401 (tests)
from workbench.session.replica import Replica

log = logging.getLogger(__name__)


def describe_error(error: BaseException) -> str:
    """One paragraph for a message box: typed errors already say what to do."""
    from workbench.errors import WorkbenchError
    if isinstance(error, WorkbenchError):
        return str(error)
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
    return (f"internal error ({type(error).__name__}: {first}). The session is unchanged; "
            f"this is a workbench bug, please report it.")


class Controller(ProgramRuns, QObject):
    opened = pyqtSignal()               # a new session (or none)
    changed = pyqtSignal()              # the SDFG or the history changed
    selectionChanged = pyqtSignal()     # selection (identities) or focus changed
    hovered = pyqtSignal(object)        # identities to highlight (tuple), () for none
    matchesReady = pyqtSignal(object, bool)   # matches, predicted
    built = pyqtSignal(object)          # workbench Build
    verified = pyqtSignal(object)       # verification report
    profiled = pyqtSignal(object)       # workbench Profile
    analysed = pyqtSignal(object)       # (DataMovement, class table rows, MemoryFigure)
    error = pyqtSignal(str, str)        # title, text
    buildFailed = pyqtSignal(object)    # the BuildError (CompileError: names the node)
    untrusted = pyqtSignal(str, str)    # session folder, why: ask before opening it
    status = pyqtSignal(str)            # a status-bar message
    saved = pyqtSignal(str)             # saved (Ctrl+S, Save Session As); the folder it left
    stepChecked = pyqtSignal(object)    # a history entry whose "verified" was just set
    sizesChanged = pyqtSignal()         # the sizes a symbolic program's figures are taken at
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
        # where the listing runs (workbench.session.listing, rule 1); None: never in
        # the worker process
        self.replica_min_nodes = REPLICA_MIN_NODES
        self.replica = Replica()
        self.verify_steps = True        # check each applied step in the background
        self.checks = CheckLane(self)
        self.checking = self.checks.checking   # id() of history entries being checked
        self._checkRequested.connect(self._submit_check)   # queued: runs on the UI thread

    # -- opening -------------------------------------------------------------
    def open_model(self, model, on_done=None, autosave: bool = False,
                   options: dict = None) -> None:
        """Import ``model`` (a bundled name or an .onnx path) in a worker, with
        ``workbench.open``'s ``options`` (symbolic, input_shapes). With ``autosave`` the
        session saves after every step into a new folder under ``gui.sessions.root()``
        (reserved when it opens, written at the first step)."""
        import workbench
        options = {k: v for k, v in (options or {}).items() if v}

        def work(job):
            settle_long_lived_objects()
            if not options:   # the listing worker opens a large model beside this process
                threading.Thread(target=listing.prepare_worker, daemon=True,   # (rule 7)
                                 args=(self.replica, model, self.replica_min_nodes)).start()
            return settle_session(workbench.open(model, progress=self.progress, **options))

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
            return settle_session(workbench.open_session(folder, progress=self.progress,
                                                         trust=trust))

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
            except Exception as e:   # the new session opens all the same
                log.warning("closing the previous session %s failed: %s", self.ws.name, e)
            sessions.discard_if_empty(self.ws.folder)
        self.ws = ws
        ws.attach(progress=self.progress, lock=self.lock, verify_steps=self.verify_steps,
                  step_checks=self._checkRequested.emit)   # called by ws.apply in a worker
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

        request = self._replica_request(ws)

        def work(job):
            return listing.list_and_predict(
                ws, nodes, job, self.lock, lambda: self.on_screen, request=request,
                replica=self.replica,
                on_fallback=lambda e: self.status.emit(f"Listing in the window's process ({e})"))

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
        """``listing.worker_request`` with this window's ``replica_min_nodes``. Read here, on
        the UI thread: the step must be the one on screen, not one a later apply makes."""
        return listing.worker_request(ws, self.replica_min_nodes)

    def request_analysis(self) -> None:
        """Data movement and the operator-class table of the current step."""
        ws, prof = self.ws, self.last_profile
        if ws is None:
            return
        runtime = dict(prof.per_operator) if prof is not None else None
        request = self._replica_request(ws)

        def work(job):
            return listing.analyse(ws, runtime, self.lock, request=request, replica=self.replica)

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

    def _submit_check(self, ws, step) -> None:
        self.checks.submit(ws, step)

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
