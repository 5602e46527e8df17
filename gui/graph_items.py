"""QGraphicsItems for SDFG elements: nodes by kind, memlet edges, cluster frames.

Shapes follow DaCe's conventions: access nodes are ellipses, tasklets
octagons, map entries/exits trapezoids, library nodes (ONNX operators)
rectangles, nested SDFGs double-framed rectangles; a folded name-scope group
(``gui.scope_groups``) is a blue double-framed box with its node count, bytes
and, after a profile, its summed time. Far zoomed out, nodes draw without text.
"""
import math

from PyQt5.QtCore import QPointF, QRectF, Qt
from PyQt5.QtGui import (QBrush, QColor, QFontMetricsF, QPainterPath, QPainterPathStroker, QPen,
                         QPolygonF)
from PyQt5.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem

from gui.graph_model import human_bytes
from gui.qtapp import ui_font
from workbench.training.naming import training_role

FILL = {"access": "#ffffff", "tasklet": "#fff7d6", "mapentry": "#dce9f7", "mapexit": "#dce9f7",
        "onnx": "#e6f2e1", "library": "#efe4f5", "nsdfg": "#f4f4f4", "group": "#e3ecf8",
        "other": "#eeeeee"}
# a training program's operators, told apart from the forward pass (workbench.training.naming)
ROLE_FILL = {"backward": "#fbe0d0", "loss": "#f6d3d8", "update": "#f3e7c4"}
SELECTED = QColor("#1f6fd1")
TEXT_LOD = 0.3   # below this scale text would be unreadable: nodes draw as plain shapes
HIGHLIGHT = QColor("#f08c00")


def default_fill(g) -> str:
    """The kind's colour; operators of a training program's backward pass, loss and
    update (and groups of them) in their own."""
    if g.kind in ("onnx", "library", "group", "tasklet", "mapentry", "mapexit"):
        name = (g.subtitle if g.kind == "onnx" else
                "/" + "/".join(g.scope) + "/x" if g.kind == "group" and g.scope else g.operator)
        role = training_role(name)
        if role in ROLE_FILL:
            return ROLE_FILL[role]
    return FILL.get(g.kind, "#eeeeee")


def title_font():
    font = ui_font(0)
    font.setBold(True)
    return font


def small_font():
    return ui_font(-1.5)


def node_size(gnode) -> tuple:
    """Width and height (points) that fit the node's text."""
    fm_title, fm_sub = QFontMetricsF(title_font()), QFontMetricsF(small_font())
    title = gnode.title if gnode.kind != "nsdfg" else "▸ " + gnode.title
    w = max(fm_title.horizontalAdvance(title), fm_sub.horizontalAdvance(gnode.subtitle or ""))
    h = fm_title.height() + (fm_sub.height() if gnode.subtitle else 0)
    if gnode.kind == "group":   # a third line for the summed time of a profile
        w = max(w, fm_sub.horizontalAdvance("measured 000.000 ms"))
        h += fm_sub.height()
    pad_w = {"access": 28, "tasklet": 26, "mapentry": 44, "mapexit": 44}.get(gnode.kind, 18)
    return max(w + pad_w, 40.0), h + 12


def node_path(kind: str, rect: QRectF) -> QPainterPath:
    path = QPainterPath()
    x, y, w, h = rect.x(), rect.y(), rect.width(), rect.height()
    if kind == "access":
        path.addEllipse(rect)
    elif kind == "tasklet":
        c = min(h, w) * 0.3
        path.addPolygon(QPolygonF([QPointF(x + c, y), QPointF(x + w - c, y), QPointF(x + w, y + c),
                                   QPointF(x + w, y + h - c), QPointF(x + w - c, y + h),
                                   QPointF(x + c, y + h), QPointF(x, y + h - c), QPointF(x, y + c),
                                   QPointF(x + c, y)]))
    elif kind in ("mapentry", "mapexit"):
        c = min(18.0, w * 0.2)
        top, bottom = (c, 0) if kind == "mapentry" else (0, c)
        path.addPolygon(QPolygonF([QPointF(x + top, y), QPointF(x + w - top, y),
                                   QPointF(x + w - bottom, y + h), QPointF(x + bottom, y + h),
                                   QPointF(x + top, y)]))
    elif kind == "nsdfg":
        path.addRoundedRect(rect, 6, 6)
    else:
        path.addRoundedRect(rect, 3, 3)
    return path


class NodeItem(QGraphicsItem):
    def __init__(self, gnode, center):
        super().__init__()
        self.gnode = gnode
        w, h = gnode.size
        self.rect = QRectF(-w / 2, -h / 2, w, h)
        self.path = node_path(gnode.kind, self.rect)
        self.fill = QColor(default_fill(gnode))
        self.highlighted = False
        self.time_text = ""   # a group's summed measured time
        self.setPos(center[0], center[1])
        self.setFlag(QGraphicsItem.ItemIsSelectable, True)
        self.setAcceptHoverEvents(True)
        self.setZValue(2)
        self.setToolTip(self.tooltip())

    def tooltip(self, extra: str = "") -> str:
        g = self.gnode
        lines = [f"{g.title}  {g.subtitle}".strip(), g.ident]
        if g.kind == "group":
            lines.append("double-click to open; right-click for more")
        if g.operator and g.kind != "onnx":
            lines.append(f"operator {g.operator}")
        return "\n".join(lines + ([extra] if extra else []))

    def boundingRect(self):
        return self.rect.adjusted(-3, -3, 3, 3)

    def shape(self):
        return self.path

    def set_fill(self, color) -> None:
        self.fill = QColor(color) if color else QColor(default_fill(self.gnode))
        self.update()

    def set_highlighted(self, on: bool) -> None:
        if on != self.highlighted:
            self.highlighted = on
            self.update()

    def paint(self, painter, option, widget=None):
        g = self.gnode
        painter.setRenderHint(painter.Antialiasing, True)
        if self.isSelected():
            pen = QPen(SELECTED, 3)
        elif self.highlighted:
            pen = QPen(HIGHLIGHT, 3)
        else:
            pen = QPen(QColor("#333333"), 2.0 if g.kind == "access" and not g.transient else 1.0)
        if g.kind == "group" and not (self.isSelected() or self.highlighted):
            pen = QPen(QColor("#3d6aa8"), 1.5)
        painter.setPen(pen)
        painter.setBrush(QBrush(self.fill))
        if option.levelOfDetailFromTransform(painter.worldTransform()) < TEXT_LOD:
            painter.drawRect(self.rect)
            return
        painter.drawPath(self.path)
        if g.kind in ("nsdfg", "group"):
            painter.drawRoundedRect(self.rect.adjusted(3, 3, -3, -3), 4, 4)
        painter.setPen(QColor("#111111"))
        if g.kind == "group":
            fm_title, fm_sub = QFontMetricsF(title_font()), QFontMetricsF(small_font())
            y = self.rect.y() + 5
            for text, font, fm in ((g.title, title_font(), fm_title),
                                   (g.subtitle, small_font(), fm_sub),
                                   (self.time_text, small_font(), fm_sub)):
                painter.setFont(font)
                painter.drawText(QRectF(self.rect.x(), y, self.rect.width(), fm.height()),
                                 Qt.AlignHCenter | Qt.AlignVCenter, text)
                y += fm.height()
            return
        fm_title = QFontMetricsF(title_font())
        title = g.title if g.kind != "nsdfg" else ("▾ " if g.expanded else "▸ ") + g.title
        if g.subtitle:
            top = QRectF(self.rect.x(), self.rect.y() + 5, self.rect.width(), fm_title.height())
            painter.setFont(title_font())
            painter.drawText(top, Qt.AlignHCenter | Qt.AlignVCenter, title)
            painter.setFont(small_font())
            bottom = QRectF(self.rect.x(), top.bottom(), self.rect.width(),
                            self.rect.bottom() - top.bottom() - 4)
            painter.drawText(bottom, Qt.AlignHCenter | Qt.AlignVCenter, g.subtitle)
        else:
            painter.setFont(title_font())
            painter.drawText(self.rect, Qt.AlignCenter, title)


class EdgeItem(QGraphicsPathItem):
    def __init__(self, gedge, points, bezier: bool, label_pos):
        super().__init__()
        self.gedge = gedge
        self.points = [QPointF(*p) for p in points]
        path = QPainterPath(self.points[0])
        body = self.points[:-1] if bezier else self.points
        if bezier and len(body) >= 4:
            for i in range(1, len(body) - 2, 3):
                path.cubicTo(body[i], body[i + 1], body[i + 2])
            path.lineTo(self.points[-1])
        else:
            for p in self.points[1:]:
                path.lineTo(p)
        self.setPath(path)
        self.label_pos = QPointF(*label_pos) if label_pos else None
        self.show_label = True
        self.width, self.color = 1.2, QColor("#555555")
        self.highlighted = False
        self.setFlag(QGraphicsItem.ItemIsSelectable, True)
        self.setZValue(1)
        tip = gedge.label or "(empty memlet)"
        if gedge.bytes is not None:
            tip += f"\nmoves {human_bytes(gedge.bytes)}"
        self.setToolTip(tip)

    def set_style(self, width: float, color) -> None:
        self.width, self.color = width, QColor(color)
        self.prepareGeometryChange()
        self.update()

    def boundingRect(self):
        r = super().boundingRect().adjusted(-8 - self.width, -8 - self.width, 8 + self.width,
                                            8 + self.width)
        if self.label_pos is not None and self.show_label and self.gedge.label:
            fm = QFontMetricsF(small_font())
            w = fm.horizontalAdvance(self.gedge.label)
            r = r.united(QRectF(self.label_pos.x() - w / 2 - 2, self.label_pos.y() - fm.height(),
                                w + 4, fm.height() * 2))
        return r

    def shape(self):
        stroker = QPainterPathStroker()
        stroker.setWidth(max(8.0, self.width + 4))
        return stroker.createStroke(self.path())

    def paint(self, painter, option, widget=None):
        painter.setRenderHint(painter.Antialiasing, True)
        color = SELECTED if self.isSelected() else (HIGHLIGHT if self.highlighted else self.color)
        pen = QPen(color, self.width + (1.5 if self.isSelected() else 0))
        pen.setCapStyle(Qt.RoundCap)
        painter.setPen(pen)
        painter.setBrush(Qt.NoBrush)
        painter.drawPath(self.path())
        if option.levelOfDetailFromTransform(painter.worldTransform()) < TEXT_LOD:
            return
        if len(self.points) >= 2:  # arrow head at the end
            tip, before = self.points[-1], self.points[-2]
            angle = math.atan2(tip.y() - before.y(), tip.x() - before.x())
            size = 6 + self.width
            left, right = (QPointF(tip.x() - size * math.cos(angle + d),
                                   tip.y() - size * math.sin(angle + d)) for d in (-0.4, 0.4))
            painter.setBrush(QBrush(color))
            painter.setPen(QPen(color, 1))
            painter.drawPolygon(QPolygonF([tip, left, right]))
        if self.label_pos is not None and self.show_label and self.gedge.label:
            painter.setFont(small_font())
            painter.setPen(QColor("#444444"))
            fm = QFontMetricsF(small_font())
            w = fm.horizontalAdvance(self.gedge.label)
            at = QPointF(self.label_pos.x() - w / 2, self.label_pos.y() + fm.ascent() / 2)
            painter.drawText(at, self.gedge.label)


class ClusterItem(QGraphicsRectItem):
    STYLE = {"state": ("#7a8ca3", Qt.SolidLine, "#f7f9fc"),
             "map": ("#9ab3d1", Qt.DashLine, None),
             "nsdfg": ("#888888", Qt.DotLine, "#fbfbfb"),
             "scope": ("#5b7fb0", Qt.SolidLine, None)}   # an open name-scope group

    def __init__(self, gcluster, rect):
        super().__init__(QRectF(*rect))
        self.gcluster = gcluster
        color, style, fill = self.STYLE.get(gcluster.kind, ("#999999", Qt.SolidLine, None))
        self.setPen(QPen(QColor(color), 1.2, style))
        self.setBrush(QBrush(QColor(fill)) if fill else QBrush(Qt.NoBrush))
        self.setZValue(0 if gcluster.kind == "map" else -1)
        if gcluster.kind == "scope":   # over its state, an inner group over an outer one
            self.setZValue(-0.9 + 0.01 * len(gcluster.obj))
            self.setToolTip(f"/{'/'.join(gcluster.obj)}: double-click to fold into one box")

    def paint(self, painter, option, widget=None):
        super().paint(painter, option, widget)
        if self.gcluster.kind != "map":
            painter.setFont(small_font())
            painter.setPen(QColor("#4a5a70"))
            r = self.rect()
            painter.drawText(QRectF(r.x() + 6, r.y() + 2, r.width() - 12, 14),
                             Qt.AlignLeft | Qt.AlignVCenter, self.gcluster.label)
