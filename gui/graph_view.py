"""The graph panel: the SDFG canvas (``gui.graph_canvas``) with find, selection and overlays.

The panel describes the session's SDFG (``graph_model.describe``), folds it
by ONNX name scope (``gui.scope_groups``: a large model opens with each
layer one box) and lays it out, all in a worker, then builds the scene in
slices when the layout arrives. Opening or folding a group refolds the
description it already has and lays out again in the worker. Selection
goes to the controller as node identities (a box stands for its members);
matches hovered in the transformations panel come back as identities to
highlight. Find (``gui.find_bar``) searches every node, folded or not, and
opens the groups around a hit. Overlays: edge width/colour by bytes moved,
node colour by the measured time of the last profile (a box: its members'
summed time).
"""
import math
import time

from PyQt5.QtCore import QRectF, Qt, QTimer, pyqtSignal
from PyQt5.QtGui import QFontMetricsF
from PyQt5.QtWidgets import (QCheckBox, QCompleter, QFileDialog, QGraphicsScene, QHBoxLayout,
                             QLabel, QMenu, QToolButton, QVBoxLayout, QWidget)

from gui import layout as layout_mod
from gui import scope_groups
from gui.find_bar import FindBar
from gui.graph_canvas import READABLE_SCALE, GraphView, export_png, export_svg, heat, \
    placement_rect
from gui.graph_items import ClusterItem, EdgeItem, NodeItem, node_size, small_font
from gui.graph_model import GEdge, describe, human_bytes

SLICE_S = 0.02   # UI time per slice while a scene is built (the event loop runs between)


class GraphPanel(QWidget):
    """Toolbar (find, fit, overlays) over the canvas."""
    shown = pyqtSignal()   # a layout is on screen in full

    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.desc, self.placement = None, None
        self.full = None               # (desc, scopes, groups): every node, before folding
        self.collapsed = None          # scope paths shown as boxes (None: pick on open)
        self._pending = None           # identity to select once the next layout is shown
        self._describing = False       # a layout that describes the SDFG anew is under way
        self.expanded = set()          # identities of nested SDFGs shown open
        self.node_items, self.edge_items = {}, {}
        self._syncing = False
        self._fit_next = True
        self._generation = 0   # of the scene being built (see _show)
        self.scene = QGraphicsScene(self)
        self.view = GraphView(self)
        self.view.setScene(self.scene)
        self.view.nodeActivated.connect(self._activated)
        self.view.clusterActivated.connect(self._frame_activated)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.scene.selectionChanged.connect(self._selection_changed)

        self.find_bar = FindBar(self)
        self.find = self.find_bar.edit
        self.find_bar.searched.connect(self.find_node)
        self.find_bar.go.connect(self.go_to)
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
        bar.addWidget(self.find_bar, 2)
        for text, tip, slot in (("Fit", "Fit the selection, else the graph at a readable "
                                        "scale (F)", self.view.fit),
                                ("Fit All", "The whole graph, however small", self.view.fit_all),
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
        col.addWidget(self.find_bar.results)
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
        self.collapsed, self.full, self._pending = None, None, None
        self._fit_next = True
        self.refresh()

    def refresh(self, regroup: bool = False) -> None:
        """Describe the current SDFG (``regroup``: reuse the last description), fold
        it and lay it out in a worker."""
        ws = self.ctl.ws
        if ws is None:
            self._generation += 1
            self.scene.clear()
            self.view.minimap.set_layout(None, None, QRectF())
            return
        expanded, labels, lock = set(self.expanded), self.labels.isChecked(), self.ctl.lock
        collapsed = None if self.collapsed is None else set(self.collapsed)
        # a newer layout replaces an unfinished one: refolding an old description
        # must not drop a pending describe of a changed SDFG
        regroup = regroup and self.full is not None and not self._describing
        full = self.full if regroup else None
        self._describing = not regroup

        def work(job):
            if full is None:
                with lock:
                    desc = describe(ws.sdfg, dict(ws.operator_names()), expanded)
                scopes = scope_groups.node_scopes(desc)
                groups = scope_groups.build_groups(desc, scopes)
            else:
                desc, scopes, groups = full
            fold = (scope_groups.auto_collapsed(desc, scopes, groups) if collapsed is None
                    else collapsed & set(groups))
            shown = scope_groups.fold(desc, scopes, groups, fold)
            for n in shown.nodes.values():
                n.size = node_size(n)
            placement = layout_mod.layout(shown, labels)
            if labels and placement.labels:
                fm = QFontMetricsF(small_font())
                layout_mod.drop_overlapping_labels(
                    shown, placement, lambda t: (fm.horizontalAdvance(t), fm.height()))
            return (desc, scopes, groups), fold, shown, placement
        self.legend.setText("laying out…")
        self.ctl.runner.submit("layout", "Layout", work, on_done=lambda r: self._show(*r),
                               on_error=lambda e: self.ctl._failed("Layout failed", e))

    def _show(self, full, collapsed, desc, placement) -> None:
        self.full, self.collapsed, self._describing = full, collapsed, False
        self._show_scene(desc, placement)

    def _show_scene(self, desc, placement) -> None:
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
        show_labels = self.labels.isChecked() and placement.labels
        for e in desc.edges:
            if not e.invisible and e.key in placement.edges:
                item = EdgeItem(e, *placement.edges[e.key])
                item.show_label = show_labels and e.key not in placement.hidden_labels
                self.edge_items[e.key] = item
                self.scene.addItem(item)
                yield
        yield from self._overlay_steps()

    def _shown(self, desc, placement) -> None:
        self.desc, self.placement = desc, placement
        self._syncing = False
        self._reselect()
        self.update_completer()
        self._label_box(desc, placement)
        self.view.minimap.set_layout(desc, placement, self.scene.sceneRect())
        if self._fit_next:
            self.view.fit_readable()
            self._fit_next = False
        pending, self._pending = self._pending, None
        if pending is not None:
            self.go_to(pending)
        self.shown.emit()

    def _label_box(self, desc, placement) -> None:
        """Say on the memlets box what is drawn: labels off for a large graph, or how
        many were left out so that none overlaps."""
        labelled = sum(1 for e in desc.edges if e.label and not e.invisible)
        box = self.labels
        box.blockSignals(True)
        if box.isChecked() and not placement.labels:
            box.setEnabled(False)
            box.setText(f"memlets (off above {layout_mod.LARGE_GRAPH:,} nodes)")
            box.setToolTip(f"{len(desc.nodes):,} nodes are shown: memlet labels are not laid "
                           f"out above {layout_mod.LARGE_GRAPH:,}. Fold groups (right-click) to "
                           f"see them; hover an edge for its memlet.")
        else:
            box.setEnabled(True)
            hidden = len(placement.hidden_labels) if box.isChecked() else 0
            box.setText(f"memlets ({labelled - hidden}/{labelled})" if hidden else "memlets")
            box.setToolTip("Show memlet labels on edges (relayouts)" + (
                f"; {hidden} that would overlap another label or a node are left out (hover "
                f"an edge for its memlet)" if hidden else ""))
        box.blockSignals(False)

    # -- overlays --------------------------------------------------------------
    def apply_overlays(self) -> None:
        for _ in self._overlay_steps():
            pass

    def _overlay_steps(self):
        """Style every item for the overlays, yielding after each (see ``_show``)."""
        total = len(self.full[0].nodes) if self.full else len(self.node_items)
        shown = (f"{total} nodes, {len(self.node_items)} shown (folded by name scope)"
                 if total != len(self.node_items) else f"{total} nodes")
        notes = [f"{shown}, {len(self.edge_items)} edges"
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
        group_ms = {k: self._group_ms(i.gnode, times) for k, i in self.node_items.items()
                    if i.gnode.kind == "group"}
        hottest = max([hottest] + [ms for ms in group_ms.values() if ms is not None])
        for key, item in self.node_items.items():
            ms = times.get(item.gnode.operator) if item.gnode.operator else group_ms.get(key)
            if item.gnode.kind == "group":
                item.time_text = f"measured {ms:.3f} ms" if ms is not None else ""
            if self.time_overlay.isChecked() and ms is not None and hottest > 0:
                item.set_fill(heat(ms / hottest))
                item.setToolTip(item.tooltip(f"measured {ms:.3f} ms (profile of step {prof.step})"))
            else:
                item.set_fill(None)
            yield
        if self.time_overlay.isChecked() and hottest:
            notes.append(f"node colour: time of its operator (a box: its operators' sum), "
                         f"step {prof.step} profile (hottest {hottest:.2f} ms)")
        if any(i.gnode.kind == "group" for i in self.node_items.values()):
            notes.append("blue boxes: folded name scopes with their summed bytes and time "
                         "(double-click to open, right-click to fold to a depth)")
        self.legend.setText("   ·   ".join(notes))

    @staticmethod
    def _group_ms(gnode, times):
        """A box's measured time: the sum over its members' operators (None: none profiled)."""
        found = [times[op] for op in gnode.operators if op in times]
        return sum(found) if found else None

    # -- selection, highlight, find ---------------------------------------------
    def _selection_changed(self):
        if self._syncing:
            return
        selected = self.scene.selectedItems()
        idents = []
        for i in selected:   # a box stands for its members
            if isinstance(i, NodeItem):
                idents += list(i.gnode.members) if i.gnode.kind == "group" else [i.gnode.ident]
        focus = None
        if selected:
            focus = selected[-1].gnode if isinstance(selected[-1], NodeItem) else selected[-1].gedge
            if getattr(focus, "kind", None) == "group":
                focus = None   # no single node to show properties or code of
        self.ctl.set_selection(idents, focus)

    def _reselect(self):
        """After a relayout: keep the selected identities that still exist."""
        kept = [i for i in self.ctl.selection if i in self.desc.by_ident or i in self.desc.hidden]
        ident = getattr(self.ctl.focus, "ident", None)
        if ident not in self.desc.by_ident:
            shown = [i for i in kept if i in self.desc.by_ident]
            ident = shown[-1] if shown else None
        focus = self.desc.nodes[self.desc.by_ident[ident]] if ident is not None else None
        self.ctl.set_selection(kept, focus)

    def _sync_selection(self):
        """Show the controller's selection (after a relayout or a selection elsewhere)."""
        if self.desc is None:
            return
        wanted = set(self.ctl.selection)
        self._syncing = True
        for item in self.node_items.values():
            g = item.gnode
            item.setSelected(g.ident in wanted or (g.kind == "group" and
                                                   not wanted.isdisjoint(g.members)))
        focus = self.ctl.focus
        if focus is not None and not hasattr(focus, "ident"):
            for item in self.edge_items.values():
                item.setSelected(item.gedge is focus)
        self._syncing = False

    def _shown_key(self, ident):
        """The key of the item showing ``ident``: its node, or the box it is folded into."""
        if self.desc is None:
            return None
        return self.desc.by_ident.get(ident, self.desc.hidden.get(ident))

    def select_idents(self, idents, center: bool = True) -> None:
        keys = {self._shown_key(i) for i in idents} - {None}
        items = [self.node_items[k] for k in keys if k in self.node_items]
        self.scene.clearSelection()
        for item in items:
            item.setSelected(True)
        if items and center:
            if self.view.transform().m11() < READABLE_SCALE:
                self.view.resetTransform()
            self.view.centerOn(items[0])

    def find_node(self, text: str) -> bool:
        """List every node matching ``text`` (folded ones too) and go to the first."""
        if not text.strip() or self.full is None:
            return False
        desc = self.full[0]
        if self.find.text() != text:
            self.find.setText(text)
        keys = desc.find(text)
        if not keys:
            self.ctl.status.emit(f"no node matches '{text}'")
        elif len(keys) > 1:
            self.ctl.status.emit(f"{len(keys)} nodes match '{text}' (F3, Shift+F3: next, "
                                 f"previous)")
        hits = []
        for k in keys:   # an array's row says which scope it sits in (an operator's name does)
            n, where = desc.nodes[k], self.full[1].get(k, ())
            hits.append((n.ident, f"{n.title}  {n.subtitle}" + (
                f"   in /{'/'.join(where)}" if where and n.kind != "onnx" else "")))
        self.find_bar.set_hits(hits)
        if keys:
            self.view.setFocus()
        return bool(keys)

    def go_to(self, ident: str) -> None:
        """Select and show the node ``ident``, opening the groups it is folded into."""
        if self.desc is None or self.full is None:
            self._pending = ident
            return
        if ident in self.desc.by_ident:
            self.select_idents([ident])
            return
        desc, scopes, groups = self.full
        key = desc.by_ident.get(ident)
        if key is None:
            return
        collapsed = set(self.collapsed)
        while (o := scope_groups.owner(scopes[key], groups, collapsed)) is not None:
            collapsed = scope_groups.expand(groups, collapsed, o)
        self._pending = ident
        self.set_collapsed(collapsed)

    # -- groups ------------------------------------------------------------------
    def set_collapsed(self, collapsed) -> None:
        """Show the scope groups ``collapsed`` as boxes (and the others open): relayout."""
        self.collapsed = set(collapsed)
        self.refresh(regroup=True)

    def expand_group(self, path) -> None:
        if self.full is not None:
            self.set_collapsed(scope_groups.expand(self.full[2], self.collapsed, tuple(path)))

    def collapse_group(self, path) -> None:
        if self.full is not None:
            self.set_collapsed(scope_groups.collapse(self.full[2], self.collapsed, tuple(path)))

    def collapse_to_depth(self, level: int) -> None:
        if self.full is not None:
            self.set_collapsed(scope_groups.collapsed_to(self.full[2], level))

    def group_depth(self) -> int:
        groups = self.full[2] if self.full else {}
        return max((g.level for g in groups.values()), default=0)

    def _group_of(self, item):
        """The scope path a right-click or double-click is about (None: no group)."""
        if isinstance(item, NodeItem) and item.gnode.kind == "group":
            return item.gnode.scope
        if isinstance(item, ClusterItem) and item.gcluster.kind == "scope":
            return item.gcluster.obj
        if isinstance(item, NodeItem) and self.full is not None:
            desc, scopes, groups = self.full
            key = desc.by_ident.get(item.gnode.ident)
            path = scopes.get(key, ()) if key else ()
            inner = [path[:i] for i in range(len(path), 0, -1) if path[:i] in groups]
            return inner[0] if inner else None
        return None

    def _frame_activated(self, item):
        if item.gcluster.kind == "scope":
            self.collapse_group(item.gcluster.obj)

    def _context_menu(self, pos):
        item = self.view.itemAt(pos)
        path = self._group_of(item)
        menu = QMenu(self)
        if isinstance(item, NodeItem) and item.gnode.kind == "group":
            menu.addAction(f"Open {item.gnode.title[2:]}", lambda: self.expand_group(path))
        elif path is not None:
            menu.addAction(f"Fold /{'/'.join(path)}", lambda: self.collapse_group(path))
        depth = self.group_depth()
        if depth:
            sub = menu.addMenu("Fold All to Depth")
            for level in range(1, depth + 1):
                sub.addAction(f"{level}", lambda _=False, n=level: self.collapse_to_depth(n))
            menu.addAction("Open All Groups", lambda: self.set_collapsed(set()))
        menu.addSeparator()
        menu.addAction("Fit", self.view.fit)
        menu.addAction("Fit All", self.view.fit_all)
        menu.addSeparator()
        menu.addAction("Export Graph as SVG…", lambda: self.ask_export("svg"))
        menu.addAction("Export Graph as PNG…", lambda: self.ask_export("png"))
        self._menu = menu   # kept for tests; popup (not exec_): the event loop goes on
        menu.popup(self.view.viewport().mapToGlobal(pos))

    # -- export --------------------------------------------------------------------
    def export(self, path: str) -> None:
        """The whole graph as drawn, as SVG or PNG (by the file's suffix)."""
        if self.desc is None:
            raise ValueError("no graph is shown")
        if str(path).lower().endswith(".svg"):
            export_svg(self.scene, path, self.ctl.ws.name if self.ctl.ws else "SDFG")
        else:
            export_png(self.scene, path)
        self.ctl.status.emit(f"Exported the graph to {path}")

    def ask_export(self, kind: str = None) -> None:
        """Ask where to export the graph (``kind`` svg or png; None: either, by suffix)."""
        kinds = [kind] if kind else ["svg", "png"]
        name = (self.ctl.ws.name if self.ctl.ws else "graph") + f".{kinds[0]}"
        path, _ = QFileDialog.getSaveFileName(
            self, "Export graph", name, ";;".join(f"{k.upper()} (*.{k})" for k in kinds))
        if path:
            if not path.lower().endswith((".svg", ".png")):
                path += f".{kinds[0]}"
            try:
                self.export(path)
            except (OSError, ValueError) as e:
                self.ctl._failed("Export failed", e)

    def update_completer(self):
        if self.full is not None:   # folded nodes too: Find opens their groups
            words = sorted({n.subtitle if n.kind == "onnx" else n.title
                            for n in self.full[0].nodes.values()})
            completer = QCompleter(words, self)
            completer.setCaseSensitivity(Qt.CaseInsensitive)
            completer.setFilterMode(Qt.MatchContains)
            self.find.setCompleter(completer)

    def highlight(self, idents) -> None:
        keys = {self._shown_key(i) for i in set(idents)} - {None}
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
        if g.kind == "group":
            self.expand_group(g.scope)
        elif g.kind == "nsdfg":
            self.expanded.symmetric_difference_update({g.ident})
            self.refresh()
