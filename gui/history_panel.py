"""History: every step with bytes moved and measured time; undo, redo, go back, save.

Row 0 is the import. Steps after the current position (undone, but
redo-able) are shown greyed. Clicking a row goes to that step.
"""
from PyQt5.QtCore import Qt
from PyQt5.QtGui import QBrush, QColor, QFont
from PyQt5.QtWidgets import (QFileDialog, QHBoxLayout, QHeaderView, QPushButton, QTreeWidget,
                             QTreeWidgetItem,
                             QVBoxLayout, QWidget)

from gui.graph_model import human_bytes


def runtime_by_step(profiles) -> dict:
    """History position -> the latest profile taken there."""
    out = {}
    for p in profiles or ():
        out[p.step] = p
    return out


class HistoryPanel(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["#", "Step", "Bytes moved", "Ratio", "Time"])
        self.tree.setRootIsDecorated(False)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(1, QHeaderView.Stretch)
        for c in (0, 2, 3, 4):
            header.setSectionResizeMode(c, QHeaderView.ResizeToContents)
        self.tree.itemClicked.connect(self._clicked)
        self.undo_button = QPushButton("Undo")
        self.redo_button = QPushButton("Redo")
        self.recipe_button = QPushButton("Save recipe…")
        self.script_button = QPushButton("Save script…")
        self.undo_button.clicked.connect(controller.undo)
        self.redo_button.clicked.connect(controller.redo)
        self.recipe_button.clicked.connect(self.ask_save_recipe)
        self.script_button.clicked.connect(self.ask_save_script)
        row = QHBoxLayout()
        for b in (self.undo_button, self.redo_button):
            row.addWidget(b)
        row.addStretch(1)
        for b in (self.recipe_button, self.script_button):
            row.addWidget(b)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.tree, 1)
        col.addLayout(row)
        for signal in (controller.opened, controller.changed, controller.profiled,
                       controller.analysed):
            signal.connect(self.refresh)

    def refresh(self, *_):
        ws = self.ctl.ws
        self.tree.clear()
        if ws is None:
            return
        steps = ws.steps
        times = runtime_by_step(getattr(ws, "profiles", ()))
        movement = self.ctl.analysis[0] if self.ctl.analysis else None
        first = steps[0].get("bytes_before") if steps else getattr(movement, "moved_bytes", None)
        rows = [("import", first, None)]
        for e in steps:
            after, before = e.get("bytes_after"), e.get("bytes_before")
            delta = after - before if after is not None and before is not None else None
            rows.append((f"{e['transformation']}: {e.get('description', '')}", after, delta))
        compulsory = getattr(movement, "compulsory_bytes", None)
        for i, (text, moved, delta) in enumerate(rows):
            prof = times.get(i)
            moved_text = human_bytes(moved) + (f" ({'+' if delta > 0 else ''}{human_bytes(delta)})"
                                               if delta else "")
            ratio = f"{moved / compulsory:.2f}" if compulsory and moved is not None else ""
            item = QTreeWidgetItem([str(i), text, moved_text, ratio,
                                    f"{prof.total_ms:.2f} ms" if prof else ""])
            item.setData(0, Qt.UserRole, i)
            item.setToolTip(1, text)
            if i == ws.position:
                font = QFont(item.font(1))
                font.setBold(True)
                for c in range(5):
                    item.setFont(c, font)
                item.setText(0, f"▶{i}")
            elif i > ws.position:
                for c in range(5):
                    item.setForeground(c, QBrush(QColor("#9a9a9a")))
            self.tree.addTopLevelItem(item)
        self.undo_button.setEnabled(ws.position > 0)
        self.redo_button.setEnabled(ws.position < len(steps))
        self.recipe_button.setEnabled(bool(ws.history))
        self.script_button.setEnabled(bool(ws.history) and hasattr(ws, "save_script"))

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
