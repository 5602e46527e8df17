"""The graph panel: the SDFG canvas (``gui.graph_canvas``) with find, selection and overlays.

The panel describes the session's SDFG (``graph_model.describe``, fast, on
the UI thread), lays it out in a worker (``layout.layout``) and builds the
scene when the layout arrives. Selection goes to the controller as node
identities; matches hovered in the transformations panel come back as
identities to highlight. Overlays: edge width/colour by bytes moved, node
colour by the measured time of the last profile.
"""
import math
import time

from PyQt5.QtCore import QRectF, Qt, QTimer, pyqtSignal
from PyQt5.QtWidgets import (QCheckBox, QCompleter, QGraphicsScene, QHBoxLayout, QLabel,
                             QLineEdit, QToolButton, QVBoxLayout, QWidget)

from gui import layout as layout_mod
from gui.graph_canvas import GraphView, heat, placement_rect
from gui.graph_items import ClusterItem, EdgeItem, NodeItem, node_size
from gui.graph_model import GEdge, describe, human_bytes

SLICE_S = 0.02   # UI time per slice while a scene is built (the event loop runs between)


class GraphPanel(QWidget):
    """Toolbar (find, fit, overlays) over the canvas."""
    shown = pyqtSignal()   # a layout is on screen in full

    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.desc, self.placement = None, None
        self.expanded = set()          # identities of nested SDFGs shown open
        self.node_items, self.edge_items = {}, {}
        self._syncing = False
        self._fit_next = True
        self._generation = 0   # of the scene being built (see _show)
        self.scene = QGraphicsScene(self)
        self.view = GraphView(self)
        self.view.setScene(self.scene)
        self.view.nodeActivated.connect(self._activated)
        self.scene.selectionChanged.connect(self._selection_changed)

        self.find = QLineEdit(placeholderText="Find node (name, op type, array)…")
        self.find.setMinimumWidth(120)
        self.find.returnPressed.connect(lambda: self.find_node(self.find.text()))
        self.labels = QCheckBox("memlets")
        self.labels.setChecked(True)
        self.labels.setToolTip("Show memlet labels on edges (relayouts)")
        self.labels.toggled.connect(lambda _: self.refresh())
        self.bytes_overlay = QCheckBox("bytes moved")
        self.bytes_overlay.setChecked(True)
        self.time_overlay = QCheckBox("measured time")
        self.time_overlay.setChecked(True)
        self.bytes_overlay.toggled.connect(lambda _: self.apply_overlays())
        self.time_overlay.toggled.connect(lambda _: self.apply_overlays())
        bar = QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 2)
        bar.addWidget(self.find, 2)
        for text, tip, slot in (("Fit", "Fit the graph (F)", self.view.fit),
                                ("+", "Zoom in", lambda: self.view.zoom(1.25)),
                                ("−", "Zoom out", lambda: self.view.zoom(0.8))):
            b = QToolButton(text=text, toolTip=tip)
            b.clicked.connect(slot)
            bar.addWidget(b)
        bar.addWidget(QLabel("Overlays:"))
        for w in (self.bytes_overlay, self.time_overlay, self.labels):
            bar.addWidget(w)
        self.legend = QLabel("")
        self.legend.setStyleSheet("color: #555;")
        self.legend.setWordWrap(True)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(2)
        col.addLayout(bar)
        col.addWidget(self.view, 1)
        col.addWidget(self.legend)

        controller.opened.connect(self._opened)
        controller.changed.connect(self.refresh)
        controller.hovered.connect(self.highlight)
        controller.profiled.connect(lambda _: self.apply_overlays())
        controller.selectionChanged.connect(self._sync_selection)

    # -- building --------------------------------------------------------------
    def _opened(self):
        self.expanded.clear()
        self._fit_next = True
        self.refresh()

    def refresh(self) -> None:
        """Describe the current SDFG and lay it out in a worker."""
        ws = self.ctl.ws
        if ws is None:
            self._generation += 1
            self.scene.clear()
            return
        expanded, labels, lock = set(self.expanded), self.labels.isChecked(), self.ctl.lock

        def work(job):
            with lock:
                desc = describe(ws.sdfg, dict(ws.operator_names()), expanded)
            for n in desc.nodes.values():
                n.size = node_size(n)
            return desc, layout_mod.layout(desc, labels)
        self.legend.setText("laying out…")
        self.ctl.runner.submit("layout", "Layout", work, on_done=lambda r: self._show(*r),
                               on_error=lambda e: self.ctl._failed("Layout failed", e))

    def _show(self, desc, placement) -> None:
        """Build the scene for a new layout, a slice at a time.

        Creating thousands of items takes about a second of UI time, so the
        scene is filled in slices of ``SLICE_S`` with the event loop running
        between them; ``desc`` is set once the scene is complete, and a newer
        layout stops an unfinished one.
        """
        self._generation += 1
        self._syncing = True
        self.scene.clear()
        self.desc, self.placement = None, placement
        self.node_items, self.edge_items = {}, {}
        self._continue_show(self._generation, desc, placement,
                            self._add_items(desc, placement))

    def _continue_show(self, generation, desc, placement, items) -> None:
        if generation != self._generation:
            return   # a newer layout (or session) took over
        end = time.perf_counter() + SLICE_S
        for _ in items:
            if time.perf_counter() > end:
                QTimer.singleShot(0, lambda: self._continue_show(generation, desc, placement,
                                                                 items))
                return
        self._shown(desc, placement)

    def _add_items(self, desc, placement):
        """Add the scene's items, yielding after each one.

        The scene rect and the depth of its BSP index are fixed first: when
        either changes, Qt rebuilds the index over every item, calling each
        one's Python ``boundingRect`` in one go on the UI thread.
        """
        count = len(placement.nodes) + len(placement.edges) + len(placement.clusters)
        self.scene.setBspTreeDepth(max(5, int(math.log2(max(count, 2)))))
        self.scene.setSceneRect(placement_rect(desc, placement).adjusted(-40, -40, 40, 40))
        for key, rect in placement.clusters.items():
            if key in desc.clusters:
                self.scene.addItem(ClusterItem(desc.clusters[key], rect))
                yield
        for key, center in placement.nodes.items():
            item = NodeItem(desc.nodes[key], center)
            self.node_items[key] = item
            self.scene.addItem(item)
            yield
        for a, b, label in desc.state_edges:   # interstate edges, frame to frame
            if a in placement.clusters and b in placement.clusters:
                (ax, ay, aw, ah), (bx, by, bw, _) = placement.clusters[a], placement.clusters[b]
                start, end = (ax + aw / 2, ay + ah), (bx + bw / 2, by)
                mid = ((start[0] + end[0]) / 2 + 6, (start[1] + end[1]) / 2)
                self.scene.addItem(EdgeItem(GEdge(f"{a}->{b}", a, b, label), [start, end], False,
                                            mid))
                yield
        show_labels = self.labels.isChecked()
        for e in desc.edges:
            if not e.invisible and e.key in placement.edges:
                item = EdgeItem(e, *placement.edges[e.key])
                item.show_label = show_labels
                self.edge_items[e.key] = item
                self.scene.addItem(item)
                yield
        yield from self._overlay_steps()

    def _shown(self, desc, placement) -> None:
        self.desc, self.placement = desc, placement
        self._syncing = False
        self._reselect()
        self.update_completer()
        if self._fit_next:
            self.view.fit_readable()
            self._fit_next = False
        self.shown.emit()

    # -- overlays --------------------------------------------------------------
    def apply_overlays(self) -> None:
        for _ in self._overlay_steps():
            pass

    def _overlay_steps(self):
        """Style every item for the overlays, yielding after each (see ``_show``)."""
        notes = [f"{len(self.node_items)} nodes, {len(self.edge_items)} edges"
                 + (f", layout: {self.placement.method}" if self.placement else "")]
        sizes = [i.gedge.bytes for i in self.edge_items.values() if i.gedge.bytes]
        top = max(sizes, default=0)
        for item in self.edge_items.values():
            b = item.gedge.bytes
            if self.bytes_overlay.isChecked() and b and top:
                f = math.log1p(b) / math.log1p(top)
                item.set_style(0.8 + 5.0 * f ** 3, heat(f ** 3, "#9a9a9a", "#c0392b"))
            else:
                item.set_style(1.2, "#555555")
            yield
        if self.bytes_overlay.isChecked() and top:
            notes.append(f"edge width/colour: bytes moved (largest {human_bytes(top)})")
        prof = self.ctl.last_profile
        times = dict(prof.per_operator) if prof else {}
        hottest = max(times.values(), default=0)
        for item in self.node_items.values():
            ms = times.get(item.gnode.operator) if item.gnode.operator else None
            if self.time_overlay.isChecked() and ms is not None and hottest > 0:
                item.set_fill(heat(ms / hottest))
                item.setToolTip(item.tooltip(f"measured {ms:.3f} ms (profile of step {prof.step})"))
            else:
                item.set_fill(None)
            yield
        if self.time_overlay.isChecked() and hottest:
            notes.append(f"node colour: time of its operator, step {prof.step} profile "
                         f"(hottest {hottest:.2f} ms)")
        self.legend.setText("   ·   ".join(notes))

    # -- selection, highlight, find ---------------------------------------------
    def _selection_changed(self):
        if self._syncing:
            return
        selected = self.scene.selectedItems()
        idents = [i.gnode.ident for i in selected if isinstance(i, NodeItem)]
        focus = None
        if selected:
            focus = selected[-1].gnode if isinstance(selected[-1], NodeItem) else selected[-1].gedge
        self.ctl.set_selection(idents, focus)

    def _reselect(self):
        """After a relayout: keep the selected identities that still exist."""
        kept = [i for i in self.ctl.selection if i in self.desc.by_ident]
        ident = getattr(self.ctl.focus, "ident", None)
        if ident not in self.desc.by_ident:
            ident = kept[-1] if kept else None
        focus = self.desc.nodes[self.desc.by_ident[ident]] if ident is not None else None
        self.ctl.set_selection(kept, focus)

    def _sync_selection(self):
        """Show the controller's selection (after a relayout or a selection elsewhere)."""
        if self.desc is None:
            return
        wanted = set(self.ctl.selection)
        self._syncing = True
        for item in self.node_items.values():
            item.setSelected(item.gnode.ident in wanted)
        focus = self.ctl.focus
        if focus is not None and not hasattr(focus, "ident"):
            for item in self.edge_items.values():
                item.setSelected(item.gedge is focus)
        self._syncing = False

    def select_idents(self, idents, center: bool = True) -> None:
        items = [self.node_items[self.desc.by_ident[i]] for i in idents
                 if self.desc and i in self.desc.by_ident]
        self.scene.clearSelection()
        for item in items:
            item.setSelected(True)
        if items and center:
            self.view.centerOn(items[0])

    def find_node(self, text: str) -> bool:
        if not text.strip() or self.desc is None:
            return False
        keys = self.desc.find(text)
        if not keys:
            self.ctl.status.emit(f"no node matches '{text}'")
            return False
        self.select_idents([self.desc.nodes[keys[0]].ident])
        self.view.setFocus()
        if len(keys) > 1:
            self.ctl.status.emit(f"{len(keys)} nodes match '{text}'; showing the first")
        return True

    def update_completer(self):
        if self.desc is not None:
            words = sorted({n.subtitle if n.kind == "onnx" else n.title
                            for n in self.desc.nodes.values()})
            completer = QCompleter(words, self)
            completer.setCaseSensitivity(Qt.CaseInsensitive)
            completer.setFilterMode(Qt.MatchContains)
            self.find.setCompleter(completer)

    def highlight(self, idents) -> None:
        wanted = set(idents)
        keys = {self.desc.by_ident[i] for i in wanted if self.desc and i in self.desc.by_ident}
        for key, item in self.node_items.items():
            item.set_highlighted(key in keys)
        for item in self.edge_items.values():
            item.highlighted = item.gedge.src in keys and item.gedge.dst in keys
            item.update()
        if keys:
            rect = QRectF()
            for k in keys & set(self.node_items):
                rect = rect.united(self.node_items[k].sceneBoundingRect())
            if not self.view.mapToScene(self.view.viewport().rect()).boundingRect().contains(rect):
                self.view.centerOn(rect.center())

    def _activated(self, item):
        g = item.gnode
        if g.kind == "nsdfg":
            self.expanded.symmetric_difference_update({g.ident})
            self.refresh()
