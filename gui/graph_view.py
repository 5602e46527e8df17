"""The graph panel: the SDFG canvas (``gui.graph_canvas``) with find, selection and overlays.

The panel describes the session's SDFG (``graph_model.describe``), folds it
by ONNX name scope (``gui.scope_groups``: a large model opens with each
layer one box) and lays it out, all in a worker, then builds the scene in
slices when the layout arrives (both in ``gui.graph_scene``). Opening or
folding a group refolds the description it already has and lays out again
in the worker. Selection
goes to the controller as node identities (a box stands for its members);
matches hovered in the transformations panel come back as identities to
highlight. Find (``gui.find_bar``) searches every node, folded or not, and
opens the groups around a hit. Overlays: edge width/colour by bytes moved,
node colour by the measured time of the last profile (a box: its members'
summed time). A symbolic program's bytes are taken at the sizes of the sizes box
beside them (``gui.sizes_box``); changing one lays the graph out again.
"""
from PyQt5.QtCore import QRectF, Qt, pyqtSignal
from PyQt5.QtWidgets import (QCheckBox, QCompleter, QFileDialog, QGraphicsScene, QHBoxLayout,
                             QLabel, QMenu, QToolButton, QVBoxLayout, QWidget)

from gui import scope_groups
from gui.find_bar import FindBar
from gui.graph_canvas import READABLE_SCALE, GraphView, export_png, export_svg
from gui.graph_items import ClusterItem, NodeItem
from gui.graph_scene import GraphScene
from gui.sizes_box import SizesBox


class GraphPanel(GraphScene, QWidget):
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
        self.sizes = SizesBox(controller)   # shown for a symbolic program only
        bar.addWidget(self.sizes)
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
        controller.sizesChanged.connect(self.refresh)   # the edges' bytes at the new sizes
        controller.hovered.connect(self.highlight)
        controller.profiled.connect(lambda _: self.apply_overlays())
        controller.selectionChanged.connect(self._sync_selection)

    # -- building (refresh and the overlays: gui.graph_scene) --------------------
    def _opened(self):
        self.expanded.clear()
        self.collapsed, self.full, self._pending = None, None, None
        self._fit_next = True
        self.refresh()

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
