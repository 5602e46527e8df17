"""The main window: graph in the centre, panels in docks, menus, status bar.

Every action goes through ``gui.controller.Controller``; the window itself
only arranges panels, shows progress (with Cancel) and errors, and keeps
the list of recent models and sessions (QSettings).

Nothing is lost on close: a model opened here autosaves into a session
folder of its own from the first step (``gui.sessions``; the title names
it), and closing while a step still runs asks to close when it is done.
"""
import time

from PyQt5.QtCore import QSettings, Qt, QTimer
from PyQt5.QtGui import QKeySequence
from PyQt5.QtWidgets import (QAction, QApplication, QDockWidget, QInputDialog, QLabel, QMainWindow,
                             QMessageBox, QProgressBar, QPushButton)

from gui.code_panel import CodePanel
from gui.compare_view import CompareWindow
from gui.controller import Controller, describe_error
from gui.file_actions import FileActions
from gui.graph_view import GraphPanel
from gui.help_menu import HelpMenu
from gui.history_panel import HistoryPanel
from gui.idle_collector import IdleCollector
from gui.profile_panel import ProfilePanel
from gui.properties_panel import PropertiesPanel
from gui.transform_panel import TransformPanel


class MainWindow(FileActions, QMainWindow):
    def __init__(self, settings: QSettings = None):
        super().__init__()
        self.settings = settings or QSettings()
        self.ctl = Controller(self)
        self.collector = IdleCollector(self.ctl.runner, self)
        self.last_error = None
        self.setAcceptDrops(True)
        self.resize(1600, 1000)

        self.graph = GraphPanel(self.ctl)
        self.setCentralWidget(self.graph)
        self.transforms = TransformPanel(self.ctl)
        self.history = HistoryPanel(self.ctl)
        self.properties = PropertiesPanel(self.ctl)
        self.code = CodePanel(self.ctl)
        self.profile = ProfilePanel(self.ctl)
        self.compare_window = None   # gui.compare_view, made when first asked for
        self.history.compareRequested.connect(self.compare)
        self.docks = {}
        for name, widget, area in (("Transformations", self.transforms, Qt.LeftDockWidgetArea),
                                   ("History", self.history, Qt.LeftDockWidgetArea),
                                   ("Properties", self.properties, Qt.RightDockWidgetArea),
                                   ("Generated code", self.code, Qt.RightDockWidgetArea),
                                   ("Profiling", self.profile, Qt.BottomDockWidgetArea)):
            dock = QDockWidget(name, self)
            dock.setObjectName(name)
            dock.setWidget(widget)
            self.addDockWidget(area, dock)
            self.docks[name] = dock
        self.resizeDocks([self.docks["Transformations"], self.docks["Properties"]], [380, 420],
                         Qt.Horizontal)
        self.resizeDocks([self.docks["Transformations"], self.docks["History"]], [400, 250],
                         Qt.Vertical)
        self.resizeDocks([self.docks["Properties"], self.docks["Generated code"]], [240, 410],
                         Qt.Vertical)
        self.resizeDocks([self.docks["Profiling"]], [300], Qt.Vertical)

        self._status_bar()
        self._menus()
        self.ctl.opened.connect(self._opened)
        self.ctl.changed.connect(self.update_title)
        self.ctl.changed.connect(self._remember_session)
        self.ctl.saved.connect(self._saved)
        self.close_box = None   # the open "a step is still running" question, if any
        self._close_when_done = False   # "Close When Done" was chosen
        self._close_failed = False      # saving at close failed once: the next close closes
        self.ctl.verified.connect(self._verified)
        self.ctl.error.connect(self.show_error)
        self.ctl.untrusted.connect(self.ask_trust)
        self.trust_box = None   # the open "trust this folder?" question, if any
        self.ctl.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.update_title()

    # -- building the window -------------------------------------------------------
    def _status_bar(self):
        bar = self.statusBar()
        self.verify_label = QLabel("")
        self.phase_label = QLabel("")
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(220)
        self.progress_bar.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.ctl.cancel)
        for w in (self.verify_label, self.phase_label, self.progress_bar, self.cancel_button):
            bar.addPermanentWidget(w)
        self._set_busy(None)
        runner, progress = self.ctl.runner, self.ctl.progress
        runner.started.connect(lambda job: self._set_busy(job) if job.lane == "session" else None)
        runner.finished.connect(lambda job: self._set_busy(runner.current("session")))
        runner.finished.connect(self._cancel_done)
        progress.phaseStarted.connect(self._phase)
        progress.stepped.connect(self._stepped)

    def _menus(self):
        menu = self.menuBar().addMenu("&File")
        self._action(menu, "&Open ONNX…", self.ask_open, QKeySequence.Open)
        self.recent_menu = menu.addMenu("Open &Recent")
        models = menu.addMenu("&Bundled Models")
        import sdfg_models
        for name in sdfg_models.names():
            self._action(models, name, lambda _=False, n=name: self.open_model(n))
        self._action(menu, "Open &Session Folder…", self.ask_open_session)
        menu.addSeparator()
        self._action(menu, "&Save Session", self.save_session, QKeySequence.Save)
        self._action(menu, "Save Session &As…", self.ask_save_session)
        self._action(menu, "Save Re&cipe…", self.history.ask_save_recipe)
        self._action(menu, "Save Scrip&t…", self.history.ask_save_script)
        self._action(menu, "Save Screens&hot…", self.ask_screenshot)
        self._action(menu, "&Export Graph (SVG, PNG)…", self.graph.ask_export)
        menu.addSeparator()
        self._action(menu, "&Quit", self.close, QKeySequence.Quit)
        self._refresh_recent()

        menu = self.menuBar().addMenu("&Edit")
        self._action(menu, "&Undo", self.ctl.undo, [QKeySequence("Ctrl+Z")])
        self._action(menu, "&Redo", self.ctl.redo,
                     [QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        self._action(menu, "&Find Node", self._focus_find, QKeySequence.Find)
        self._action(menu, "&Clear Selection", lambda: self.ctl.set_selection(()),
                     QKeySequence("Ctrl+Shift+A"))

        menu = self.menuBar().addMenu("&Run")
        self.run_actions = [
            self._action(menu, "&Verify", lambda: self.ctl.verify(), QKeySequence("Ctrl+R")),
            self._action(menu, "&Profile", lambda: self.ctl.profile(), QKeySequence("F5")),
            self._action(menu, "&Generate Code", lambda: self.ctl.build(), QKeySequence("Ctrl+B"))]
        self._action(menu, "Apply Recipe…", self.ask_recipe)
        self._action(menu, "&Cancel", self.ctl.cancel, QKeySequence("Esc"))

        menu = self.menuBar().addMenu("&View")
        self._action(menu, "&Fit Graph", self.graph.view.fit, QKeySequence("Ctrl+0"))
        self._action(menu, "&Compare with Imported Model…", self.compare)
        menu.addSeparator()
        for dock in self.docks.values():
            menu.addAction(dock.toggleViewAction())

        self.help = HelpMenu(self, self.menuBar().addMenu("&Help"))

    def _action(self, menu, text, slot, shortcut=None):
        action = QAction(text, self)
        if isinstance(shortcut, list):
            action.setShortcuts(shortcut)
        elif shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(lambda _=False: slot())
        menu.addAction(action)
        self.addAction(action)
        return action

    # -- asking ------------------------------------------------------------------
    def ask_recipe(self):
        from workbench.recipe import recipe_names
        name, ok = QInputDialog.getItem(self, "Apply recipe", "Recipe name or .json path:",
                                        recipe_names() or [""], 0, True)
        if ok and name.strip():
            self.ctl.optimize(name.strip())

    # -- reacting ---------------------------------------------------------------
    def _opened(self):
        self.update_title()
        self.statusBar().showMessage(f"Opened {self.ctl.ws.name}", 5000)

    def _verified(self, report):
        self.update_title()
        worst = report.worst()
        if report.match:
            self.verify_label.setText(f"✓ verified: matches {report.reference}")
            self.verify_label.setStyleSheet("color: #1a7f37;")
        else:
            self.verify_label.setText(f"✗ MISMATCH: {worst.name} max abs err "
                                      f"{worst.max_abs_err:.3g}, rel {worst.max_rel_err:.3g}")
            self.verify_label.setStyleSheet("color: #b42318; font-weight: bold;")

    def update_title(self):
        ws = self.ctl.ws
        if ws is None:
            self.setWindowTitle("DaCe Workbench")
            return
        report = self.ctl.current_report()
        state = ("verified ✓" if report.match else "MISMATCH ✗") if report else "not verified"
        where = f" — {ws.folder}" if ws.folder is not None else ""
        self.setWindowTitle(f"{ws.name} — step {ws.position}/{len(ws.steps)} — {state}{where} — "
                            f"DaCe Workbench")
        if report is None:
            self.verify_label.setText("not verified")
            self.verify_label.setStyleSheet("color: #777;")

    def _set_busy(self, job):
        busy = job is not None
        self.progress_bar.setVisible(busy)
        self.phase_label.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.cancel_button.setEnabled(busy and job.cancellable)
        measuring = busy and job.cancellable
        for w in self.run_actions if hasattr(self, "run_actions") else ():
            w.setEnabled(not measuring)
        for w in (self.profile.verify_button, self.profile.profile_button, self.code.build_button):
            w.setEnabled(not measuring)
        if busy:
            self.phase_label.setText(job.title + "…")
            self.progress_bar.setRange(0, 0)
            self._job_started = time.perf_counter()

    def _cancel_done(self, job):
        if job.lane == "session" and job.cancelled:
            self.statusBar().showMessage(f"Cancelled {job.title.lower()}: nothing changed; the "
                                         f"session is as before", 15000)

    def _phase(self, name, total):
        job = self.ctl.runner.current("session")
        self.phase_label.setText(f"{job.title if job else ''}: {name}…")
        self.progress_bar.setRange(0, total) if total else self.progress_bar.setRange(0, 0)

    def _stepped(self, done, total, label):
        if total:
            self.progress_bar.setRange(0, total)
            self.progress_bar.setValue(done)

    def show_error(self, title, text):
        self.last_error = (title, text)
        self.statusBar().showMessage(f"{title}: {text.splitlines()[0][:200]}", 15000)
        box = QMessageBox(QMessageBox.Warning, title, text, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()   # not exec_(): the UI thread never blocks

    def compare(self, a: int = 0, b: int = None) -> None:
        """Show history points ``a`` and ``b`` side by side (default: the import against
        the current step)."""
        if self.ctl.ws is None:
            return
        if self.compare_window is None:
            self.compare_window = CompareWindow(self.ctl, self)
        self.compare_window.compare(a, self.ctl.ws.position if b is None else b)
        self.compare_window.show()
        self.compare_window.raise_()

    def _focus_find(self):
        self.graph.find.setFocus()
        self.graph.find.selectAll()

    def unfinished_step(self):
        """The title of a running step (apply, undo, recipe, save: not cancellable) or of
        queued work, which closing now would drop; None when there is none."""
        runner = self.ctl.runner
        job, queued = runner.current("session"), runner.pending("session")
        if not queued and (job is None or job.cancellable or job.cancelled):
            # a build, verify or profile is cancelled: it changes no step; after
            # runner.shutdown (the owner closing the window) every job is marked cancelled
            return None
        title = job.title if job is not None else "A queued step"
        return title + (f" (and {queued} more queued)" if queued and job is not None else "")

    def closeEvent(self, event):
        step = self.unfinished_step()
        if step is not None:   # its result would be lost: close once it is saved
            event.ignore()
            if not self._close_when_done:
                self._ask_close_when_done(step)
            return
        self.statusBar().showMessage("Waiting for running jobs to stop…")
        QApplication.processEvents()
        self.ctl.shutdown()
        try:
            self.ctl.close_session()
        except Exception as e:   # say so; a second close closes anyway
            if not self._close_failed:
                self._close_failed = True
                event.ignore()
                self.show_error("Saving the session failed",
                                f"{describe_error(e)}\n\nClose the window again to close "
                                f"without saving.")
                return
        self.collector.stop()
        super().closeEvent(event)

    def _ask_close_when_done(self, step: str):
        where = self.ctl.ws.folder if self.ctl.ws is not None else None
        box = QMessageBox(QMessageBox.Information, "A step is still running",
                          f"{step} is still running. Its result is saved"
                          f"{f' to {where}' if where else ''} when it finishes.",
                          QMessageBox.NoButton, self)
        later = box.addButton("Close When Done", QMessageBox.AcceptRole)
        box.addButton("Keep Open", QMessageBox.RejectRole)
        box.setDefaultButton(later)
        box.setAttribute(Qt.WA_DeleteOnClose)

        def answered(_result):
            self.close_box = None
            if box.clickedButton() is later:
                self._close_when_done = True
                self.statusBar().showMessage(f"Closing when {step} is done…")
                self.ctl.runner.finished.connect(self._close_if_done)
                self._close_if_done()
        box.finished.connect(answered)
        self.close_box = box
        box.open()   # not exec_(): the step goes on while the question is open

    def _close_if_done(self, *_):
        if self._close_when_done and self.unfinished_step() is None:
            self._close_when_done = False
            self.ctl.runner.finished.disconnect(self._close_if_done)
            QTimer.singleShot(0, self.close)   # after the runner has finished its own work
