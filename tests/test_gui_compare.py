"""Before and after, side by side: the diff of two history points and the compare window.

The diff (``gui.graph_diff``) is checked on hand-made graphs: plain node
facts, and small SDFGs built here. The window is driven offscreen with
pytest-qt on ``bert-layer`` (a transformer block) after two fusion steps:
the fused nodes are coloured, the byte delta is the session's own, and the
two panes move together; and on ``mlp`` profiled before and after a fusion,
for the time deltas.
"""
import os

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

import dace  # noqa: E402
from PyQt5.QtCore import Qt  # noqa: E402
from PyQt5.QtGui import QColor, QImage  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
from gui import graph_diff as gd  # noqa: E402
from gui.compare_view import COLOURS, signed_bytes  # noqa: E402
from gui.graph_items import FILL  # noqa: E402
from gui.graph_model import describe  # noqa: E402
from test_gui import wait_ready, window  # noqa: E402,F401  (the window fixture)


# -- the diff, on hand-made graphs ------------------------------------------------------
def facts(ident, operator=None, **kw):
    return gd.NodeFacts(ident, ident, operator, **kw)


def test_diff_sorts_nodes_into_added_removed_changed():
    before = {"a": facts("a", "A", op_type="MatMul"), "b": facts("b", "B", op_type="Add"),
              "x": facts("x", inputs=frozenset({("a", "")})),
              "k": facts("k", "K", op_type="Relu", implementation="pure"),
              "s": facts("s", "S", op_type="Softmax")}
    after = {"f": facts("f", "F", op_type="Gemm"),
             "x": facts("x", inputs=frozenset({("f", "")})),
             "k": facts("k", "K", op_type="Relu", implementation="blas"),
             "s": facts("s", "S", op_type="Softmax")}
    moved_before = {"A": 1000, "B": 400, "K": 50, "S": 70}
    moved_after = {"F": 1100, "K": 30, "S": 70}
    d = gd.diff(before, after, moved_before, moved_after)
    assert {c.ident for c in d.of(gd.ADDED)} == {"f"}
    assert {c.ident for c in d.of(gd.REMOVED)} == {"a", "b"}
    assert {c.ident: c.reasons for c in d.of(gd.CHANGED)} == {"x": ("inputs",),
                                                              "k": ("implementation",)}
    assert "s" not in d.changes   # the same at both points
    assert d.changes["f"].byte_delta == 1100 and d.changes["a"].byte_delta == -1000
    assert d.changes["k"].byte_delta == -20 and d.changes["x"].byte_delta == 0
    assert d.bytes_before == 1520 and d.bytes_after == 1200 and d.byte_delta == -320
    assert d.operator_bytes == {"A": -1000, "B": -400, "F": 1100, "K": -20}
    assert sum(d.operator_bytes.values()) == d.byte_delta
    assert d.counts() == {gd.ADDED: 1, gd.REMOVED: 2, gd.CHANGED: 2}
    # no profile on a side: no time deltas anywhere
    assert not d.timed and d.ms_delta is None and d.changes["k"].ms_delta is None


def test_time_deltas_only_when_both_points_were_profiled():
    before, after = {"k": facts("k", "K", op_type="Relu")}, {"k": facts("k", "K", op_type="Elu")}
    one = gd.diff(before, after, {"K": 8}, {"K": 8}, {"K": 2.0}, None, total_ms=(5.0, None))
    assert not one.timed and one.changes["k"].ms_delta is None
    both = gd.diff(before, after, {"K": 8}, {"K": 8}, {"K": 2.0}, {"K": 1.5},
                   total_ms=(5.0, 4.0))
    assert both.timed and both.ms_delta == pytest.approx(-1.0)
    assert both.changes["k"].ms_delta == pytest.approx(-0.5)
    assert both.changes["k"].reasons == ("op type",)


def _chain(code: str, extra_output: bool = False):
    """x -> tasklet (``code``) -> y, optionally also -> z: a hand-made SDFG."""
    sdfg = dace.SDFG("chain")
    sdfg.add_array("x", [8], dace.float32)
    sdfg.add_array("y", [8], dace.float32)
    state = sdfg.add_state("main")
    x, y = state.add_read("x"), state.add_write("y")
    t = state.add_tasklet("t", {"a"}, {"b"}, code)
    state.add_edge(x, None, t, "a", dace.Memlet("x[0:8]"))
    state.add_edge(t, "b", y, None, dace.Memlet("y[0:8]"))
    if extra_output:
        sdfg.add_array("z", [8], dace.float32)
        t2 = state.add_tasklet("t2", {"a"}, {"b"}, "b = a")
        state.add_edge(state.add_read("y"), None, t2, "a", dace.Memlet("y[0:8]"))
        state.add_edge(t2, "b", state.add_write("z"), None, dace.Memlet("z[0:8]"))
    return sdfg


def test_node_facts_of_real_sdfgs_see_code_and_new_nodes():
    base = gd.node_facts(describe(_chain("b = a * 2")))
    same = gd.node_facts(describe(_chain("b = a * 2")))
    assert gd.diff(base, same).changes == {}   # identities are stable, GUIDs do not count
    recoded = gd.diff(base, gd.node_facts(describe(_chain("b = a + 1"))))
    assert [(c.label, c.reasons) for c in recoded.changes.values()] == [("t", ("attributes",))]
    grown = gd.diff(base, gd.node_facts(describe(_chain("b = a * 2", extra_output=True))))
    added = sorted(c.label.split()[0] for c in grown.of(gd.ADDED))
    assert added == ["t2", "y", "z"]     # the second read of y is a node of its own
    assert not grown.of(gd.REMOVED) and not grown.of(gd.CHANGED)


def test_a_folded_side_keeps_every_change_in_view(monkeypatch):
    """A graph large enough to fold by name scope folds the groups without a change and
    opens those holding one (bert-layer, folded here from 20 nodes up)."""
    import workbench
    from gui import scope_groups
    from gui.compare_view import laid_out
    monkeypatch.setattr(scope_groups, "AUTO_FOLD", 20)
    ws = workbench.open("bert-layer")
    ws.apply(next(m for m in ws.transformations(level="fusion", predict=False)
                  if m.transformation == "GemmEpilogueFusion"))
    before, after, d = gd.compare_steps(ws, 0, 1)
    for desc, hidden_status in ((before, gd.ADDED), (after, gd.REMOVED)):
        shown, placement = laid_out(desc, set(d.changes))
        assert any(n.kind == "group" for n in shown.nodes.values())     # folded elsewhere
        wanted = [c.ident for c in d.changes.values() if c.status != hidden_status]
        assert wanted and all(i in shown.by_ident and i not in shown.hidden for i in wanted)
        assert set(placement.nodes) == set(shown.nodes)


# -- the window, on a transformer block ---------------------------------------------------------
def _apply(qtbot, w, name):
    ctl = w.ctl
    with ctl.lock:
        match = next(m for m in ctl.ws.transformations(level="fusion", predict=False)
                     if m.transformation == name)
    position = ctl.ws.position
    ctl.apply(match)
    qtbot.waitUntil(lambda: ctl.ws.position == position + 1, timeout=60_000)
    wait_ready(qtbot, w)


def _menu_action(menu, text):
    return next(a for a in menu.actions() if a.text() == text)


def _fill(item):
    return item.fill.name()


def test_compare_shows_a_fusion_step_on_bert(qtbot, window, tmp_path):
    w = window
    w.open_model("bert-layer")
    wait_ready(qtbot, w)
    _apply(qtbot, w, "OnePassSoftmax")
    _apply(qtbot, w, "GemmEpilogueFusion")
    ws = w.ctl.ws
    assert ws.position == 2

    # History › right-click step 2 › Compare with previous step
    _menu_action(w.history.menu_for(2), "Compare with previous step").trigger()
    cw = w.compare_window
    qtbot.waitUntil(lambda: cw.points == (1, 2), timeout=60_000)
    assert cw.isVisible()
    d = cw.diff
    entry = ws.steps[1]
    fused_op = next(c.operator for c in d.of(gd.ADDED) if c.operator and "{" in c.operator)
    parts = [p for p in ("MatMul", "Add") if p in fused_op]
    assert parts == ["MatMul", "Add"]
    removed_ops = {c.operator for c in d.of(gd.REMOVED) if c.operator}
    originals = {fused_op.replace("{MatMul,Add}", p) for p in parts}
    assert originals <= removed_ops       # the fused operators are gone ...
    assert any(c.status == gd.REMOVED and c.label.split()[0].endswith("MatMul_output_0")
               for c in d.changes.values())   # ... with the array between them
    assert not any("Softmax" in (c.operator or "") for c in d.changes.values())  # step 1's

    # the byte delta is the session's own figure for the step, and each node's is its operator's
    with w.ctl.lock:
        moved = [ws.data_movement(gd.step_sdfg(ws, p)) for p in (1, 2)]
    assert d.byte_delta == entry["bytes_after"] - entry["bytes_before"] != 0
    assert d.byte_delta == moved[1].moved_bytes - moved[0].moved_bytes
    assert sum(d.operator_bytes.values()) == d.byte_delta
    fused = next(c for c in d.of(gd.ADDED) if c.operator == fused_op)
    assert fused.byte_delta == moved[1].per_operator[fused_op]
    for op in originals:
        c = next(c for c in d.of(gd.REMOVED) if c.operator == op)
        assert c.byte_delta == -moved[0].per_operator[op]
    assert signed_bytes(d.byte_delta) in cw.after.heading.text()
    assert "time deltas: none" in cw.summary.text()   # neither step was profiled

    # coloured: added in the second pane, removed in the first, changed in both
    assert _fill(cw.after.node_items[fused.ident]) == QColor(COLOURS[gd.ADDED]).name()
    for c in d.of(gd.REMOVED):
        assert _fill(cw.before.node_items[c.ident]) == QColor(COLOURS[gd.REMOVED]).name()
        assert c.ident not in cw.after.node_items
    assert d.of(gd.CHANGED)
    for c in d.of(gd.CHANGED):
        for pane in (cw.before, cw.after):
            assert _fill(pane.node_items[c.ident]) == QColor(COLOURS[gd.CHANGED]).name()
    same = [item for i, item in cw.after.node_items.items() if i not in d.changes]
    assert same and all(_fill(item) == QColor(FILL[item.gnode.kind]).name() for item in same)
    rows = [cw.changes.topLevelItem(i).text(0) for i in range(cw.changes.topLevelItemCount())]
    assert sorted(rows) == sorted(c.status for c in d.changes.values())

    # the picture shows both panes with their colours
    shot = tmp_path / "compare_bert_fusion.png"
    cw.grab().save(str(shot), "PNG")
    image = QImage(str(shot))
    half = image.width() // 2
    colours = {}
    for x in range(0, image.width(), 2):
        for y in range(0, image.height(), 2):
            colours.setdefault(image.pixelColor(x, y).name(), set()).add(x < half)
    assert True in colours.get(QColor(COLOURS[gd.REMOVED]).name(), set())     # left pane
    assert False in colours.get(QColor(COLOURS[gd.ADDED]).name(), set())      # right pane

    # View › Compare with Imported Model: the import against the current step
    view_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&View")
    _menu_action(view_menu, "&Compare with Imported Model…").trigger()
    qtbot.waitUntil(lambda: cw.points == (0, 2), timeout=60_000)
    both = cw.diff
    assert both.byte_delta == ws.steps[1]["bytes_after"] - ws.steps[0]["bytes_before"]
    softmax = [c for c in both.changes.values() if (c.operator or "").endswith("Softmax")]
    assert [(c.status, c.reasons) for c in softmax] == [(gd.CHANGED, ("implementation",))]
    assert fused.ident in {c.ident for c in both.of(gd.ADDED)}
    _menu_action(w.history.menu_for(1), "Compare with imported model").trigger()
    qtbot.waitUntil(lambda: cw.points == (0, 1), timeout=60_000)
    assert not any(c.operator == fused_op for c in cw.diff.changes.values())


def test_compare_panes_move_together(qtbot, window):
    w = window
    w.open_model("bert-layer")
    wait_ready(qtbot, w)
    _apply(qtbot, w, "GemmEpilogueFusion")
    w.compare()
    cw = w.compare_window
    qtbot.waitUntil(lambda: cw.points == (0, 1), timeout=60_000)
    before, after = cw.before, cw.after

    # zoom one: the other takes the same scale
    before.view.zoom(1.5)
    assert after.view.transform().m11() == pytest.approx(before.view.transform().m11())
    after.view.zoom(0.8)
    assert before.view.transform().m11() == pytest.approx(after.view.transform().m11())

    # scroll one onto a node both show: the other puts that node (or the shared node next
    # to it, the anchor) at the same place in its view
    shared = [i for i in before.node_items if i in after.node_items and i not in cw.diff.changes]
    # (the one nearest the middle: near an edge the view stops at the scroll limit)
    mid = before.scene.sceneRect().center()
    middle = min(shared, key=lambda i: (before.node_items[i].pos() - mid).manhattanLength())
    start = after.view.center()
    before.view.centerOn(before.node_items[middle])
    tol = 2.5 / before.view.transform().m11()   # scroll bars move in whole pixels
    # on a loaded machine the view settles after more than a few milliseconds
    qtbot.waitUntil(lambda: (before.view.center() - before.node_items[middle].pos())
                    .manhattanLength() < 2 * tol, timeout=5_000)
    here = before.view.center()
    assert (here - before.node_items[middle].pos()).manhattanLength() < 2 * tol
    anchor = cw._anchor
    assert anchor in shared and (before.node_items[anchor].pos() - here).manhattanLength() < 150
    want = after.node_items[anchor].pos() + (here - before.node_items[anchor].pos())
    got = after.view.center()
    assert abs(got.x() - want.x()) < tol and abs(got.y() - want.y()) < tol
    assert (got - start).manhattanLength() > 100   # it did move
    # and back, from the other side, with the scroll bar itself
    bar = after.view.verticalScrollBar()
    bar.setValue(bar.minimum())
    qtbot.wait(10)
    anchor, here = cw._anchor, after.view.center()
    want = before.node_items[anchor].pos() + (here - after.node_items[anchor].pos())
    got = before.view.center()   # (sideways it may stop at the scroll limit)
    assert abs(got.y() - want.y()) < tol
    assert got.y() < before.node_items[middle].pos().y() - 100   # it went up too

    # undo keeps the steps compared (redo can bring them back); a new step replaces
    # step 1, and the stale comparison goes off the screen
    w.ctl.undo()
    qtbot.waitUntil(lambda: w.ctl.ws.position == 0, timeout=60_000)
    wait_ready(qtbot, w)
    assert cw.points == (0, 1) and cw.before.node_items
    _apply(qtbot, w, "OnePassSoftmax")
    assert cw.points is None and not cw.after.node_items
    assert "history changed" in cw.summary.text()
    assert cw.second.count() == 2 and "OnePassSoftmax" in cw.second.itemText(1)


def test_time_deltas_when_both_points_were_profiled(qtbot, window):
    """mlp profiled before and after fusing its first GEMM with its ReLU: each side says
    its time, and each change its operator's measured time delta."""
    from gui.profile_names import node_times
    w, ctl = window, window.ctl
    ctl.profile_repeat, ctl.profile_warmup = 3, 1
    w.open_model("mlp")
    wait_ready(qtbot, w)
    ws = ctl.ws
    ctl.profile()
    qtbot.waitUntil(lambda: len(ws.profiles) == 1, timeout=240_000)
    _apply(qtbot, w, "GemmEpilogueFusion")
    ctl.profile()
    qtbot.waitUntil(lambda: len(ws.profiles) == 2, timeout=240_000)
    wait_ready(qtbot, w)
    assert [p.step for p in ws.profiles] == [0, 1]
    _menu_action(w.history.menu_for(1), "Compare with previous step").trigger()
    cw = w.compare_window
    qtbot.waitUntil(lambda: cw.points == (0, 1), timeout=60_000)
    d = cw.diff
    assert d.timed
    assert (d.ms_before, d.ms_after) == (ws.profiles[0].total_ms, ws.profiles[1].total_ms)
    names = dict(ws.operator_names())
    with ctl.lock:
        times = [node_times(ws.profiles[p], gd.step_sdfg(ws, p), names)[0] for p in (0, 1)]
    fused = next(c for c in d.of(gd.ADDED) if c.operator and "{" in c.operator)
    assert fused.ms_before is None and fused.ms_after == times[1][fused.operator] > 0
    assert fused.ms_delta == fused.ms_after
    gemm = next(c for c in d.of(gd.REMOVED) if c.operator == "/fc1/Gemm")
    assert gemm.ms_before == times[0]["/fc1/Gemm"] > 0 and gemm.ms_delta == -gemm.ms_before
    assert "time deltas: none" not in cw.summary.text()
    assert f"{d.ms_after:.3f} ms" in cw.after.heading.text()
    row = next(cw.changes.topLevelItem(i) for i in range(cw.changes.topLevelItemCount())
               if cw.changes.topLevelItem(i).data(0, Qt.UserRole) == fused.ident)
    assert row.text(3) == f"+{fused.ms_delta:.3f} ms"


def test_compare_shows_a_fusion_step_on_a_bert_export(qtbot, window, tmp_path, monkeypatch):
    """The same on a real transformer export (HuggingFace BERT, tests/exports/bert.onnx,
    folded by name scope): fusing layer 0's attention output projection with its bias Add
    shows the fused node added in the right pane, the MatMul and Add removed in the left,
    each pane's changes opened out of their folded layers (two layers fold at the size of
    a deep model's). ``WORKBENCH_DOCS_SHOTS`` names a folder to keep the picture in
    (docs/compare_bert_export_fusion.png was taken so)."""
    from gui import scope_groups
    monkeypatch.setattr(scope_groups, "AUTO_FOLD", 100)
    w = window
    w.open_model("zoo:bert")
    wait_ready(qtbot, w)
    ctl = w.ctl
    with ctl.lock:
        match = next(m for m in ctl.ws.transformations(level="fusion", predict=False)
                     if m.transformation == "GemmEpilogueFusion"
                     and "/layer.0/attention_output/" in m.description)
    ctl.apply(match)
    qtbot.waitUntil(lambda: ctl.ws.position == 1, timeout=120_000)
    wait_ready(qtbot, w)
    ws = ctl.ws
    _menu_action(w.history.menu_for(1), "Compare with previous step").trigger()
    cw = w.compare_window
    qtbot.waitUntil(lambda: cw.points == (0, 1), timeout=120_000)
    d = cw.diff
    fused = next(c for c in d.of(gd.ADDED) if c.operator and "{MatMul,Add}" in c.operator)
    assert fused.operator.startswith("/layer.0/attention_output/")
    originals = {fused.operator.replace("{MatMul,Add}", p) for p in ("MatMul", "Add")}
    assert originals <= {c.operator for c in d.of(gd.REMOVED)}
    assert d.byte_delta == ws.steps[0]["bytes_after"] - ws.steps[0]["bytes_before"] < 0
    assert sum(d.operator_bytes.values()) == d.byte_delta
    # every change is drawn (its layer opened around it), in its colour
    assert _fill(cw.after.node_items[fused.ident]) == QColor(COLOURS[gd.ADDED]).name()
    for c in d.of(gd.REMOVED):
        assert _fill(cw.before.node_items[c.ident]) == QColor(COLOURS[gd.REMOVED]).name()
    groups = [i for i in cw.after.node_items.values() if i.gnode.kind == "group"]
    assert groups, "the export's other layers stay folded"
    assert all("layer.0/attention_output" not in g.gnode.ident for g in groups)
    folder = os.environ.get("WORKBENCH_DOCS_SHOTS")
    shot = (tmp_path if not folder else __import__("pathlib").Path(folder)) \
        / "compare_bert_export_fusion.png"
    cw.grab().save(str(shot), "PNG")
    assert QImage(str(shot)).width() > 400
