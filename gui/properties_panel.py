"""Properties of the selected element: shapes, dtypes, memlet volume, ONNX attributes.

With nothing selected it shows the model: inputs, outputs and data movement. A
symbolic program's shapes read with the model's dim names (``[1, sequence, 64]``,
``workbench.importer.symbolic.shape_text``) and its sizes in bytes are taken at the
sizes its figures are (``Session.symbols``).
"""
from PyQt5.QtCore import Qt
from PyQt5.QtWidgets import QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget
from dace.sdfg import nodes as dn

from gui.graph_model import GEdge, GNode, human_bytes
from workbench.analysis.sizes import at_sizes, number
from workbench.importer.symbolic import dim_text, is_symbolic, shape_text

KEY_MAX_PX = 240       # the key column never takes more of the panel than this
TOOLTIP_MAX = 4000     # a value's tooltip shows it whole up to this many characters


def sizes_text(sizes: dict) -> str:
    """``batch=4, sequence=16``: the sizes a symbolic program's figures are taken at."""
    return ", ".join(f"{k}={v}" for k, v in (sizes or {}).items())


def _array_rows(sdfg, name, sizes=None):
    """An array's rows; a symbolic size in bytes at ``sizes`` (the session's)."""
    desc = sdfg.arrays.get(name)
    if desc is None:
        return [("array", f"{name} (not in this SDFG)")]
    rows = [("shape", shape_text(desc.shape)), ("dtype", str(desc.dtype.to_string())),
            ("transient", str(desc.transient)), ("storage", str(desc.storage).split(".")[-1]),
            ("lifetime", str(desc.lifetime).split(".")[-1])]
    total = f"{dim_text(desc.total_size)} × {desc.dtype.bytes} B"
    try:
        with at_sizes(sizes):
            size = human_bytes(number(desc.total_size) * desc.dtype.bytes)
        rows.append(("size", f"{size} at {sizes_text(sizes)} ({total})"
                     if is_symbolic([desc.total_size]) else size))
    except (TypeError, ValueError):
        rows.append(("size", total))
    if getattr(desc, "strides", None) is not None:
        rows.append(("strides", "(" + ", ".join(dim_text(s) for s in desc.strides) + ")"))
    rows.append(("kind", type(desc).__name__))
    return rows


def _connections(g):
    rows = []
    for edge in g.state.in_edges(g.node):
        if edge.data is not None and not edge.data.is_empty():
            rows.append((f"in {edge.dst_conn or ''}".strip(), _memlet_text(edge, g.sdfg)))
    for edge in g.state.out_edges(g.node):
        if edge.data is not None and not edge.data.is_empty():
            rows.append((f"out {edge.src_conn or ''}".strip(), _memlet_text(edge, g.sdfg)))
    return rows


def _memlet_text(edge, sdfg):
    m = edge.data
    desc = sdfg.arrays.get(m.data)
    extra = f"  {desc.dtype.to_string()}{shape_text(desc.shape)}" if desc is not None else ""
    return f"{m}{extra}"


def node_rows(g: GNode, ctl) -> list:
    node = g.node
    rows = [("identity", g.ident)]
    if g.kind == "onnx":
        rows += [("op type", node.op_type), ("ONNX name", node.onnx_name),
                 ("implementation", str(node.implementation))]
        rows += [(f"attr {k}", str(v)) for k, v in sorted((node.attrs or {}).items())]
        rows += _connections(g)
    elif g.kind == "access":
        rows += [("data", node.data)] + _array_rows(g.sdfg, node.data, ctl.ws.symbols)
    elif g.kind in ("mapentry", "mapexit"):
        m = node.map
        rows += [("map", m.label), ("params", ", ".join(m.params)), ("range", str(m.range)),
                 ("schedule", str(m.schedule).split(".")[-1])] + _connections(g)
    elif g.kind == "tasklet":
        rows += [("tasklet", node.label), ("language", str(node.language).split(".")[-1]),
                 ("code", node.code.as_string.strip())] + _connections(g)
    elif g.kind == "nsdfg":
        rows += [("nested SDFG", node.sdfg.name), ("states", str(len(list(node.sdfg.states())))),
                 ("symbols", str(dict(node.symbol_mapping)))] + _connections(g)
    else:
        rows += [("type", type(node).__name__), ("label", getattr(node, "label", ""))]
        if isinstance(node, dn.LibraryNode):
            rows.append(("implementation", str(getattr(node, "implementation", ""))))
        rows += _connections(g)
    if g.operator:
        rows.append(("operator", g.operator))
        if ctl.analysis is not None:
            moved = ctl.analysis[0].per_operator.get(g.operator)
            if moved is not None:
                rows.append(("operator bytes moved", human_bytes(moved)))
        prof = ctl.last_profile
        if prof is not None and g.operator in (prof.per_operator or {}):
            rows.append(("operator time", f"{prof.per_operator[g.operator]:.3f} ms "
                                          f"(profile of step {prof.step})"))
    return rows


def edge_rows(e: GEdge, sizes: dict = None) -> list:
    m = e.edge.data
    rows = [("memlet", str(m)), ("data", str(m.data)), ("subset", str(m.subset)),
            ("other subset", str(m.other_subset)), ("volume", str(m.volume)),
            ("dynamic", str(m.dynamic)), ("wcr", str(m.wcr)),
            ("bytes moved", human_bytes(e.bytes) if e.bytes is not None else "not counted "
             "(inside a scope or not touching an array)"),
            ("from", f"{e.edge.src} {e.edge.src_conn or ''}".strip()),
            ("to", f"{e.edge.dst} {e.edge.dst_conn or ''}".strip())]
    if m.data in e.sdfg.arrays:
        rows += [(f"array {k}", v) for k, v in _array_rows(e.sdfg, m.data, sizes)]
    return rows


def model_rows(ctl) -> list:
    ws = ctl.ws
    rows = [("model", ws.name), ("step", f"{ws.position} of {len(ws.steps)}")]
    for info in ws.inputs:
        rows.append((f"input {info.onnx_name}", f"{info.dtype}{shape_text(info.shape)}"))
    for info in ws.outputs:
        rows.append((f"output {info.onnx_name}", f"{info.dtype}{shape_text(info.shape)}"))
    if ws.symbols:   # what the figures below (and the graph's bytes) are taken at
        rows.append(("figures at sizes", sizes_text(ws.symbols)))
    if ctl.analysis is not None:
        mv = ctl.analysis[0]
        memory = ctl.analysis[2]
        rows += [("bytes moved", human_bytes(mv.moved_bytes)),
                 ("compulsory bytes", human_bytes(mv.compulsory_bytes)),
                 ("ratio", f"{mv.ratio:.3f}"),
                 ("peak live memory", human_bytes(memory.peak_live_bytes)),
                 ("allocated memory", human_bytes(memory.allocated_bytes))]
    return rows


class PropertiesPanel(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Property", "Value"])
        self.tree.setRootIsDecorated(False)
        self.tree.setTextElideMode(Qt.ElideRight)   # values elide; their tooltip has them
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.tree)
        for signal in (controller.selectionChanged, controller.opened, controller.analysed,
                       controller.profiled, controller.sizesChanged):
            signal.connect(self.refresh)
        controller.changed.connect(self._changed)

    def _changed(self):
        self.ctl.focus = None   # it belonged to the previous SDFG; the graph sets a new one
        self.refresh()

    def rows(self) -> list:
        focus = self.ctl.focus
        if self.ctl.ws is None:
            return []
        try:
            if isinstance(focus, GNode):
                return node_rows(focus, self.ctl)
            if isinstance(focus, GEdge) and focus.edge is not None:
                return edge_rows(focus, self.ctl.ws.symbols)
        except Exception as e:  # an odd node must not break the panel
            return [("error", f"{type(e).__name__}: {e}")]
        return model_rows(self.ctl)

    def refresh(self, *_):
        self.tree.clear()
        for key, value in self.rows():
            item = QTreeWidgetItem([key, value])
            item.setToolTip(0, key)
            item.setToolTip(1, value if len(value) <= TOOLTIP_MAX else
                            value[:TOOLTIP_MAX - 1] + "…")
            self.tree.addTopLevelItem(item)
        # keys as wide as the widest, up to KEY_MAX_PX (a longer one elides; its tooltip
        # has it whole); the user may still drag the column wider
        self.tree.resizeColumnToContents(0)
        self.tree.setColumnWidth(0, min(self.tree.columnWidth(0), KEY_MAX_PX))
