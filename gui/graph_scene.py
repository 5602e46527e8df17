"""How the graph panel fills its scene: fold and lay out in a worker, add items in slices.

A mixin of ``gui.graph_view.GraphPanel`` (it uses the panel's scene, view,
toolbar boxes and controller). The description, folding and layout run in
the runner's ``layout`` lane because on a large model they take seconds of
Python; only the items are made on the UI thread, in slices of ``SLICE_S``
so the window keeps answering while thousands of them are added. The
overlays (edge width and colour by bytes moved, node colour by measured
time) are styled in the same slices.
"""
import math
import time

from PyQt5.QtCore import QRectF, QTimer
from PyQt5.QtGui import QFontMetricsF

from gui import layout as layout_mod
from gui import scope_groups
from gui.graph_canvas import heat, placement_rect
from gui.graph_items import ClusterItem, EdgeItem, NodeItem, node_size, small_font
from gui.graph_model import GEdge, describe, human_bytes
from workbench.analysis.sizes import at_sizes

SLICE_S = 0.02   # UI time per slice while a scene is built (the event loop runs between)


class GraphScene:
    """``refresh`` and the overlays of ``gui.graph_view.GraphPanel``."""

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
            if full is None:   # bytes at the sizes a symbolic program's figures are taken at
                with lock, at_sizes(ws.symbols):
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
