"""The overview in the graph view's corner: the whole layout small, the visible part framed.

It draws from the layout's rectangles and points (a few batched QPainter
calls), not by asking every scene item to paint itself, once per layout into
a pixmap; a scroll repaints the pixmap and the frame (drawing the 6,000
lines of a training program's layout on every scroll held the window up to
160 ms). Clicking or dragging in it moves the view there.
"""
from PyQt5.QtCore import QLineF, QPointF, QRectF, Qt
from PyQt5.QtGui import QColor, QPainter, QPen, QPixmap
from PyQt5.QtWidgets import QWidget

SIZE = (210, 160)


class Minimap(QWidget):
    def __init__(self, view):
        super().__init__(view)
        self.view = view
        self.rect_scene = QRectF()
        self.nodes, self.groups, self.lines, self.frames = [], [], [], []
        self._drawn = None   # the layout drawn at this size (a QPixmap), until the next one
        self.setFixedSize(*SIZE)
        self.setCursor(Qt.PointingHandCursor)
        self.setToolTip("Overview: click or drag to move the view")
        for bar in (view.horizontalScrollBar(), view.verticalScrollBar()):
            bar.valueChanged.connect(self.update)
            bar.rangeChanged.connect(self.update)
        self.setVisible(False)

    def set_layout(self, desc, placement, scene_rect: QRectF) -> None:
        """Take the shapes of a new layout (None: nothing to show)."""
        self.nodes, self.groups, self.lines, self.frames = [], [], [], []
        self._drawn = None
        self.rect_scene = QRectF(scene_rect) if placement is not None else QRectF()
        if placement is not None:
            for key, (cx, cy) in placement.nodes.items():
                w, h = desc.nodes[key].size
                (self.groups if desc.nodes[key].kind == "group" else self.nodes).append(
                    QRectF(cx - w / 2, cy - h / 2, w, h))
            for points, _bezier, _label in placement.edges.values():
                self.lines += [QLineF(QPointF(*a), QPointF(*b)) for a, b in zip(points, points[1:])]
            self.frames = [QRectF(*r) for key, r in placement.clusters.items()
                           if key in desc.clusters and desc.clusters[key].kind == "scope"]
        self.setVisible(not self.rect_scene.isEmpty())
        self.place()
        self.update()

    def place(self) -> None:
        """Bottom-right corner of the view's viewport."""
        port = self.view.viewport().geometry()
        self.move(port.right() - self.width() - 8, port.bottom() - self.height() - 8)
        self.raise_()

    def _scale(self):
        r = self.rect_scene
        s = min((self.width() - 8) / max(r.width(), 1), (self.height() - 8) / max(r.height(), 1))
        ox = (self.width() - r.width() * s) / 2 - r.x() * s
        oy = (self.height() - r.height() * s) / 2 - r.y() * s
        return s, ox, oy

    def visible_rect(self) -> QRectF:
        """The part of the scene the view shows, in scene coordinates."""
        return self.view.mapToScene(self.view.viewport().rect()).boundingRect()

    def frame(self) -> QRectF:
        """The visible part as drawn in the minimap (widget coordinates)."""
        s, ox, oy = self._scale()
        v = self.visible_rect()
        return QRectF(v.x() * s + ox, v.y() * s + oy, v.width() * s, v.height() * s)

    def paintEvent(self, event):
        p = QPainter(self)
        try:
            self._paint(p)
        finally:
            p.end()   # even if a frame still refers to it (a stack being printed)

    def _paint(self, p):
        if self._drawn is None or self._drawn.size() != self.size():
            self._drawn = QPixmap(self.size())
            self._drawn.fill(Qt.transparent)
            layout = QPainter(self._drawn)
            try:
                self._paint_layout(layout)
            finally:
                layout.end()
        p.drawPixmap(0, 0, self._drawn)
        if self.rect_scene.isEmpty():
            return
        p.setPen(QPen(QColor("#1f6fd1"), 1.5))
        p.setBrush(QColor(31, 111, 209, 40))
        p.drawRect(self.frame().intersected(QRectF(self.rect()).adjusted(1, 1, -1, -1)))

    def _paint_layout(self, p):
        p.fillRect(self.rect(), QColor(255, 255, 255, 225))
        p.setPen(QPen(QColor("#9aa5b1"), 1))
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))
        if self.rect_scene.isEmpty():
            return
        s, ox, oy = self._scale()
        p.translate(ox, oy)
        p.scale(s, s)
        p.setPen(QPen(QColor("#8fa8c8"), 0))
        p.setBrush(Qt.NoBrush)
        p.drawRects(self.frames)
        p.setPen(QPen(QColor("#b0b0b0"), 0))
        p.drawLines(self.lines)
        p.setPen(Qt.NoPen)
        p.setBrush(QColor("#7c8a99"))
        p.drawRects(self.nodes)
        p.setBrush(QColor("#4f79b5"))
        p.drawRects(self.groups)

    def mousePressEvent(self, event):
        self._move_to(event.pos())

    def mouseMoveEvent(self, event):
        if event.buttons() & Qt.LeftButton:
            self._move_to(event.pos())

    def _move_to(self, pos):
        s, ox, oy = self._scale()
        self.view.centerOn((pos.x() - ox) / s, (pos.y() - oy) / s)
        self.update()
