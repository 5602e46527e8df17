"""The SDFG canvas itself: a QGraphicsView with zoom, pan and fit, and the colours
and extent the graph panel (``gui.graph_view``) draws with."""
from PyQt5.QtCore import QRectF, Qt, pyqtSignal
from PyQt5.QtGui import QColor, QPainter
from PyQt5.QtWidgets import QGraphicsView

from gui.graph_items import NodeItem


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

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
        self.setDragMode(QGraphicsView.RubberBandDrag)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.SmartViewportUpdate)
        self.setBackgroundBrush(QColor("#fcfcfc"))
        self._pan = None

    def wheelEvent(self, event):
        self.zoom(1.15 if event.angleDelta().y() > 0 else 1 / 1.15)

    def zoom(self, factor: float) -> None:
        scale = self.transform().m11() * factor
        if 0.02 < scale < 8:
            self.scale(factor, factor)

    def fit(self) -> None:
        # the scene rect is the layout's extent (set by GraphPanel); asking the
        # items instead calls Python's boundingRect of each, too slow at 5,000
        if self.scene() is not None and not self.scene().sceneRect().isEmpty():
            self.fitInView(self.scene().sceneRect(), Qt.KeepAspectRatio)

    def fit_readable(self, min_scale: float = 0.6) -> None:
        """Fit the graph, but never below a scale where labels stay legible:
        a large graph then opens at its top, ready to scroll or press Fit."""
        self.fit()
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
