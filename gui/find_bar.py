"""Find in the graph: a field, the hit count, previous/next (F3, Shift+F3) and the list of hits.

The bar knows nothing of the graph: the panel gives it hits as
``(identity, text)`` and shows the one the bar asks for (``go``).
"""
from PyQt5.QtCore import Qt, pyqtSignal
from PyQt5.QtGui import QKeySequence
from PyQt5.QtWidgets import (QAction, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                             QListWidgetItem, QToolButton, QWidget)


class FindBar(QWidget):
    searched = pyqtSignal(str)   # Return pressed in the field
    go = pyqtSignal(str)         # show the hit with this identity

    def __init__(self, parent=None):
        super().__init__(parent)
        self.edit = QLineEdit(placeholderText="Find node (name, op type, array)…")
        self.edit.setMinimumWidth(120)
        self.edit.returnPressed.connect(lambda: self.searched.emit(self.edit.text()))
        self.count = QLabel("")
        self.count.setStyleSheet("color: #555;")
        self.prev_button = QToolButton(text="▲", toolTip="Previous hit (Shift+F3)")
        self.next_button = QToolButton(text="▼", toolTip="Next hit (F3)")
        self.prev_button.clicked.connect(lambda: self.step(-1))
        self.next_button.clicked.connect(lambda: self.step(1))
        for text, keys, delta in (("Next hit", "F3", 1), ("Previous hit", "Shift+F3", -1)):
            action = QAction(text, self)
            action.setShortcut(QKeySequence(keys))
            action.setShortcutContext(Qt.WindowShortcut)
            action.triggered.connect(lambda _=False, d=delta: self.step(d))
            self.addAction(action)
        # the hits, below the toolbar (the panel places it); hidden until a search has two
        self.results = QListWidget()
        self.results.setMaximumHeight(130)
        self.results.setVisible(False)
        self.results.currentRowChanged.connect(self._row)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(2)
        row.addWidget(self.edit, 1)
        row.addWidget(self.count)
        row.addWidget(self.prev_button)
        row.addWidget(self.next_button)
        self.hits, self.index = [], -1
        self._enable()

    def set_hits(self, hits) -> None:
        """Show ``hits`` [(identity, text)] and go to the first."""
        self.hits, self.index = list(hits), -1
        self.results.blockSignals(True)
        self.results.clear()
        for ident, text in self.hits:
            item = QListWidgetItem(text)
            item.setToolTip(ident)
            self.results.addItem(item)
        self.results.blockSignals(False)
        self.results.setVisible(len(self.hits) > 1)
        self._enable()
        if self.hits:
            self.results.setCurrentRow(0)   # emits go (via _row)
        else:
            self.count.setText("no match" if self.edit.text().strip() else "")

    def step(self, delta: int) -> None:
        if self.hits:
            self.results.setCurrentRow((self.index + delta) % len(self.hits))

    def current(self):
        return self.hits[self.index][0] if 0 <= self.index < len(self.hits) else None

    def _row(self, row: int) -> None:
        if 0 <= row < len(self.hits):
            self.index = row
            self.count.setText(f"{row + 1}/{len(self.hits)}")
            self.go.emit(self.hits[row][0])

    def _enable(self):
        for b in (self.prev_button, self.next_button):
            b.setEnabled(len(self.hits) > 1)
