"""Navigating a real network's graph: name-scope groups, Find, Fit, the minimap, labels, export.

Grouping is checked on real transformer exports (``zoo:bert``, two layers;
``zoo:gpt2``), and on ViT-tiny (``zoo:vit-full``, 1,397 graph nodes) when
that export has been generated. The window tests drive the graph panel
offscreen with pytest-qt.
"""
import os

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from PyQt5.QtCore import QPoint, QRectF, Qt  # noqa: E402
from PyQt5.QtGui import QColor, QFontMetricsF, QImage  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
from gui import scope_groups as sg  # noqa: E402
from gui.graph_canvas import READABLE_SCALE  # noqa: E402
from gui.graph_items import small_font  # noqa: E402
from gui.graph_model import describe  # noqa: E402
from test_gui import wait_ready, window  # noqa: E402,F401  (the window fixture)


def described(model):
    import workbench
    ws = workbench.open(model)
    desc = describe(ws.sdfg, dict(ws.operator_names()))
    scopes = sg.node_scopes(desc)
    return ws, desc, scopes, sg.build_groups(desc, scopes)


def touching_bytes(desc, keys):
    keys = set(keys)
    return sum(e.bytes or 0 for e in desc.edges
               if not e.invisible and (e.src in keys or e.dst in keys))


def layer_groups(groups):
    """Top-level groups that hold other groups: a transformer's layers."""
    return [g for g in groups.values() if g.level == 1 and g.children]


def test_scope_path_of_onnx_names():
    assert sg.scope_path("/layers/layers.0/ln_1/LayerNormalization") == \
        ("layers", "layers.0", "ln_1")
    assert sg.scope_path("/model/h.1/attn/Add_3") == ("model", "h.1", "attn")
    assert sg.scope_path("/Reshape") == ()
    assert sg.scope_path("Gemm_0") == () and sg.scope_path(None) == ()


def test_fused_names_keep_the_scope_their_parts_share():
    assert sg.expand_braces("/a/{b,c/{d,e}}") == ["/a/b", "/a/c/d", "/a/c/e"]
    assert sg.scope_path("/layer.0/attention/query/{MatMul,Add}") == \
        ("layer.0", "attention", "query")
    assert sg.scope_path("/layer.0/{intermediate/MatMul,{intermediate/Add,Div}}") == \
        ("layer.0",)
    assert sg.scope_path("/{pooler/Gemm,Tanh}") == ()


def test_layers_stay_groups_after_fusion():
    """After ``auto`` (fused nodes named ``/layer.0/{...}``) each layer is still a group
    holding its fused nodes."""
    ws, desc, _scopes, before = described("zoo:bert")
    ws.optimize("auto")
    after_desc = describe(ws.sdfg, dict(ws.operator_names()))
    after = sg.build_groups(after_desc)
    fused = [n for n in after_desc.nodes.values() if n.operator and "{" in n.operator]
    assert fused
    layers = {g.path for g in layer_groups(before)}
    assert layers and layers <= set(after)
    for path in layers:
        ops = {after_desc.nodes[k].operator for k in after[path].members}
        assert any("{" in op for op in ops if op)   # its fused nodes are inside it
    for n in fused:
        parts = sg.expand_braces(n.operator)
        scope = sg.scope_path(n.operator)
        assert all(sg.scope_path(p)[:len(scope)] == scope for p in parts)


@pytest.mark.parametrize("model, layers", [("zoo:bert", 2), ("zoo:gpt2", 1)])
def test_transformer_layers_fold_into_boxes_with_summed_bytes(model, layers):
    _ws, desc, scopes, groups = described(model)
    tops = layer_groups(groups)
    assert len(tops) >= layers, sorted(g.label for g in groups.values())
    for g in groups.values():
        # every member's scope lies inside the group, bytes are those of the memlets touching it
        assert all(scopes[k][:len(g.path)] == g.path for k in g.members)
        assert g.bytes == touching_bytes(desc, g.members) > 0
        assert sum(desc.nodes[k].kind != "access" for k in g.members) >= 2
    folded = sg.fold(desc, scopes, groups, sg.collapsed_to(groups, 1))
    boxes = {n.scope: n for n in folded.nodes.values() if n.kind == "group"}
    assert set(boxes) == {g.path for g in groups.values() if g.level == 1}
    for path, box in boxes.items():
        g = groups[path]
        assert box.bytes == g.bytes and str(len(g.members)) in box.subtitle
        assert set(box.members) == {desc.nodes[k].ident for k in g.members}
        assert not any(k in folded.nodes for k in g.members)       # folded away
        assert all(folded.hidden[desc.nodes[k].ident] == box.key for k in g.members)
    shown = set(folded.nodes)
    assert len(shown) == len(desc.nodes) - sum(len(groups[p].members) for p in boxes) + len(boxes)
    for e in folded.edges:   # no edge inside a box, every end shown
        assert e.src in shown and e.dst in shown and e.src != e.dst
    # opening a box shows its nodes (and its large child groups as boxes)
    first = sorted(boxes)[0]
    opened = sg.fold(desc, scopes, groups, sg.expand(groups, set(boxes), first))
    assert first not in {n.scope for n in opened.nodes.values() if n.kind == "group"}
    assert any(c.kind == "scope" and c.obj == first for c in opened.clusters.values())
    inner = {n.ident for n in opened.nodes.values() if n.kind != "group"}
    inner |= {i for n in opened.nodes.values() if n.kind == "group" for i in n.members}
    assert {desc.nodes[k].ident for k in groups[first].members} <= inner


@pytest.fixture
def vit_full():
    """zoo:vit-full, from the user's cache when it was generated there (the tests' own
    cache is a fresh folder: the export is linked into it, read only)."""
    from pathlib import Path

    from sdfg_models import zoo
    home = Path("~/.cache/dace-workbench/zoo-full").expanduser()
    if not zoo.get("vit-full").available() and (home / "vit.onnx").is_file() \
            and not zoo.full_folder().exists():
        zoo.full_folder().symlink_to(home, target_is_directory=True)
    if not zoo.get("vit-full").available():
        pytest.skip("zoo:vit-full is not generated (python tests/exports/make_exports.py "
                    "--full vit); the grouping is checked on zoo:bert and zoo:gpt2")
    return "zoo:vit-full"


def test_vit_full_opens_with_one_box_per_layer(vit_full):
    _ws, desc, scopes, groups = described(vit_full)
    assert len(desc.nodes) > 1000
    collapsed = sg.auto_collapsed(desc, scopes, groups)
    folded = sg.fold(desc, scopes, groups, collapsed)
    boxes = [n for n in folded.nodes.values() if n.kind == "group"]
    assert len(folded.nodes) <= sg.READABLE
    assert len(boxes) == 12 and len({len(b.members) for b in boxes}) == 1   # 12 equal layers
    assert sum(len(b.members) for b in boxes) + len(folded.nodes) - len(boxes) == len(desc.nodes)


# -- the window ------------------------------------------------------------------------------
def wait_shown(qtbot, w, timeout=120_000):
    qtbot.waitUntil(lambda: not w.ctl.runner.busy("layout") and w.graph.desc is not None
                    and w.graph._pending is None, timeout=timeout)


def group_items(w):
    return {i.gnode.scope: i for i in w.graph.node_items.values() if i.gnode.kind == "group"}


def open_folded(qtbot, w, model="zoo:bert"):
    w.open_model(model)
    wait_ready(qtbot, w)
    w.graph.collapse_to_depth(1)
    wait_shown(qtbot, w)
    return w.graph.full


def test_groups_in_the_window_open_and_fold(qtbot, window):
    w = window
    desc, _scopes, groups = open_folded(qtbot, w)
    boxes = group_items(w)
    assert set(boxes) == {p for p, g in groups.items() if g.level == 1}
    path = next(g.path for g in layer_groups(groups))
    box = boxes[path]
    assert box.gnode.title == "▸ " + path[-1] and "B" in box.gnode.subtitle   # bytes shown
    # a double-click on the box opens it: its nodes appear inside a frame
    view = w.graph.view
    view.centerOn(box)
    qtbot.mouseDClick(view.viewport(), Qt.LeftButton, pos=view.mapFromScene(box.scenePos()))
    qtbot.waitUntil(lambda: path not in group_items(w), timeout=60_000)
    wait_shown(qtbot, w)
    shown = {i.gnode.ident for i in w.graph.node_items.values()}
    shown |= {m for i in group_items(w).values() for m in i.gnode.members}
    assert {desc.nodes[k].ident for k in groups[path].members} <= shown
    frame = next(c for c in w.graph.desc.clusters.values() if c.kind == "scope" and c.obj == path)
    assert frame.label.startswith("▾ " + path[-1])
    # fold it again from the frame
    w.graph.collapse_group(path)
    qtbot.waitUntil(lambda: path in group_items(w), timeout=60_000)
    # selecting a box selects its members in the controller
    wait_shown(qtbot, w)
    group_items(w)[path].setSelected(True)
    assert set(w.ctl.selection) == {desc.nodes[k].ident for k in groups[path].members}
    # the context menu offers open, fold to a depth and export
    w.graph._context_menu(view.mapFromScene(group_items(w)[path].scenePos()))
    texts = [a.text() for a in w.graph._menu.actions()]
    w.graph._menu.close()
    assert texts[0] == f"Open {path[-1]}" and "Fold All to Depth" in texts
    assert "Export Graph as SVG…" in texts and "Export Graph as PNG…" in texts


def test_group_time_is_the_sum_of_its_operators(qtbot, window):
    from workbench.runtime.profiling import Profile
    w = window
    desc, _scopes, groups = open_folded(qtbot, w)
    path = next(g.path for g in layer_groups(groups))
    ops = sorted(groups[path].operators)
    times = {op: 0.5 + i for i, op in enumerate(ops)}
    prof = Profile(step=0, total_ms=1.0, min_ms=1.0, max_ms=1.0, samples_ms=[1.0],
                   per_operator=times)
    w.ctl.last_profile = prof
    w.graph.apply_overlays()
    item = group_items(w)[path]
    assert item.time_text == f"measured {sum(times.values()):.3f} ms"
    assert item.fill != QColor("#e3ecf8")   # coloured by its time


def test_find_lists_every_hit_and_steps_through_them(qtbot, window):
    from workbench.ops.node import OnnxOp
    w = window
    desc, _scopes, _groups = open_folded(qtbot, w)
    matmuls = [n.onnx_name for n, _ in w.ctl.ws.sdfg.all_nodes_recursive()
               if isinstance(n, OnnxOp) and n.op_type == "MatMul"]
    assert len(matmuls) > 3
    assert all(i.gnode.kind == "group" for i in w.graph.node_items.values()
               if i.gnode.title == "MatMul") and not any(
        i.gnode.title == "MatMul" for i in w.graph.node_items.values())   # all folded away
    assert w.graph.find_node("MatMul")
    bar = w.graph.find_bar
    assert len(bar.hits) == len(matmuls) and bar.results.count() == len(matmuls)
    assert bar.results.isVisibleTo(w.graph)

    def selected_op():
        wait_shown(qtbot, w)
        return [i.gnode.subtitle for i in w.graph.scene.selectedItems()]

    order = [desc.nodes[desc.by_ident[ident]].subtitle for ident, _ in bar.hits]
    assert sorted(order) == sorted(matmuls)
    assert selected_op() == [order[0]]          # the group holding it was opened
    assert bar.count.text() == f"1/{len(order)}"
    w.activateWindow()
    qtbot.keyClick(w.graph.view, Qt.Key_F3)
    assert selected_op() == [order[1]] and bar.count.text() == f"2/{len(order)}"
    bar.next_button.click()
    assert selected_op() == [order[2]]
    qtbot.keyClick(w.graph.view, Qt.Key_F3, Qt.ShiftModifier)
    assert selected_op() == [order[1]]
    bar.results.setCurrentRow(len(order) - 1)   # a row of the list
    assert selected_op() == [order[-1]]
    bar.next_button.click()                     # wraps around
    assert selected_op() == [order[0]]
    assert not w.graph.find_node("no-such-node-anywhere") and bar.count.text() == "no match"
    # an array's hit says where it sits
    array = next(k for k, n in desc.nodes.items() if n.kind == "access" and _scopes[k])
    assert w.graph.find_node(desc.nodes[array].title)
    row = next(text for ident, text in bar.hits if ident == desc.nodes[array].ident)
    assert row.endswith("in /" + "/".join(_scopes[array]))


def test_fit_minimap_labels_and_export(qtbot, window, tmp_path):
    w = window
    w.open_model("zoo:bert")
    wait_ready(qtbot, w)
    wait_shown(qtbot, w)
    view, mini = w.graph.view, w.graph.view.minimap
    # Fit with a selection: the selection, at a readable scale
    item = next(i for i in w.graph.node_items.values() if i.gnode.kind == "onnx")
    w.graph.scene.clearSelection()
    item.setSelected(True)
    view.fit()
    visible = view.mapToScene(view.viewport().rect()).boundingRect()
    assert visible.contains(item.sceneBoundingRect())
    assert READABLE_SCALE <= view.transform().m11() <= 1.0
    # Fit without: never below the readable scale
    w.graph.scene.clearSelection()
    view.fit()
    assert view.transform().m11() >= READABLE_SCALE - 1e-9
    # the minimap shows the layout and follows the view
    assert mini.isVisible() and mini.nodes and mini.lines
    before = mini.frame()
    view.centerOn(w.graph.scene.sceneRect().bottomRight())
    assert mini.frame() != before
    target = QPoint(mini.width() // 2, mini.height() // 2)
    qtbot.mouseClick(mini, Qt.LeftButton, pos=target)
    assert mini.frame().contains(QRectF(target.x() - 1, target.y() - 1, 2, 2))
    # memlet labels drawn do not overlap each other
    fm = QFontMetricsF(small_font())
    rects = []
    for e in w.graph.edge_items.values():
        if e.show_label and e.gedge.label and e.label_pos is not None:
            wd = fm.horizontalAdvance(e.gedge.label)
            rects.append(QRectF(e.label_pos.x() - wd / 2, e.label_pos.y() - fm.height() / 2,
                                wd, fm.height()))
    assert len(rects) > 10
    assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1:])
    hidden = len(w.graph.placement.hidden_labels)
    assert w.graph.labels.isEnabled()
    assert (f"({len(rects)}/" in w.graph.labels.text()) == (hidden > 0)
    # export: real files with the graph in them
    svg, png = tmp_path / "g.svg", tmp_path / "g.png"
    w.graph.export(str(svg))
    w.graph.export(str(png))
    text = svg.read_text()
    assert "<svg" in text and item.gnode.title in text and text.count("<path") > 50
    image = QImage(str(png))
    assert image.width() > 300 and image.height() > 300
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7)
               for y in range(0, image.height(), 7)}
    assert len(colours) > 10


def test_memlets_box_says_when_labels_are_not_drawn(qtbot, window, tmp_path):
    import onnx
    from fault_helpers import chain_model_with_nodes
    from gui import layout
    w = window
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model_with_nodes(500), str(path))
    w.open_model(str(path))
    wait_ready(qtbot, w, timeout=300_000)
    wait_shown(qtbot, w)
    assert len(w.graph.full[0].nodes) > layout.LARGE_GRAPH
    # opened folded (100 flat blocks: one box each, the shallowest there is)
    assert len(group_items(w)) == 100 and len(w.graph.node_items) < len(w.graph.full[0].nodes) / 4
    assert w.graph.labels.isEnabled()
    w.graph.set_collapsed(set())                # everything open: too large for labels
    qtbot.waitUntil(lambda: len(w.graph.node_items) > layout.LARGE_GRAPH, timeout=300_000)
    wait_shown(qtbot, w)
    box = w.graph.labels
    assert not box.isEnabled() and "off above" in box.text() and "Fold groups" in box.toolTip()
    assert not any(e.show_label for e in w.graph.edge_items.values())


def test_vit_full_in_the_window(qtbot, window, vit_full):
    w = window
    w.open_model(vit_full)
    qtbot.waitUntil(lambda: w.graph.desc is not None and not w.ctl.runner.busy("layout"),
                    timeout=300_000)
    boxes = group_items(w)
    assert len(boxes) == 12 and len(w.graph.node_items) <= sg.READABLE
    assert w.graph.view.transform().m11() >= READABLE_SCALE - 1e-9
    visible = w.graph.view.mapToScene(w.graph.view.viewport().rect()).boundingRect()
    assert any(visible.contains(i.sceneBoundingRect()) for i in w.graph.node_items.values())


def test_folding_right_after_a_step_still_shows_the_new_graph(qtbot, window):
    """A fold asked for while the changed SDFG is being described does not reuse the
    old description (a newer layout replaces an unfinished one)."""
    w = window
    open_folded(qtbot, w)
    with w.ctl.lock:
        match = next(m for m in w.ctl.ws.transformations(predict=False)
                     if m.transformation == "ExpandToMaps" and "MatMul" in m.description)
    folds = []

    def fold_now():
        folds.append(w.graph._describing)   # the panel's describe is under way
        w.graph.collapse_to_depth(1)
    w.ctl.changed.connect(fold_now)   # after the panel's own refresh (connected first)
    position = w.ctl.ws.position
    w.ctl.apply(match)
    qtbot.waitUntil(lambda: bool(folds), timeout=120_000)
    w.ctl.changed.disconnect(fold_now)
    assert w.ctl.ws.position == position + 1 and folds == [True]
    with w.ctl.lock:
        now = describe(w.ctl.ws.sdfg, dict(w.ctl.ws.operator_names()))
    assert any(n.kind == "library" for n in now.nodes.values())   # the step changed the graph
    signature = lambda d: sorted((n.kind, n.title, n.subtitle) for n in d.nodes.values())  # noqa
    qtbot.waitUntil(lambda: w.graph.full is not None and not w.graph._describing
                    and signature(w.graph.full[0]) == signature(now), timeout=120_000)
    wait_shown(qtbot, w)
    assert set(group_items(w)) == {p for p, g in w.graph.full[2].items() if g.level == 1}
