"""Transformations: the matches for the selection (or the whole graph), by level.

Each row is one match with the predicted change in bytes moved (filled in
when the worker's prediction arrives, the rows on screen first, see
``Controller.request_matches``). Rows are sorted as predictions arrive:
per transformation, the largest saving first; matches that change nothing
fold under one "No change" group. A refresh fills only the tab shown (the
others when they are shown): on a ViT export it takes ~10 ms of the UI thread. Hovering or selecting a row
highlights its nodes in the graph; double-click or Apply applies it.
Text is never cut: columns are as wide as the text of the rows in view (the change in bytes
first, then the match, which scrolls sideways in a narrow dock) and the
level tabs make the panel as wide as they are.

Below the tabs, for a selection, a folded group "Not offered (N)" says why
the other transformations refuse the selected nodes (``gui.refusal_list``).
"""
import time

from PyQt5.QtCore import QEvent, Qt, QTimer
from PyQt5.QtGui import QBrush, QColor, QFont
from PyQt5.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QPushButton, QTabWidget, QTreeWidget,
                             QTreeWidgetItem, QVBoxLayout, QWidget)

from gui.graph_model import human_bytes
from gui.refusal_list import NOT_OFFERED, RefusalList  # noqa: F401 (NOT_OFFERED: its old home)

from gui.match_rows import GROUP, LEVELS, NO_CHANGE, group_key, arrange, level_of, match_items

RESORT_ROWS, RESORT_S = 1000, 3.0   # a list this long is re-sorted this often while predicting
ROW_CHUNK = 500   # rows made in one turn of the event loop (~15 ms)


class TransformPanel(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.matches_by_level = {level: [] for level in LEVELS}
        self.predicted = False
        self.collapsed = {NO_CHANGE}   # groups folded (by the user; "No change" at first)
        self._shown = {}               # level -> what its tree shows (skip equal rebuilds)
        self._rows = {}                # level -> [(group item, [match items])] as shown
        self._row_match = {}           # id(match item) -> its match
        self._groups = {}              # level -> group key -> its row, kept between refreshes
        self._items = {}               # level -> match -> (its row, what its texts show)
        self._sorted_at = {}           # level -> when its rows were last laid out in order
        self._spare = {}               # match -> (its row, texts) made ahead of a layout
        self.scope = QLabel("")
        self.scope.setWordWrap(True)
        self.tabs = QTabWidget()
        self.trees = {}
        for level in LEVELS:
            tree = QTreeWidget()
            tree.setHeaderLabels(["Transformation / match", "Δ bytes moved"])
            tree.setAlternatingRowColors(True)
            tree.setMouseTracking(True)
            tree.setIndentation(12)
            header = tree.header()
            header.setStretchLastSection(False)
            header.setSectionResizeMode(QHeaderView.ResizeToContents)
            # sized to the rows in view (again on scrolling): measuring all ~800 rows of a
            # ViT export at every refresh held the window 50-190 ms; this takes ~10 ms
            header.setResizeContentsPrecision(0)
            tree.setUniformRowHeights(True)
            header.moveSection(1, 0)   # the change in bytes first: it is what one compares
            tree.itemCollapsed.connect(lambda item: self.collapsed.add(group_key(item)))
            tree.itemExpanded.connect(lambda item: self.collapsed.discard(group_key(item)))
            tree.itemEntered.connect(self._entered)
            tree.currentItemChanged.connect(self._current_changed)
            tree.itemDoubleClicked.connect(lambda item, _col: self.apply_item(item))
            tree.viewport().installEventFilter(self)
            tree.verticalScrollBar().valueChanged.connect(self._note_on_screen)
            tree.itemExpanded.connect(self._note_on_screen)
            self.trees[level] = tree
            self.tabs.addTab(tree, level)
        # no scroll arrows and no elision: the tab bar's minimum width is all its tabs
        self.tabs.setUsesScrollButtons(False)
        self.tabs.setElideMode(Qt.ElideNone)
        self.tabs.currentChanged.connect(lambda _: self._current_changed(self.current_item()))
        self.tabs.currentChanged.connect(self._tab_shown)
        self.about = QLabel("Select nodes in the graph to see the matches that touch them.")
        self.about.setWordWrap(True)
        self.about.setStyleSheet("color: #333;")
        self.apply_button = QPushButton("Apply")
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(lambda: self.apply_item(self.current_item()))
        self.all_button = QPushButton("Whole graph")
        self.all_button.setToolTip("Clear the selection and list every match")
        self.all_button.clicked.connect(lambda: self.ctl.set_selection(()))
        # why nothing (or not everything) is offered for the selection
        self.refused = RefusalList(controller, self)
        row = QHBoxLayout()
        row.addWidget(self.all_button)
        row.addStretch(1)
        row.addWidget(self.apply_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.scope)
        col.addWidget(self.tabs, 1)
        col.addWidget(self.refused)
        col.addWidget(self.about)
        col.addLayout(row)
        controller.matchesReady.connect(self.show_matches)
        controller.selectionChanged.connect(self._scope_text)
        controller.opened.connect(self._scope_text)

    def _scope_text(self):
        n = len(self.ctl.selection)
        where = "the whole graph" if not n else f"{n} selected node{'s' if n > 1 else ''}"
        self.scope.setText(f"<b>Matches for {where}</b> "
                           f"<span style='color:#777'>(listing…)</span>")

    def show_matches(self, matches, predicted: bool) -> None:
        keep = self.current_match()
        self.predicted = predicted
        if self._spare:   # rows made ahead for a list this one replaces
            listed = set(matches)
            self._spare = {m: row for m, row in self._spare.items() if m in listed}
        self.matches_by_level = {level: [] for level in LEVELS}
        levels = {}
        for m in matches:
            if m.transformation not in levels:
                levels[m.transformation] = level_of(m.transformation)
            self.matches_by_level.setdefault(levels[m.transformation], []).append(m)
        current_tree = self.tabs.currentWidget()
        for i, level in enumerate(LEVELS):
            found = self.matches_by_level.get(level, [])
            if self.trees[level] is current_tree:
                self._fill(self.trees[level], level, found, keep)
            # the other tabs are filled when shown (_tab_shown): a refresh builds one tree
            self.tabs.setTabText(i, f"{level} ({len(found)})")
            self.tabs.setTabToolTip(i, f"{len(found)} {level} match(es)")
        n = len(self.ctl.selection)
        where = "the whole graph" if not n else f"{n} selected node{'s' if n > 1 else ''}"
        waiting = sum(m.delta_bytes is None for m in matches)
        state = ("" if predicted else f" <span style='color:#777'>(predicting bytes: "
                                      f"{len(matches) - waiting} of {len(matches)})</span>")
        self.scope.setText(f"<b>{len(matches)} matches for {where}</b>{state}")
        self._current_changed(self.current_item())
        self._note_on_screen()

    def _tab_shown(self, index: int) -> None:
        level = LEVELS[index] if 0 <= index < len(LEVELS) else None
        if level is not None:
            self._fill(self.trees[level], level, self.matches_by_level.get(level, []), None)
        self._note_on_screen()

    def _fill(self, tree, level, found, keep) -> None:
        """Lay ``tree`` out for ``found`` unless it already shows exactly that.

        Rows are kept between refreshes (by match, which compares without its
        prediction) and only moved: a rebuild created every row again, and on a
        training program's 4,243 matches each half-second refresh held the window
        for up to 250 ms. A row's texts change only when its prediction or group did.
        A long list (over ``RESORT_ROWS``) that only gained predictions is re-sorted at
        most every ``RESORT_S`` seconds until the last prediction; in between its rows
        take their new figures where they stand."""
        shown = (self.predicted, tuple((id(m), m.delta_bytes) for m in found))
        if self._shown.get(level) == shown or self._rows_pending(tree, level, found, keep):
            return
        self._shown[level] = shown
        if (not self.predicted and len(found) > RESORT_ROWS
                and time.monotonic() - self._sorted_at.get(level, 0) < RESORT_S
                and self._update_in_place(level, found)):
            return
        self._sorted_at[level] = time.monotonic()
        scroll = tree.verticalScrollBar().value()
        tree.setUpdatesEnabled(False)
        tree.blockSignals(True)
        tree.invisibleRootItem().takeChildren()
        old_groups, old_items = self._groups.get(level, {}), self._items.get(level, {})
        for group in old_groups.values():
            group.takeChildren()
        bold = QFont(tree.font())
        bold.setBold(True)
        current, groups, items, rows = None, {}, {}, []
        for name, members in arrange(found):
            deltas = [m.delta_bytes for m in members if m.delta_bytes is not None]
            best = min(deltas) if deltas else None
            group = old_groups.get(name) or self._new_group(name, bold)
            if name == NO_CHANGE:
                group.setText(0, f"{NO_CHANGE}  ({len(members)})")
                group.setText(1, "0 B")
                group.setToolTip(0, f"{len(members)} match(es) predicted to move the same "
                                    f"bytes as now (they may still change the runtime)")
            else:
                group.setText(0, f"{name}  ({len(members)})")
                group.setText(1, self._delta_text(best, "best ") if deltas else "")
                group.setToolTip(0, f"{name}: {len(members)} match(es). {self._about(name)}")
            self._colour(group, best)
            children = []
            for m in members:
                kept = old_items.get(m) or self._spare.pop(m, None)
                items[m] = self._row(kept, m, name == NO_CHANGE)
                item = items[m][0]
                children.append(item)
                self._row_match[id(item)] = m
                if keep is not None and m == keep:
                    current = item
            group.addChildren(children)
            groups[name] = group
            rows.append((group, children))
        for m, (item, _) in old_items.items():
            if m not in items:
                self._row_match.pop(id(item), None)
        self._groups[level], self._items[level], self._rows[level] = groups, items, rows
        tree.addTopLevelItems(list(groups.values()))
        for group in groups.values():
            group.setExpanded(group_key(group) not in self.collapsed)
        if current is not None:
            tree.setCurrentItem(current)
        tree.verticalScrollBar().setValue(scroll)
        tree.blockSignals(False)
        tree.setUpdatesEnabled(True)

    def _rows_pending(self, tree, level, found, keep) -> bool:
        """True while ``found`` has more rows to create than one turn of the event loop
        should take: ``ROW_CHUNK`` of them are made now (kept in ``_spare``) and the
        layout is tried again on the next turn. A training program's 4,243 new rows
        made at once held the window for 110-125 ms."""
        items = self._items.get(level, {})
        missing = [m for m in found if m not in items and m not in self._spare]
        if len(missing) <= ROW_CHUNK:
            return False
        for m in missing[:ROW_CHUNK]:
            self._spare[m] = self._row(None, m, False)

        def again():
            if self.matches_by_level.get(level) is found:   # else a newer list came
                self._fill(tree, level, found, keep)
                self._note_on_screen()
        QTimer.singleShot(5, again)   # a timer: input and paints go between chunks
        return True

    def _update_in_place(self, level, found) -> bool:
        """New predictions written into the rows where they stand; False when ``found``
        holds a match the tree does not show (then it is laid out again)."""
        items = self._items.get(level, {})
        changed = []
        for m in found:
            kept = items.get(m)
            if kept is None:
                return False
            if kept[1][1] != m.delta_bytes:
                changed.append((m, kept))
        # each row's change told the view on its own took 0.6 ms a row (200 rows in a
        # refresh: 120 ms): the model stays quiet, and the view repaints once
        tree = self.trees[level]
        tree.model().blockSignals(True)
        try:
            for m, kept in changed:
                items[m] = self._row(kept, m, kept[1][0])
                self._row_match[id(kept[0])] = m
        finally:
            tree.model().blockSignals(False)
        tree.viewport().update()
        return True

    @staticmethod
    def _new_group(name, bold):
        group = QTreeWidgetItem(["", ""])
        group.setData(0, GROUP, name)
        group.setFont(0, bold)
        return group

    def _row(self, kept, m, unchanged_group: bool):
        """(``m``'s row, what its texts show): ``kept`` (its row so far, or None) with
        its texts brought up to date where its prediction or its group changed."""
        state = (unchanged_group, m.delta_bytes, self.predicted)
        if kept is not None and kept[1] == state:
            if kept[0].data(0, Qt.UserRole) is not m:
                kept[0].setData(0, Qt.UserRole, m)
            return kept
        item = kept[0] if kept is not None else None
        if item is None:
            item = QTreeWidgetItem(["", ""])
            item.setToolTip(0, f"{m.transformation}: {m.description}\n" + "\n".join(m.nodes))
        text = m.description or ", ".join(m.nodes)
        item.setText(0, f"{m.transformation}: {text}" if unchanged_group else text)
        item.setText(1, self._delta_text(m.delta_bytes))
        item.setData(0, Qt.UserRole, m)
        self._colour(item, m.delta_bytes)
        return item, state

    def on_screen(self) -> list:
        """The waiting matches of the rows the current tab shows (to predict first).

        Read from the rows ``_fill`` laid out, with a handful of Qt calls: while a
        prediction runs in a worker, each call back from Qt may wait for the GIL."""
        tree = self.tabs.currentWidget()
        level = next((k for k, t in self.trees.items() if t is tree), None)
        top = tree.itemAt(0, 0) if tree is not None else None
        if top is None:
            return []
        rows = []
        for group, children in self._rows.get(level, ()):
            rows.append(group)
            if group.isExpanded():
                rows.extend(children)
        try:
            first = rows.index(top)
        except ValueError:
            return []
        count = tree.viewport().height() // max(1, tree.visualItemRect(top).height()) + 1
        return [m for m in (self._row_match.get(id(item)) for item in rows[first:first + count])
                if m is not None and m.delta_bytes is None]

    def _note_on_screen(self, *_):
        self.ctl.on_screen = self.on_screen()

    def _delta_text(self, delta, prefix: str = "") -> str:
        if delta is None:
            return "…" if not self.predicted else "?"
        return prefix + ("+" if delta > 0 else "") + human_bytes(delta)

    @staticmethod
    def _colour(item, delta):
        item.setTextAlignment(1, Qt.AlignRight | Qt.AlignVCenter)
        item.setForeground(1, QBrush(QColor("#1a7f37" if delta < 0 else "#b42318")) if delta
                           else QBrush())

    @staticmethod
    def _about(name: str) -> str:
        from workbench import transformation_api as transform
        try:
            return transform.get(name).description
        except Exception:
            return ""

    # -- current match ---------------------------------------------------------
    def current_item(self):
        tree = self.tabs.currentWidget()
        return tree.currentItem() if tree is not None else None

    def current_match(self):
        item = self.current_item()
        return item.data(0, Qt.UserRole) if item is not None else None

    def select_match(self, match) -> bool:
        """Make ``match`` the current row (switching tab); for tests and scripting."""
        tree = self.trees[level_of(match.transformation)]
        self.tabs.setCurrentWidget(tree)   # fills it (tabs are filled when shown)
        for item in match_items(tree):
            if item.data(0, Qt.UserRole) == match:
                self.tabs.setCurrentWidget(tree)
                tree.setCurrentItem(item)
                return True
        return False

    def _current_changed(self, item, _previous=None):
        match = item.data(0, Qt.UserRole) if item is not None else None
        self.apply_button.setEnabled(match is not None)
        if match is None:
            name = item.text(0).split(" ")[0] if item is not None else ""
            self.about.setText(f"<b>{name}</b> — {self._about(name)}" if name else
                               "Select a match to see what it does; double-click to apply.")
            self.ctl.hover(())
            return
        about = self._about(match.transformation)
        delta = ("" if match.delta_bytes is None else
                 f"<br>Predicted change in bytes moved: "
                 f"<b>{self._delta_text(match.delta_bytes)}</b>")
        self.about.setText(f"<b>{match.transformation}</b> — {about}<br>"
                           f"<i>{match.description}</i>{delta}")
        self.ctl.hover(match.nodes)

    def _entered(self, item, _col):
        match = item.data(0, Qt.UserRole)
        if match is not None:
            self.ctl.hover(match.nodes)

    def eventFilter(self, obj, event):
        if event.type() == QEvent.Leave:
            current = self.current_match()
            self.ctl.hover(current.nodes if current is not None else ())
        return False

    def apply_item(self, item) -> None:
        match = item.data(0, Qt.UserRole) if item is not None else None
        if match is not None:
            self.ctl.apply(match)
