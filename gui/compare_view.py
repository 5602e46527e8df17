"""Before and after, side by side: two points of the history in two synced graph panes.

The window compares any two history points (default: the import against
the current step). A worker reads both SDFGs from the history, diffs them
(``gui.graph_diff``), folds each side by name scope with the groups that
hold a change left open (``gui.scope_groups``) and lays both out; the panes
then draw with the graph panel's own canvas and items. Nodes the second
point added are green, removed ones red, changed ones amber. Each side says
its bytes moved (the second its delta), and each change its operator's
byte and time delta; time deltas need a profile of both points. Scrolling
or zooming one pane moves the other to the same place: the node both show
nearest the centre of the one moved is put at the same spot in the other.
"""
import math

from PyQt5 import sip
from PyQt5.QtCore import Qt, pyqtSignal
from PyQt5.QtGui import QBrush, QColor
from PyQt5.QtWidgets import (QComboBox, QDialog, QGraphicsScene, QHBoxLayout, QHeaderView, QLabel,
                             QSplitter, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from gui import layout as layout_mod
from gui import scope_groups
from gui.graph_canvas import GraphView, placement_rect
from gui.graph_diff import ADDED, CHANGED, REMOVED, compare_steps
from gui.graph_items import ClusterItem, EdgeItem, NodeItem, node_size
from gui.graph_model import GEdge, human_bytes

COLOURS = {ADDED: "#9fd89a", REMOVED: "#f3a3a3", CHANGED: "#fbd17e"}
WHAT = {ADDED: "added by the second point", REMOVED: "removed (only the first point has it)",
        CHANGED: "changed: same name, other op type, implementation, attributes or connections"}


def signed_bytes(n) -> str:
    return ("+" if n > 0 else "") + human_bytes(n) if n else "0 B"


def signed_ms(ms) -> str:
    return "" if ms is None else f"{'+' if ms > 0 else ''}{ms:.3f} ms"


def laid_out(desc, changed_idents, labels: bool = False):
    """Fold ``desc`` by name scope as the graph panel would, but open every group that
    holds a change, then lay it out (in a worker)."""
    scopes = scope_groups.node_scopes(desc)
    groups = scope_groups.build_groups(desc, scopes)
    collapsed = scope_groups.auto_collapsed(desc, scopes, groups)
    for key, n in desc.nodes.items():
        if n.ident in changed_idents:
            while (o := scope_groups.owner(scopes[key], groups, collapsed)) is not None:
                collapsed = scope_groups.expand(groups, collapsed, o)
    shown = scope_groups.fold(desc, scopes, groups, collapsed) if collapsed else desc
    for n in shown.nodes.values():
        n.size = node_size(n)
    return shown, layout_mod.layout(shown, labels)


class SyncedView(GraphView):
    """The graph canvas, saying when what it shows moved (scroll, zoom, fit)."""
    moved = pyqtSignal()

    def __init__(self, parent=None):
        super().__init__(parent)
        # not rangeChanged: a scroll bar showing up resizes the viewport, and the other
        # pane would follow that too, back and forth
        for bar in (self.horizontalScrollBar(), self.verticalScrollBar()):
            bar.valueChanged.connect(self._scrolled)

    def _scrolled(self, _value) -> None:
        self.moved.emit()

    def __dtor__(self) -> None:
        # sip calls this as the C++ view begins to be destroyed. Qt's teardown still moves
        # the scroll bars, and a slot emitting on the half-destroyed view then crashed the
        # process (a deleteLater'd window, in whatever event loop ran next).
        for bar in (self.horizontalScrollBar(), self.verticalScrollBar()):
            try:
                bar.valueChanged.disconnect(self._scrolled)
            except (TypeError, RuntimeError):
                pass

    def zoom(self, factor: float) -> None:
        super().zoom(factor)
        self.moved.emit()

    def fit_all(self) -> None:
        super().fit_all()
        self.moved.emit()

    def fit_rect(self, rect, max_scale: float = 1.0) -> None:
        super().fit_rect(rect, max_scale)
        self.moved.emit()

    def center(self):
        return self.mapToScene(self.viewport().rect().center())


class ComparePane(QWidget):
    """One side: a heading (which step, bytes moved, time) over the canvas."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.heading = QLabel("")
        self.heading.setWordWrap(True)
        self.heading.setTextFormat(Qt.RichText)
        self.scene = QGraphicsScene(self)
        self.view = SyncedView(self)
        self.view.setScene(self.scene)
        self.node_items = {}   # identity -> NodeItem (boxes by their scope identity)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.heading)
        col.addWidget(self.view, 1)

    def show_graph(self, desc, placement, changes: dict) -> None:
        self.scene.clear()
        self.node_items = {}
        self.scene.setSceneRect(placement_rect(desc, placement).adjusted(-40, -40, 40, 40))
        for key, rect in placement.clusters.items():
            if key in desc.clusters:
                self.scene.addItem(ClusterItem(desc.clusters[key], rect))
        for key, center in placement.nodes.items():
            g = desc.nodes[key]
            item = NodeItem(g, center)
            change = changes.get(g.ident)
            if change is not None:
                item.set_fill(COLOURS[change.status])
                item.setToolTip(item.tooltip(change_text(change)))
            self.node_items[g.ident] = item
            self.scene.addItem(item)
        for a, b, label in desc.state_edges:
            if a in placement.clusters and b in placement.clusters:
                (ax, ay, aw, ah), (bx, by, bw, _) = placement.clusters[a], placement.clusters[b]
                self.scene.addItem(EdgeItem(GEdge(f"{a}->{b}", a, b, label),
                                            [(ax + aw / 2, ay + ah), (bx + bw / 2, by)], False,
                                            None))
        for e in desc.edges:
            if not e.invisible and e.key in placement.edges:
                item = EdgeItem(e, *placement.edges[e.key])
                item.show_label = False
                self.scene.addItem(item)

    def positions(self) -> dict:
        return {i: item.pos() for i, item in self.node_items.items()}


def change_text(c) -> str:
    text = f"{c.status}" + (f" ({', '.join(c.reasons)})" if c.reasons else "")
    if c.operator:
        text += (f"\noperator {c.operator}: {human_bytes(c.bytes_before)} → "
                 f"{human_bytes(c.bytes_after)} moved ({signed_bytes(c.byte_delta)})")
        if c.ms_delta is not None:
            text += f"; time {signed_ms(c.ms_delta)}"
    return text


class CompareWindow(QDialog):
    """Two points of the history side by side (non-modal: the window goes on)."""
    shown = pyqtSignal()   # a comparison is on screen

    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.setWindowTitle("Compare steps")
        self.resize(1500, 900)
        self.points = None     # (a, b) on screen
        self._steps = None     # their history steps (a step is found by identity)
        self.diff = None
        self.before, self.after = ComparePane(self), ComparePane(self)
        self._following = False
        self._anchor = None    # the node both panes show that they are aligned on
        self.before.view.moved.connect(self._before_moved)
        self.after.view.moved.connect(self._after_moved)
        self.first, self.second = QComboBox(), QComboBox()
        for box in (self.first, self.second):
            box.setSizeAdjustPolicy(QComboBox.AdjustToContents)
            box.activated.connect(lambda _: self.compare(self.first.currentIndex(),
                                                         self.second.currentIndex()))
        legend = "   ".join(f'<span style="background:{COLOURS[s]}">&nbsp;&nbsp;&nbsp;&nbsp;'
                           f'</span> {s}' for s in (ADDED, REMOVED, CHANGED))
        self.legend = QLabel(legend + "   (uncoloured: the same at both points)")
        self.legend.setToolTip("\n".join(f"{s}: {WHAT[s]}" for s in (ADDED, REMOVED, CHANGED)))
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.changes = QTreeWidget()
        self.changes.setHeaderLabels(["Change", "Node", "Bytes Δ", "Time Δ", "Why"])
        self.changes.setRootIsDecorated(False)
        self.changes.header().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.changes.itemClicked.connect(lambda item, _c: self.go_to(item.data(0, Qt.UserRole)))
        top = QHBoxLayout()
        top.addWidget(QLabel("Compare"))
        top.addWidget(self.first)
        top.addWidget(QLabel("with"))
        top.addWidget(self.second)
        top.addStretch(1)
        top.addWidget(self.legend)
        panes = QSplitter(Qt.Horizontal)
        panes.addWidget(self.before)
        panes.addWidget(self.after)
        body = QSplitter(Qt.Vertical)
        body.addWidget(panes)
        body.addWidget(self.changes)
        body.setSizes([700, 200])
        col = QVBoxLayout(self)
        col.addLayout(top)
        col.addWidget(self.summary)
        col.addWidget(body, 1)
        controller.opened.connect(self._opened)
        controller.changed.connect(self._history_changed)
        controller.sizesChanged.connect(self._sizes_changed)

    # -- what to compare ------------------------------------------------------------
    def refresh_points(self) -> None:
        """The history's points in both lists (after a step or a new session)."""
        ws = self.ctl.ws
        names = ["0  import"] + [f"{i}  {e['transformation']}: {e.get('description', '')}"[:90]
                                 for i, e in enumerate(ws.steps if ws else (), start=1)]
        for box in (self.first, self.second):
            keep = box.currentIndex()
            box.clear()
            box.addItems(names if ws else [])
            if 0 <= keep < len(names):
                box.setCurrentIndex(keep)

    def _opened(self) -> None:
        self._clear("")
        self.refresh_points()

    def _clear(self, why: str) -> None:
        self.points, self.diff, self._steps = None, None, None
        for pane in (self.before, self.after):
            pane.scene.clear()
            pane.node_items = {}
            pane.heading.setText("")
        self.summary.setText(why)
        self.changes.clear()

    def _sizes_changed(self) -> None:
        """A symbolic program's figures at other sizes: the comparison shown, again."""
        if self.points is not None:
            self.compare(*self.points)

    def _history_changed(self) -> None:
        """A step, undo or redo: the lists follow; a comparison whose steps were dropped
        (a new step after an undo replaces them) is taken off the screen."""
        self.refresh_points()
        ws = self.ctl.ws
        if self.points is not None and ws is not None and any(
                ws.timeline.index(step) != p for step, p in zip(self._steps, self.points)):
            a, b = self.points
            self._clear(f"The history changed: step {a} or {b} as compared is gone. Pick two "
                        f"points above.")

    def compare(self, a: int, b: int) -> None:
        """Compare history points ``a`` and ``b`` (0: the import) in a worker."""
        ws = self.ctl.ws
        if ws is None:
            return
        self.refresh_points()
        self.first.setCurrentIndex(a)
        self.second.setCurrentIndex(b)
        self.summary.setText(f"comparing step {a} with step {b}…")
        lock = self.ctl.lock

        def work(job):
            with lock:
                desc_a, desc_b, diff = compare_steps(ws, a, b)
                steps = (ws.timeline[a], ws.timeline[b])
            changed = set(diff.changes)
            return steps, diff, laid_out(desc_a, changed), laid_out(desc_b, changed)

        def done(result):
            if self.ctl.ws is ws:   # else another session was opened meanwhile
                self._show(a, b, *result)
        self.ctl.runner.submit("compare", f"Comparing step {a} with step {b}", work,
                               on_done=done,
                               on_error=lambda e: self.ctl._failed("Compare failed", e))

    def _show(self, a, b, steps, diff, side_a, side_b) -> None:
        self.points, self.diff, self._steps = (a, b), diff, steps
        self.before.show_graph(*side_a, {c.ident: c for c in diff.changes.values()
                                         if c.status != ADDED})
        self.after.show_graph(*side_b, {c.ident: c for c in diff.changes.values()
                                        if c.status != REMOVED})
        self.before.heading.setText(self._heading(a, diff.bytes_before, diff.ms_before))
        self.after.heading.setText(self._heading(b, diff.bytes_after, diff.ms_after,
                                                 diff.byte_delta, diff.ms_delta))
        counts = diff.counts()
        timing = (f"time {diff.ms_before:.3f} → {diff.ms_after:.3f} ms "
                  f"({signed_ms(diff.ms_delta)})" if diff.timed else
                  "time deltas: none (" + " and ".join(
                      f"step {p}" for p, ms in ((a, diff.ms_before), (b, diff.ms_after))
                      if ms is None) + " not profiled)")
        self.summary.setText(
            f"Step {b} against step {a}: {counts[ADDED]} node{'s' * (counts[ADDED] != 1)} "
            f"added, {counts[REMOVED]} removed, {counts[CHANGED]} changed; bytes moved {human_bytes(diff.bytes_before)} → "
            f"{human_bytes(diff.bytes_after)} ({signed_bytes(diff.byte_delta)}); {timing}")
        self._list(diff)
        for pane in (self.before, self.after):
            pane.view.fit_readable()
        self.focus_first_change()
        self.shown.emit()

    def _heading(self, position, moved, ms, delta=None, ms_delta=None) -> str:
        ws = self.ctl.ws
        entry = ws.steps[position - 1] if position else None
        name = "import" if entry is None else entry["transformation"]
        text = f"<b>Step {position}</b> ({name}): {human_bytes(moved)} moved"
        if delta is not None:
            text += f" (<b>{signed_bytes(delta)}</b>)"
        if ms is not None:
            text += f"; profile {ms:.3f} ms" + (f" ({signed_ms(ms_delta)})"
                                                 if ms_delta is not None else "")
        else:
            text += "; not profiled"
        return text

    def _list(self, diff) -> None:
        self.changes.clear()
        order = {ADDED: 0, REMOVED: 1, CHANGED: 2}
        for c in sorted(diff.changes.values(), key=lambda c: (order[c.status], c.label)):
            item = QTreeWidgetItem([c.status, c.label,
                                    signed_bytes(c.byte_delta) if c.operator else "",
                                    signed_ms(c.ms_delta), ", ".join(c.reasons)])
            item.setData(0, Qt.UserRole, c.ident)
            item.setBackground(0, QBrush(QColor(COLOURS[c.status])))
            item.setToolTip(1, change_text(c))
            self.changes.addTopLevelItem(item)

    # -- moving together ---------------------------------------------------------------
    def _before_moved(self):
        self.follow(self.before, self.after)

    def _after_moved(self):
        self.follow(self.after, self.before)

    def follow(self, leader: ComparePane, other: ComparePane) -> None:
        """Show in ``other`` what ``leader`` shows: same scale, and the node both panes
        have nearest the leader's centre at the same place in the view."""
        if self._following or not leader.node_items or not other.node_items or \
                sip.isdeleted(leader.view) or sip.isdeleted(other.view):   # window closing
            return
        self._following = True
        try:
            other.view.setTransform(leader.view.transform())
            c = leader.view.center()
            mine, theirs = leader.positions(), other.positions()
            shared = [i for i in mine if i in theirs]
            visible = leader.view.mapToScene(leader.view.viewport().rect()).boundingRect()
            # keep the last anchor while it is in view: a pane that moves again when it
            # follows (scroll bars settle late) then maps back to the same place
            anchor = self._anchor if self._anchor in shared and \
                visible.contains(mine[self._anchor]) else None
            if anchor is None and shared:
                anchor = min(shared, key=lambda i: math.hypot(mine[i].x() - c.x(),
                                                              mine[i].y() - c.y()))
            self._anchor = anchor
            if anchor is not None:
                target = theirs[anchor] + (c - mine[anchor])
                if (other.view.center() - target).manhattanLength() * \
                        other.view.transform().m11() > 2:   # not there already (in pixels)
                    other.view.centerOn(target)
            else:   # nothing in common: the same fraction of each graph
                ra, rb = leader.scene.sceneRect(), other.scene.sceneRect()
                fx = (c.x() - ra.left()) / max(ra.width(), 1)
                fy = (c.y() - ra.top()) / max(ra.height(), 1)
                other.view.centerOn(rb.left() + fx * rb.width(), rb.top() + fy * rb.height())
        finally:
            self._following = False

    def go_to(self, ident) -> None:
        """Centre the panes on the change ``ident`` (the side that has it leads)."""
        for pane in (self.after, self.before):
            item = pane.node_items.get(ident)
            if item is not None:
                pane.scene.clearSelection()
                item.setSelected(True)
                pane.view.centerOn(item)
                self.follow(pane, self.before if pane is self.after else self.after)
                return

    def focus_first_change(self) -> None:
        if self.diff is not None and self.diff.changes:
            first = sorted(self.diff.changes.values(),
                           key=lambda c: (c.status != ADDED, c.label))[0]
            self.go_to(first.ident)
