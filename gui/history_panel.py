"""History: every step with bytes moved, measured time and its check; undo, redo, go back, save.

Row 0 is the import. Steps after the current position (undone, but
redo-able) are shown greyed. Clicking a row goes to that step. The last
column shows each step's verification (``entry["verified"]``, see
``workbench.session.step_checks``): a check mark with the largest error, a cross
with the output that differs (or why the program did not run), an ellipsis
while the background check runs. A failed step offers "Undo to before this
step" (its row's context menu, and the button below for the first failed
step of the current history).
"""
from PyQt5.QtCore import Qt, pyqtSignal
from PyQt5.QtGui import QBrush, QColor, QFont
from PyQt5.QtWidgets import (QFileDialog, QHBoxLayout, QHeaderView, QMenu, QPushButton,
                             QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

COLUMNS = ["#", "Step", "Bytes moved", "Ratio", "Time", "Check"]
CHECK, STEP = COLUMNS.index("Check"), COLUMNS.index("Step")
PASSED, FAILED, PENDING = QColor("#1a7f37"), QColor("#b42318"), QColor("#777777")


def check_mark(entry: dict, pending: bool = False):
    """(text, colour, tooltip) of a step's verification; ("", None, "") when unchecked."""
    verified = (entry or {}).get("verified")
    if verified is None:
        return ("…", PENDING, "being verified in the background") if pending else ("", None, "")
    if verified.get("match"):
        err = verified.get("max_abs_err")
        return (f"✓ {err:.1e}", PASSED,
                f"matches onnxruntime; largest error {err:.3g} (output {verified.get('output')})")
    if verified.get("error"):
        return "✗ did not run", FAILED, verified["error"]
    return (f"✗ {verified.get('output')}", FAILED,
            f"output {verified.get('output')} differs from onnxruntime (max abs err "
            f"{verified.get('max_abs_err'):.3g})")


def other_sizes(entry: dict, sizes: dict) -> str:
    """``batch=4`` when ``entry``'s bytes were taken at other sizes than ``sizes`` (a
    symbolic program's, ``Session.set_sizes``), else ""."""
    recorded = (entry or {}).get("sizes") or {}
    if not recorded or {**sizes, **recorded} == sizes:
        return ""
    return ", ".join(f"{k}={v}" for k, v in recorded.items())


def failed_step(entry: dict) -> bool:
    verified = (entry or {}).get("verified")
    return verified is not None and not verified.get("match")

from gui.graph_model import human_bytes


def runtime_by_step(profiles) -> dict:
    """History position -> the latest profile taken there."""
    out = {}
    for p in profiles or ():
        out[p.step] = p
    return out


class HistoryPanel(QWidget):
    compareRequested = pyqtSignal(int, int)   # two history points (the window opens them)

    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        header = self.tree.header()
        header.setStretchLastSection(False)
        # every column as wide as its text (a narrow dock scrolls sideways); the step,
        # the widest, is shown last so the numbers and the check stay in view
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.moveSection(header.visualIndex(STEP), len(COLUMNS) - 1)
        self.tree.itemClicked.connect(self._clicked)
        self.tree.setContextMenuPolicy(Qt.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.undo_failed_button = QPushButton("Undo failed step")
        self.undo_failed_button.setToolTip("go back to before the first step that failed "
                                           "its verification")
        self.undo_failed_button.clicked.connect(self.undo_first_failed)
        self.undo_button = QPushButton("Undo")
        self.redo_button = QPushButton("Redo")
        self.recipe_button = QPushButton("Save recipe…")
        self.script_button = QPushButton("Save script…")
        self.undo_button.clicked.connect(controller.undo)
        self.redo_button.clicked.connect(controller.redo)
        self.recipe_button.clicked.connect(self.ask_save_recipe)
        self.script_button.clicked.connect(self.ask_save_script)
        row = QHBoxLayout()
        for b in (self.undo_button, self.redo_button, self.undo_failed_button):
            row.addWidget(b)
        row.addStretch(1)
        for b in (self.recipe_button, self.script_button):
            row.addWidget(b)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.tree, 1)
        col.addLayout(row)
        for signal in (controller.opened, controller.changed, controller.profiled,
                       controller.analysed, controller.stepChecked, controller.sizesChanged):
            signal.connect(self.refresh)

    def refresh(self, *_):
        ws = self.ctl.ws
        self.tree.clear()
        if ws is None:
            return
        steps = ws.steps
        times = runtime_by_step(ws.profiles)
        movement = self.ctl.analysis[0] if self.ctl.analysis else None
        first = steps[0].get("bytes_before") if steps else (movement.moved_bytes if movement
                                                             else None)
        rows = [("import", first, None, steps[0] if steps else None)]
        for e in steps:
            after, before = e.get("bytes_after"), e.get("bytes_before")
            delta = after - before if after is not None and before is not None else None
            rows.append((f"{e['transformation']}: {e.get('description', '')}", after, delta, e))
        compulsory = movement.compulsory_bytes if movement else None
        for i, (text, moved, delta, taken) in enumerate(rows):
            prof = times.get(i)
            moved_text = human_bytes(moved) + (f" ({'+' if delta > 0 else ''}{human_bytes(delta)})"
                                               if delta else "")
            other = other_sizes(taken, ws.symbols)
            if other:   # recorded at other sizes than the figures are taken at now
                moved_text += f" at {other}"
            ratio = f"{moved / compulsory:.2f}" if compulsory and moved is not None \
                and not other else ""
            entry = steps[i - 1] if i else None
            mark, colour, why = check_mark(entry, id(entry) in self.ctl.checking)
            item = QTreeWidgetItem([str(i), text, moved_text, ratio,
                                    f"{prof.total_ms:.2f} ms" if prof else "", mark])
            item.setData(0, Qt.UserRole, i)
            item.setToolTip(1, text)
            if i == ws.position:
                font = QFont(item.font(1))
                font.setBold(True)
                for c in range(len(COLUMNS)):
                    item.setFont(c, font)
                item.setText(0, f"▶{i}")
            elif i > ws.position:
                for c in range(len(COLUMNS)):
                    item.setForeground(c, QBrush(QColor("#9a9a9a")))
            if colour is not None and i <= ws.position:
                item.setForeground(CHECK, QBrush(colour))
            item.setToolTip(CHECK, why)
            self.tree.addTopLevelItem(item)
        self.undo_button.setEnabled(ws.position > 0)
        self.redo_button.setEnabled(ws.position < len(steps))
        self.undo_failed_button.setEnabled(self.first_failed() is not None)
        self.recipe_button.setEnabled(bool(ws.history))
        self.script_button.setEnabled(bool(ws.history))

    def first_failed(self):
        """The position of the first applied step that failed its check, or None."""
        ws = self.ctl.ws
        if ws is None:
            return None
        return next((i for i, e in enumerate(ws.history, start=1) if failed_step(e)), None)

    def undo_first_failed(self):
        step = self.first_failed()
        if step is not None:
            self.ctl.goto(step - 1)

    def undo_to_before(self, step: int):
        """Go to the step before ``step`` (what the context menu offers)."""
        if self.ctl.ws is not None and step >= 1:
            self.ctl.goto(step - 1)

    def _context_menu(self, point):
        item = self.tree.itemAt(point)
        if item is not None and self.ctl.ws is not None:
            self.menu_for(item.data(0, Qt.UserRole)).popup(
                self.tree.viewport().mapToGlobal(point))

    def menu_for(self, step: int) -> QMenu:
        """The context menu of row ``step``."""
        ws = self.ctl.ws
        menu = QMenu(self)
        if step >= 1:
            undo = menu.addAction("Undo to before this step")
            undo.triggered.connect(lambda _=False: self.undo_to_before(step))
            undo.setEnabled(step <= ws.position)
            if failed_step(ws.steps[step - 1]):
                f = undo.font()
                f.setBold(True)
                undo.setFont(f)
        go = menu.addAction("Go to this step")
        go.triggered.connect(lambda _=False: self.ctl.goto(step))
        if step >= 1:
            menu.addSeparator()
            menu.addAction("Compare with previous step").triggered.connect(
                lambda _=False: self.compareRequested.emit(step - 1, step))
            menu.addAction("Compare with imported model").triggered.connect(
                lambda _=False: self.compareRequested.emit(0, step))
        return menu

    def _clicked(self, item, _col):
        step = item.data(0, Qt.UserRole)
        if self.ctl.ws is not None and step != self.ctl.ws.position:
            self.ctl.goto(step)

    def ask_save_recipe(self):
        path, _ = QFileDialog.getSaveFileName(self, "Save recipe",
                                              f"{self.ctl.ws.name}-recipe.json", "Recipe (*.json)")
        if path:
            self._save(self.ctl.save_recipe, path, "recipe")

    def ask_save_script(self):
        path, _ = QFileDialog.getSaveFileName(self, "Save script", f"{self.ctl.ws.name}_steps.py",
                                              "Python (*.py)")
        if path:
            self._save(self.ctl.save_script, path, "script")

    def _save(self, fn, path, what):
        try:
            fn(path)
        except Exception as e:  # a file error: say so, keep going
            from gui.controller import describe_error
            self.ctl.error.emit(f"Saving the {what} failed", describe_error(e))
            return
        self.ctl.status.emit(f"Saved the {what} to {path}")
