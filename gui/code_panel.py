"""The generated C++ of the whole program, with the selected node's part highlighted.

Lines are matched to nodes through DaCe's source map (``map/map_cpp.json``
in the build folder: node of the compiled SDFG -> line range), and those
nodes to ONNX operators through the label prefix expanded operators carry
(``<node name>__...``). Without a source map, lines naming the prefix are
highlighted instead.
"""
import re
from collections import defaultdict
from pathlib import Path

from PyQt5.QtCore import QRegularExpression
from PyQt5.QtGui import QColor, QSyntaxHighlighter, QTextCharFormat, QTextCursor, QTextFormat
from PyQt5.QtWidgets import (QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QTextEdit,
                             QVBoxLayout, QWidget)

from gui.qtapp import mono_font


class CppHighlighter(QSyntaxHighlighter):
    RULES = [(r"\b(for|if|else|while|return|auto|const|struct|void|int|long|float|double|bool|"
              r"char|unsigned|static|inline|new|delete|DACE_EXPORTED|__restrict__)\b", "#0b4f9c"),
             (r"\b[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?f?\b", "#8a3ffc"),
             (r"^\s*#.*$", "#7a4b00"), (r"//[^\n]*", "#6a737d")]

    def __init__(self, document):
        super().__init__(document)
        self.rules = []
        for pattern, color in self.RULES:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(color))
            self.rules.append((QRegularExpression(pattern), fmt))

    def highlightBlock(self, text):
        for regex, fmt in self.rules:
            it = regex.globalMatch(text)
            while it.hasNext():
                m = it.next()
                self.setFormat(m.capturedStart(), m.capturedLength(), fmt)


def source_map(build, names: dict):
    """(label -> ranges, operator -> ranges, array -> ranges) from the build's source map."""
    from dace.sdfg import nodes as dn
    from workbench.analysis.movement import operator_name
    from workbench.build.sourcemap import node_spans
    by_label, by_op, by_data = defaultdict(list), defaultdict(list), defaultdict(list)
    if build.units:
        return _unit_source_map(build, names, by_label, by_op, by_data)
    for node, span in node_spans(build.sdfg, build.folder):
        if isinstance(node, dn.AccessNode):
            by_data[node.data].append(span)
            continue
        is_map = isinstance(node, (dn.MapEntry, dn.MapExit))
        label = node.map.label if is_map else node.label
        by_label[label].append(span)
        by_op[operator_name(node, names)].append(span)
    return by_label, by_op, by_data


def source_parts(build) -> list:
    """(file, text) of the build's C++ as the panel shows it: the program's file first,
    then each other file under a ``// ==== name ====`` line."""
    files = sorted((Path(build.folder) / "src" / "cpu").glob("*.cpp"))
    main = [f for f in files if f.stem == build.sdfg.name] or files
    ordered = main[:1] + [f for f in files if f not in main[:1]]
    return [(f, (f"\n// ==== {f.name} ====\n" if i else "") + f.read_text(errors="replace"))
            for i, f in enumerate(ordered)]


UNIT_CALL = re.compile(r"^\s*// unit: (?P<label>.*) -> (?P<unit>u_\w+)$")


def _unit_source_map(build, names, by_label, by_op, by_data):
    """A build by units: a node's ranges are its call in the program and its unit's file."""
    from workbench.analysis.movement import owner_name
    parts = source_parts(build)
    line, sections = 1, {}
    for i, (f, text) in enumerate(parts):
        sections[f.stem] = (line + (2 if i else 0), line + text.count("\n"))
        line += text.count("\n")
    program = parts[0][1].split("\n") if parts else []
    for number, text in enumerate(program, 1):
        call = UNIT_CALL.match(text)
        if call:
            ranges = [(number, number + 4)] + ([sections[call["unit"]]]
                                                if call["unit"] in sections else [])
            by_label[call["label"]] += ranges
            by_op[owner_name(call["label"], names) or call["label"]] += ranges
    return by_label, by_op, by_data


def attach_source_map(ws, build):
    """Give ``build`` the panel's line map (call it where the build was made: a worker)."""
    try:
        build.gui_source_map = source_map(build, dict(ws.operator_names()))
    except Exception:
        build.gui_source_map = None   # no map: the panel greps for label prefixes
    return build


class CodePanel(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.build_position = None
        self.maps = ({}, {}, {})
        self.text = QPlainTextEdit(readOnly=True)
        self.text.setFont(mono_font())
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.text.setPlaceholderText("Build (or Verify/Profile) to see the generated C++.")
        self.highlighter = CppHighlighter(self.text.document())
        self.info = QLabel("No build yet.")
        self.info.setWordWrap(True)
        self.build_button = QPushButton("Generate code")
        self.build_button.setToolTip("Build the current step and show its C++")
        self.build_button.clicked.connect(lambda: controller.build())
        row = QHBoxLayout()
        row.addWidget(self.info, 1)
        row.addWidget(self.build_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addLayout(row)
        col.addWidget(self.text, 1)
        self.highlighted_lines = []
        self.failed_line = None
        controller.built.connect(self.show_build)
        controller.buildFailed.connect(self.show_failure)
        controller.selectionChanged.connect(self.highlight_focus)
        controller.changed.connect(self._stale)
        controller.opened.connect(self._cleared)

    def _cleared(self):
        self.text.clear()
        self.build_position = None
        self.info.setText("No build yet.")

    def _stale(self):
        if self.build_position is not None and self.ctl.ws.position != self.build_position:
            self.info.setText(f"Code of step {self.build_position}; the current step is "
                              f"{self.ctl.ws.position}: build again to update.")
        elif self.build_position is not None:
            self.info.setText(f"Code of step {self.build_position} (current).")

    def show_build(self, build):
        self.info.setStyleSheet("")
        self.failed_line = None
        parts = source_parts(build)
        files = [f for f, _ in parts]
        self.text.setPlainText("".join(text for _, text in parts))
        self.maps = getattr(build, "gui_source_map", None) or ({}, {}, {})
        self.build_position = self.ctl.ws.position
        lines = self.text.document().blockCount()
        self.info.setText(f"Code of step {self.build_position} (current): {len(files)} file(s), "
                          f"{lines} lines, build {build.seconds:.1f}s")
        self.highlight_focus()

    def show_failure(self, error) -> None:
        """A failed build: the generated C++ with the compiler's first error line marked."""
        first = getattr(error, "first_error", "") or ""
        node = getattr(error, "node", None)
        self.info.setText(f"Build failed{f' in ONNX node {node}' if node else ''}: "
                          f"{first or str(error).splitlines()[0]}")
        self.info.setStyleSheet("color: #b42318;")
        located = re.match(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+)", first)
        source = Path(located.group("file")) if located else None
        if source is None or not source.is_file():
            return
        self.text.setPlainText(source.read_text(errors="replace"))
        self.build_position = None
        line = int(located.group("line"))
        block = self.text.document().findBlockByNumber(line - 1)
        sel = QTextEdit.ExtraSelection()
        sel.format.setBackground(QColor("#ffd7d5"))
        sel.format.setProperty(QTextFormat.FullWidthSelection, True)
        sel.cursor = QTextCursor(block)
        self.text.setExtraSelections([sel])
        self.highlighted_lines = [(line, line)]
        self.failed_line = line
        self.text.verticalScrollBar().setValue(max(0, line - 4))

    def ranges_for(self, gnode) -> list:
        by_label, by_op, by_data = self.maps
        if gnode is None:
            return []
        if gnode.kind == "access":
            data = gnode.node.data
            return by_data.get(data, []) or self._grep(rf"\b{re.escape(data)}\b")
        label = gnode.title if gnode.kind != "onnx" else None
        if label and by_label.get(label):
            return by_label[label]
        if gnode.operator and by_op.get(gnode.operator):
            return by_op[gnode.operator]
        name = getattr(gnode.node, "name", None) or getattr(gnode.node, "label", "")
        return self._grep(re.escape(f"{name}__")) if name else []

    def _grep(self, pattern) -> list:
        regex = re.compile(pattern)
        return [(i + 1, i + 1) for i, line in enumerate(self.text.toPlainText().split("\n"))
                if regex.search(line)]

    def highlight_focus(self):
        focus = self.ctl.focus
        built = self.build_position is not None
        ranges = self.ranges_for(focus) if hasattr(focus, "kind") and built else []
        selections = []
        doc = self.text.document()
        color = QColor("#fff1c2")
        for first, last in ranges:
            for number in range(first - 1, last):
                block = doc.findBlockByNumber(number)
                if not block.isValid():
                    break
                sel = QTextEdit.ExtraSelection()
                sel.format.setBackground(color)
                sel.format.setProperty(QTextFormat.FullWidthSelection, True)
                sel.cursor = QTextCursor(block)
                selections.append(sel)
        self.text.setExtraSelections(selections)
        self.highlighted_lines = sorted(ranges)
        if ranges:
            first = min(r[0] for r in ranges)
            block = doc.findBlockByNumber(max(0, first - 3))
            self.text.verticalScrollBar().setValue(block.blockNumber())
