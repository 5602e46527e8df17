"""The sizes box: the sizes a symbolic program's figures are taken at, beside the overlays.

A program imported with symbolic dims (``workbench.open(..., symbolic=["batch"])``)
has one spin box per symbol, labelled with the model's dim name. Its bytes moved,
memory, FLOPs, the class table and the predicted bytes of transformations are
numbers at these sizes, and Profile runs at them. A value takes effect when its
box's editing finishes (Enter, or leaving the box), not per keystroke: the
controller calls ``Session.set_sizes`` in the session lane and every view that
shows a figure refreshes. A program of one size shows no box.
"""
from PyQt5.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QWidget

from gui.program_runs import SIZES_FAILED

MAX_SIZE = 1_000_000


class SizesBox(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.spins = {}   # the model's dim name -> its QSpinBox
        self._asked = None   # sizes sent to the session and not answered yet
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(3)
        self.title = QLabel("At sizes:")
        self.row.addWidget(self.title)
        self.setVisible(False)
        controller.opened.connect(self.rebuild)
        controller.sizesChanged.connect(self.show_sizes)
        controller.error.connect(   # refused: back to the sizes in use
            lambda title, _: self.show_sizes() if title == SIZES_FAILED else None)

    def rebuild(self) -> None:
        """One labelled box per symbol of the session's program (none: hidden)."""
        while self.row.count() > 1:
            widget = self.row.takeAt(1).widget()
            if widget is not None:
                widget.deleteLater()
        self.spins = {}
        ws = self.ctl.ws
        symbols = ws.symbols if ws is not None else {}
        for name, value in symbols.items():
            label = QLabel(name)
            spin = QSpinBox(minimum=1, maximum=MAX_SIZE, value=int(value))
            spin.setAccelerated(True)
            label.setBuddy(spin)
            spin.editingFinished.connect(self._edited)
            self.row.addWidget(label)
            self.row.addWidget(spin)
            self.spins[name] = spin
        self.setVisible(bool(symbols))
        self.show_sizes()

    def sizes(self) -> dict:
        """The sizes the boxes hold now."""
        return {name: spin.value() for name, spin in self.spins.items()}

    def _edited(self) -> None:
        ws = self.ctl.ws
        wanted = self.sizes()
        if ws is not None and wanted and wanted != ws.symbols and wanted != self._asked:
            self._asked = wanted   # Enter, then leaving the box: asked once
            self.ctl.set_sizes(wanted)

    def show_sizes(self) -> None:
        """The boxes hold the sizes the figures are taken at, and say so."""
        ws = self.ctl.ws
        symbols = ws.symbols if ws is not None else {}
        self._asked = None
        for name, spin in self.spins.items():
            if name in symbols and spin.value() != symbols[name]:
                spin.blockSignals(True)
                spin.setValue(int(symbols[name]))
                spin.blockSignals(False)
        text = ", ".join(f"{k}={v}" for k, v in symbols.items())
        self.setToolTip(f"Bytes moved, memory, FLOPs, the class table and predicted bytes are "
                        f"taken at {text}; Profile runs at these sizes. One build runs at "
                        f"every size: Enter (or leaving a box) takes the figures again.")
