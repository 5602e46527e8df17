"""The SDFG canvas itself: a QGraphicsView with zoom, pan, fit and the overview
(``gui.minimap``), the colours and extent the graph panel (``gui.graph_view``)
draws with, and export of the whole graph as SVG or PNG."""
from PyQt5.QtCore import QRectF, QSize, Qt, pyqtSignal
from PyQt5.QtGui import QColor, QImage, QPainter
from PyQt5.QtWidgets import QGraphicsView

from gui.graph_items import ClusterItem, NodeItem
from gui.minimap import Minimap

# Below this scale node titles are hard to read: Fit shows the first screenful
# at this scale rather than the whole graph as a sliver.
READABLE_SCALE = 0.6
PNG_MAX_SIDE = 8000   # pixels: a whole large graph is scaled down to fit


def heat(fraction: float, cold="#ffffff", hot="#e34a33") -> QColor:
    """A colour between ``cold`` and ``hot`` (via orange) for 0..1."""
    f = min(1.0, max(0.0, fraction))
    stops = [QColor(cold), QColor("#fdbb84"), QColor(hot)]
    a, b, t = (stops[0], stops[1], f * 2) if f < 0.5 else (stops[1], stops[2], f * 2 - 1)
    mix = lambda x, y: int(x + (y - x) * t)  # noqa: E731
    return QColor(mix(a.red(), b.red()), mix(a.green(), b.green()), mix(a.blue(), b.blue()))


def placement_rect(desc, placement) -> QRectF:
    """What the layout covers: clusters, nodes, edge points and labels."""
    boxes = list(placement.clusters.values())
    for key, (cx, cy) in placement.nodes.items():
        w, h = desc.nodes[key].size
        boxes.append((cx - w / 2, cy - h / 2, w, h))
    for points, _bezier, label in placement.edges.values():
        boxes += [(x, y, 0, 0) for x, y in points]
        if label:
            boxes.append((label[0] - 60, label[1] - 8, 120, 16))   # a memlet label, roughly
    if not boxes:
        return QRectF()
    x1 = min(b[0] for b in boxes)
    y1 = min(b[1] for b in boxes)
    x2 = max(b[0] + b[2] for b in boxes)
    y2 = max(b[1] + b[3] for b in boxes)
    return QRectF(x1, y1, x2 - x1, y2 - y1)


class GraphView(QGraphicsView):
    nodeActivated = pyqtSignal(object)   # double-clicked NodeItem
    clusterActivated = pyqtSignal(object)   # double-clicked ClusterItem (a frame)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
        self.setDragMode(QGraphicsView.RubberBandDrag)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.SmartViewportUpdate)
        self.setBackgroundBrush(QColor("#fcfcfc"))
        self._pan = None
        self.minimap = Minimap(self)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.minimap.place()

    def wheelEvent(self, event):
        self.zoom(1.15 if event.angleDelta().y() > 0 else 1 / 1.15)

    def zoom(self, factor: float) -> None:
        scale = self.transform().m11() * factor
        if 0.02 < scale < 8:
            self.scale(factor, factor)

    def fit_all(self) -> None:
        """The whole graph, however small that makes it (the minimap is the overview)."""
        # the scene rect is the layout's extent (set by GraphPanel); asking the
        # items instead calls Python's boundingRect of each, too slow at 5,000
        if self.scene() is not None and not self.scene().sceneRect().isEmpty():
            self.fitInView(self.scene().sceneRect(), Qt.KeepAspectRatio)

    def fit(self) -> None:
        """Fit the selection if there is one, else the graph, never below a readable scale."""
        selected = self.scene().selectedItems() if self.scene() is not None else []
        if selected:
            rect = QRectF()
            for item in selected:
                rect = rect.united(item.sceneBoundingRect())
            self.fit_rect(rect.adjusted(-30, -30, 30, 30))
        else:
            self.fit_readable()

    def fit_rect(self, rect: QRectF, max_scale: float = 1.0) -> None:
        """Show ``rect``, scaled to fit between the readable scale and ``max_scale``."""
        self.fitInView(rect, Qt.KeepAspectRatio)
        scale = min(max(self.transform().m11(), READABLE_SCALE), max_scale)
        self.resetTransform()
        self.scale(scale, scale)
        self.centerOn(rect.center())

    def fit_readable(self, min_scale: float = READABLE_SCALE) -> None:
        """Fit the graph, but never below a scale where labels stay legible:
        a large graph then shows its first screenful, ready to scroll."""
        self.fit_all()
        if self.transform().m11() < min_scale and self.scene() is not None:
            self.resetTransform()
            self.scale(min_scale, min_scale)
            rect = self.scene().sceneRect()
            visible = self.mapToScene(self.viewport().rect()).boundingRect()
            self.centerOn(rect.center().x(), rect.top() + visible.height() / 2)

    def mousePressEvent(self, event):
        if event.button() == Qt.MiddleButton or (event.button() == Qt.LeftButton and
                                                 event.modifiers() & Qt.AltModifier):
            self._pan = event.pos()
            self.setCursor(Qt.ClosedHandCursor)
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event):
        if self._pan is not None:
            delta = event.pos() - self._pan
            self._pan = event.pos()
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - delta.x())
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() - delta.y())
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event):
        if self._pan is not None:
            self._pan = None
            self.unsetCursor()
            return
        super().mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event):
        item = self.itemAt(event.pos())
        if isinstance(item, NodeItem):
            self.nodeActivated.emit(item)
            return
        if isinstance(item, ClusterItem):
            self.clusterActivated.emit(item)
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event):
        if event.key() in (Qt.Key_Plus, Qt.Key_Equal):
            self.zoom(1.25)
        elif event.key() == Qt.Key_Minus:
            self.zoom(0.8)
        elif event.key() == Qt.Key_F:
            self.fit()
        else:
            super().keyPressEvent(event)


def export_svg(scene, path: str, title: str = "SDFG") -> None:
    """The whole graph (the scene rect) as an SVG file."""
    from PyQt5.QtSvg import QSvgGenerator
    rect = scene.sceneRect()
    gen = QSvgGenerator()
    gen.setFileName(str(path))
    gen.setSize(QSize(int(rect.width()), int(rect.height())))
    gen.setViewBox(QRectF(0, 0, rect.width(), rect.height()))
    gen.setTitle(title)
    painter = QPainter(gen)
    try:
        scene.render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    finally:
        painter.end()
    if not _written(path):
        raise OSError(f"could not write {path}")


def export_png(scene, path: str, scale: float = 2.0) -> None:
    """The whole graph as a PNG, at ``scale`` pixels a point (less for a very large graph)."""
    rect = scene.sceneRect()
    scale = min(scale, PNG_MAX_SIDE / max(rect.width(), rect.height(), 1))
    image = QImage(max(1, int(rect.width() * scale)), max(1, int(rect.height() * scale)),
                   QImage.Format_ARGB32)
    image.fill(QColor("#fcfcfc"))
    painter = QPainter(image)
    painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
    try:
        scene.render(painter, QRectF(0, 0, image.width(), image.height()), rect)
    finally:
        painter.end()
    if not image.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")


def _written(path) -> bool:
    from pathlib import Path
    p = Path(path)
    return p.is_file() and p.stat().st_size > 0
