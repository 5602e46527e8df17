"""The transformation panel's folded group "Not offered (N)": why the others refuse.

For a selection, one group row says why each transformation that has no
match touching the selected nodes refused them ("GemmEpilogueFusion: its
output 'x' is read by 2 nodes, ..."), from ``workbench.session.refusals``.
It is computed in the runner's ``refusals`` lane (latest wins), off the UI
thread like the listing, holding the controller's lock while it reads the
session. The group is folded at first, so it costs the match list no room
until the user asks, and it is hidden when there is nothing to explain.
Hovering a row highlights the refused node in the graph.
"""
from PyQt5.QtCore import Qt
from PyQt5.QtGui import QFont
from PyQt5.QtWidgets import QHeaderView, QTreeWidget, QTreeWidgetItem

NOT_OFFERED = "Not offered"   # the group of refusals for the selection


class RefusalList(QTreeWidget):
    """Asks again whenever the selection, the session or its SDFG changes."""

    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.setHeaderHidden(True)
        self.setIndentation(12)
        self.setMouseTracking(True)
        # long reasons scroll sideways rather than being cut (as the match rows do)
        self.header().setStretchLastSection(False)
        self.header().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.itemExpanded.connect(lambda _: self._size())
        self.itemCollapsed.connect(lambda _: self._size())
        self.itemEntered.connect(
            lambda item, _col: self.ctl.hover(item.data(0, Qt.UserRole) or ()))
        self.hide()
        self._key = None   # (session, SDFG, selection) last asked for
        # a newer selection makes an older question moot, as for the listing
        self.ctl.runner.latest_wins.add("refusals")
        for signal in (controller.selectionChanged, controller.changed, controller.opened):
            signal.connect(self.request)

    def request(self) -> None:
        """Ask why the selection's other transformations refuse it (in the runner)."""
        ws, nodes = self.ctl.ws, tuple(self.ctl.selection)
        key = (id(ws), id(ws.sdfg) if ws is not None else None, nodes)
        if key == self._key:
            return   # a focus change within the same selection
        self._key = key
        if ws is None or not nodes:
            self.fill([])
            return
        lock = self.ctl.lock

        def work(job):
            from workbench.session.refusals import refusals
            with lock:
                return refusals(ws, nodes)

        def done(found):
            if self._key == key:   # else a newer question is on its way
                self.fill(found)
        self.ctl.runner.submit("refusals", "Explaining what is not offered", work,
                               on_done=done, on_error=self._failed)

    def _failed(self, error) -> None:
        self.fill([])
        self.ctl.status.emit(f"Could not say why transformations refuse the selection: {error}")

    def fill(self, found) -> None:
        """One folded group of "Transformation: reason" rows (hidden when empty)."""
        was_open = self.topLevelItemCount() and self.topLevelItem(0).isExpanded()
        self.clear()
        if not found:
            self.hide()
            return
        several = len({r.node for r in found}) > 1
        group = QTreeWidgetItem([f"{NOT_OFFERED}  ({len(found)})"])
        group.setToolTip(0, "Transformations that offer no match for the selected nodes, "
                            "and why each refused them")
        bold = QFont(self.font())
        bold.setBold(True)
        group.setFont(0, bold)
        for r in found:
            name = r.node.rsplit(">", 1)[-1].split(":", 2)[-1].rsplit("#", 1)[0]
            where = f"  [{name}]" if several else ""
            item = QTreeWidgetItem([f"{r.transformation}: {r.reason}{where}"])
            item.setToolTip(0, f"{r.transformation} ({r.level}) on {r.node}:\n{r.reason}")
            item.setData(0, Qt.UserRole, (r.node,))
            group.addChild(item)
        self.addTopLevelItem(group)
        group.setExpanded(bool(was_open))   # folded unless the user had opened it
        self.show()
        self._size()

    def _size(self) -> None:
        """As tall as the group's header when folded, up to a third of the panel open."""
        group = self.topLevelItem(0)
        row = max(self.sizeHintForRow(0), self.fontMetrics().height() + 4)
        opened = group is not None and group.isExpanded()
        rows = 1 + (group.childCount() if opened else 0)
        bar = self.horizontalScrollBar().sizeHint().height() if opened else 0
        panel = self.parentWidget() or self
        self.setFixedHeight(min(rows * row + bar, max(row, panel.height() // 3))
                            + 2 * self.frameWidth() + 2)
