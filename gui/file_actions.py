"""The main window's File side: opening models and session folders, saving, recents, drops.

A mixin of ``gui.main_window.MainWindow`` (it uses the window's controller,
settings and status bar). The recent list lives in the window's QSettings,
most recent first, so that Open Recent survives a restart; a session folder
joins it once it is written, since a reserved folder with no step in it is
removed when the window closes.
"""
from pathlib import Path

from PyQt5.QtCore import Qt
from PyQt5.QtWidgets import QAction, QFileDialog, QMessageBox

from gui import sessions

RECENT_MAX = 8


class FileActions:
    """Open, open a session folder, save, Open Recent and drops of ``MainWindow``."""

    def open_model(self, model, options: dict = None) -> None:
        """``options``: ``workbench.open``'s symbolic and input_shapes (``gui --symbolic``)."""
        if Path(str(model)).is_dir():   # a session folder given where a model was expected
            self.open_session(model)
            return
        self.ctl.open_model(str(model), on_done=lambda ws: self._remember(str(model)),
                            autosave=True, options=options)

    def open_session(self, folder, trust: bool = False) -> None:
        self.ctl.open_session_folder(str(folder), on_done=lambda ws: self._remember(str(folder)),
                                     trust=trust)

    def ask_trust(self, folder: str, why: str) -> None:
        """Before any SDFG of a folder this workbench did not write is loaded: ask."""
        box = QMessageBox(QMessageBox.Warning, "Open a session folder from elsewhere?",
                          f"{why}\n\nOpen '{folder}' and accept its SDFGs?", QMessageBox.NoButton,
                          self)
        accept = box.addButton("Trust and Open", QMessageBox.AcceptRole)
        box.addButton(QMessageBox.Cancel)
        box.setDefaultButton(QMessageBox.Cancel)
        box.setAttribute(Qt.WA_DeleteOnClose)

        def answered(_result):
            self.trust_box = None
            if box.clickedButton() is accept:
                self.open_session(folder, trust=True)
            else:
                self.statusBar().showMessage(f"Not opened: {folder}", 8000)
        box.finished.connect(answered)
        self.trust_box = box
        box.open()   # not exec_(): the UI thread never blocks

    def ask_open(self):
        path, _ = QFileDialog.getOpenFileName(self, "Open ONNX model", "", "ONNX (*.onnx);;All (*)")
        if path:
            self.open_model(path)

    def ask_open_session(self):
        folder = QFileDialog.getExistingDirectory(self, "Open session folder")
        if folder:
            self.open_session(folder)

    def ask_save_session(self):
        if self.ctl.ws is None:
            return
        folder = QFileDialog.getExistingDirectory(
            self, "Move the session to an empty folder", str(sessions.root()))
        if folder:
            self.save_session(folder)

    def save_session(self, folder=None):
        """Ctrl+S (save where it lives) and Save Session As (move it to ``folder``)."""
        self.ctl.save_session(folder)

    def _saved(self, old: str):
        """After a save: the folder is the recent session (replacing the one it left)."""
        if old and not Path(old).exists():
            self._forget(old)
        self._remember(str(self.ctl.ws.folder))
        self.update_title()

    def _remember_session(self):
        """After a step: once the session folder is written it is a recent session."""
        ws = self.ctl.ws
        if ws is not None and sessions.written(ws.folder):
            recent = self.settings.value("recent", [], type=list) or []
            if not recent or recent[0] != str(ws.folder):
                self._remember(str(ws.folder))

    def ask_screenshot(self):
        path, _ = QFileDialog.getSaveFileName(self, "Save screenshot", "workbench.png",
                                              "PNG (*.png)")
        if path:
            self.grab().save(path, "PNG")

    def _remember(self, item: str):
        recent = [r for r in (self.settings.value("recent", [], type=list) or []) if r != item]
        self.settings.setValue("recent", [item] + recent[:RECENT_MAX - 1])
        self._refresh_recent()

    def _forget(self, item: str):
        recent = self.settings.value("recent", [], type=list) or []
        self.settings.setValue("recent", [r for r in recent if r != item])
        self._refresh_recent()

    def _refresh_recent(self):
        self.recent_menu.clear()
        recent = self.settings.value("recent", [], type=list) or []
        for item in recent:
            opener = self.open_session if Path(item).is_dir() else self.open_model
            label, available = sessions.recent_entry(item)
            action = QAction(label.replace("&", "&&"), self)
            action.setData(item)
            action.setEnabled(available)
            action.triggered.connect(lambda _=False, i=item, o=opener: o(i))
            self.recent_menu.addAction(action)
        self.recent_menu.setEnabled(bool(recent))

    def dragEnterEvent(self, event):
        if any(u.toLocalFile().endswith(".onnx") for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event):
        for url in event.mimeData().urls():
            if url.toLocalFile().endswith(".onnx"):
                self.open_model(url.toLocalFile())
                event.acceptProposedAction()
                return
