"""The window's sizes box and its symbolic shapes (issue 30, items 2 and 6).

A symbolic program (here the bundled MLP with a symbolic batch, reopened from
its session folder as File › Open Session Folder does) gets one spin box per
symbol beside the overlays; a program of one size gets none. A size typed into
the box (Enter) takes every figure again at it: the bytes moved the profile
panel and the properties show, the graph's edge bytes, the transformations'
predicted bytes, the compare window's. A refused size is shown as an error and the
window goes on.
Shapes read with the model's dim names (``[1, sequence]``, not ``sequence_``).
"""
import os

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"   # never flash windows on a desktop
pytest.importorskip("pytestqt")

from PyQt5.QtCore import QSettings, Qt  # noqa: E402

from gui.qtapp import ensure_app  # noqa: E402

ensure_app()
import workbench  # noqa: E402
from gui.graph_model import human_bytes  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from test_symbolic import _symbolic_batch  # noqa: E402


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    w.ctl.verify_steps = False   # what is tested here is the figures, not the checks
    qtbot.addWidget(w)
    w.show()
    yield w
    w.ctl.shutdown(timeout_ms=300_000)


def wait_ready(qtbot, w, timeout=300_000):
    qtbot.waitUntil(lambda: w.ctl.ws is not None and w.ctl.runner.idle()
                    and w.graph.desc is not None and w.ctl.matches_state == "done"
                    and w.ctl.analysis is not None, timeout=timeout)


def open_symbolic_mlp(qtbot, w, tmp_path, batch=4):
    ws = workbench.open(_symbolic_batch("mlp", tmp_path / "m.onnx"), symbolic=["batch"],
                        input_shapes={"batch": batch})
    ws.save(tmp_path / "session")
    w.open_session(tmp_path / "session")
    wait_ready(qtbot, w)


def rows(w) -> dict:
    return dict(w.properties.rows())


def input_edge_bytes(w):
    """The bytes the graph shows on the edge out of the input array."""
    desc = w.graph.desc
    key = next(k for k, n in desc.nodes.items() if n.kind == "access" and n.title == "input")
    return next(e.bytes for e in desc.edges if e.src == key)


def test_the_box_shows_for_a_symbolic_program_only(qtbot, window, tmp_path):
    w = window
    w.open_model("mlp")
    wait_ready(qtbot, w)
    assert w.ctl.ws.symbols == {} and w.graph.sizes.spins == {}
    assert not w.graph.sizes.isVisible()
    open_symbolic_mlp(qtbot, w, tmp_path)
    box = w.graph.sizes
    assert box.isVisible() and list(box.spins) == ["batch"]
    spin = box.spins["batch"]
    assert spin.isVisible() and spin.value() == 4
    assert (spin.minimum(), spin.maximum()) == (1, 1_000_000)
    labels = [box.row.itemAt(i).widget() for i in range(box.row.count())]
    assert any(getattr(x, "buddy", lambda: None)() is spin and x.text() == "batch"
               for x in labels)
    assert "batch=4" in box.toolTip()
    # and back to a program of one size: no box
    w.open_model("mlp")
    qtbot.waitUntil(lambda: w.ctl.ws is not None and w.ctl.ws.symbols == {}, timeout=120_000)
    wait_ready(qtbot, w)
    assert not w.graph.sizes.isVisible() and w.graph.sizes.spins == {}


def test_a_size_typed_in_the_box_takes_every_figure_again(qtbot, window, tmp_path):
    w = window
    open_symbolic_mlp(qtbot, w, tmp_path)
    ws = w.ctl.ws
    before = ws.data_movement().moved_bytes
    assert rows(w)["bytes moved"] == human_bytes(before)
    assert rows(w)["figures at sizes"] == "batch=4"
    assert w.profile.movement.text().startswith(f"At batch=4: Bytes moved {human_bytes(before)}")
    assert input_edge_bytes(w) == 4 * 784 * 4
    w.compare(0, 0)   # the compare window's figures follow the sizes too
    qtbot.waitUntil(lambda: w.compare_window.diff is not None, timeout=120_000)
    assert w.compare_window.diff.bytes_after == before
    spin = w.graph.sizes.spins["batch"]
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, "64")
    assert ws.symbols == {"batch": 4}   # not per keystroke
    qtbot.keyClick(spin, Qt.Key_Return)
    qtbot.waitUntil(lambda: ws.symbols == {"batch": 64}, timeout=120_000)
    qtbot.waitUntil(lambda: rows(w).get("figures at sizes") == "batch=64", timeout=120_000)
    wait_ready(qtbot, w)
    with w.ctl.lock:
        after = ws.data_movement().moved_bytes
        predicted = {(m.transformation, m.where): m.delta_bytes for m in ws.transformations()}
    assert after > before
    qtbot.waitUntil(lambda: rows(w)["bytes moved"] == human_bytes(after), timeout=60_000)
    assert w.profile.movement.text().startswith(f"At batch=64: Bytes moved {human_bytes(after)}")
    assert w.ctl.analysis[0].moved_bytes == after
    assert input_edge_bytes(w) == 64 * 784 * 4
    qtbot.waitUntil(lambda: w.compare_window.diff is not None
                    and w.compare_window.diff.bytes_after == after, timeout=120_000)
    shown = {(m.transformation, m.where): m.delta_bytes
             for ms in w.transforms.matches_by_level.values() for m in ms}
    assert shown == predicted and any(shown.values())
    assert "batch=64" in w.graph.sizes.toolTip() and spin.value() == 64
    # a size the session refuses: an error shown, the box back at the sizes in use, the
    # window alive (the box itself stops at 1)
    spin.setValue(7)   # what the box holds when the refusal comes
    w.ctl.set_sizes({"batch": 0})
    qtbot.waitUntil(lambda: w.last_error is not None and w.ctl.runner.idle(), timeout=60_000)
    assert w.last_error[0] == "Setting the sizes failed"
    assert "whole number of at least 1" in w.last_error[1]
    assert ws.symbols == {"batch": 64} and spin.value() == 64
    assert rows(w)["bytes moved"] == human_bytes(after)


def test_shapes_read_with_the_dims_names(qtbot, window):
    w = window
    ws = workbench.open("zoo:bert", symbolic=["sequence"],
                        input_shapes={"batch": 1, "sequence": 16})
    assert "sequence_" in {str(s) for s in ws.sdfg.symbols}   # the SDFG's own name
    w.ctl.set_session(ws)   # as the screenshot command shows a session it opened
    wait_ready(qtbot, w)
    model = rows(w)
    inputs = [v for k, v in model.items() if k.startswith("input ")]
    assert inputs and all(v.endswith("[1, sequence]") for v in inputs), inputs
    assert model["figures at sizes"] == "sequence=16"
    assert list(w.graph.sizes.spins) == ["sequence"]
    nodes = [n for n in w.graph.full[0].nodes.values() if n.kind == "access"]
    shaped = [n for n in nodes if "sequence" in n.subtitle]
    assert shaped and not any("sequence_" in n.subtitle for n in nodes)
    node = next(n for n in shaped if n.subtitle.startswith("[1, sequence, "))
    w.graph.go_to(node.ident)
    qtbot.waitUntil(lambda: w.graph.desc is not None and node.ident in w.graph.desc.by_ident,
                    timeout=120_000)
    shown = w.graph.desc.nodes[w.graph.desc.by_ident[node.ident]]
    w.ctl.set_selection([node.ident], shown)
    props = rows(w)
    assert props["shape"] == node.subtitle and "sequence_" not in props["shape"]
    assert props["size"].endswith(")") and "at sequence=16 (" in props["size"]
    assert "sequence_" not in props["size"]


def test_a_model_opened_with_symbolic_dims_gets_the_box(qtbot, window, tmp_path):
    """``gui MODEL --symbolic batch --shape batch=3`` opens the model this way."""
    w = window
    path = _symbolic_batch("mlp", tmp_path / "m.onnx")
    w.open_model(path, {"symbolic": ["batch"], "input_shapes": {"batch": [3]}})
    wait_ready(qtbot, w)
    assert w.ctl.ws.symbols == {"batch": 3}
    assert w.graph.sizes.isVisible() and w.graph.sizes.spins["batch"].value() == 3
    assert rows(w)["figures at sizes"] == "batch=3"
