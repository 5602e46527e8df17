"""Refusals that say why: a transformation that does not apply to a node names the fact
that stopped it (``transformation_api.refusals``, ``workbench.session.refusals``), and
the transformation panel lists them, folded, for a selection."""
import os

import pytest

import workbench
from workbench import nodeid
from workbench import transformation_api as transform
from workbench.analysis import onnx_nodes
from workbench.session.refusals import Refused, refusals

MODELS = ("mlp", "bert-layer", "resblock", "mbconv")


@pytest.fixture(scope="module")
def sessions():
    return {name: workbench.open(name) for name in MODELS}


def reason(ws, name, node) -> str:
    """The one reason ``name`` gives for the operator ``node`` (an ONNX name)."""
    found = [r for r in refusals(ws, [node]) if r.transformation == name]
    assert len(found) == 1, f"{name} on {node}: {found}"
    assert found[0].node == nodeid.selection(ws.sdfg, [node]).pop()
    return found[0].reason


# (model, transformation, operator, words the reason must hold): each names the array
# or the operator and the fact, as a person would say it
EXPECTED = [
    ("mlp", "GemmEpilogueFusion", "/fc3/Gemm", ["its output 'output' is a graph output"]),
    ("mbconv", "ConvEpilogueFusion", "/conv_pw/Conv",
     ["its output 'conv_pw_Conv_output_0' is read by 2 nodes"]),
    ("mbconv", "ElementwiseChainFusion", "/se/gate/Sigmoid",
     ["shapes differ", "/se/Mul writes [1,240,28,28]", "'se_gate_Sigmoid_output_0' [1,240,1,1]"]),
    ("bert-layer", "RowEpilogueFusion", "/attention/self/Softmax",
     ["comes from Add /attention/self/Add", "not a fused node"]),
    ("resblock", "ConvAsGemm", "/conv1/Conv", ["the kernel of /conv1/Conv is 3x3, not 1x1"]),
    ("mbconv", "ConvAsShiftedGemm", "/conv_pw/Conv", ["kernel of /conv_pw/Conv is 1x1"]),
    ("bert-layer", "WeightPrepack", "/attention/self/Reshape",
     ["'attention_self_key_Add_output_0' is not a constant"]),
    ("bert-layer", "FoldTransposeIntoMatMul", "/attention/self/query/MatMul",
     ["A: 'hidden_states' is not written by a Transpose",
      "Y: 'attention_self_query_MatMul_output_0' is not read by a Transpose"]),
    ("mlp", "ConstantFolding", "/fc1/Gemm", ["'input' is not a constant"]),
    ("resblock", "InPlaceElementwise", "/relu_1/Relu", ["its output 'output' is a graph output"]),
]


@pytest.mark.parametrize("model,name,node,words", EXPECTED, ids=[e[1] for e in EXPECTED])
def test_specific_reason(sessions, model, name, node, words):
    text = reason(sessions[model], name, node)
    for w in words:
        assert w in text, text


def test_one_pass_rows_say_they_are_done():
    ws = workbench.open("bert-layer")
    for name, node in (("OnePassSoftmax", "/attention/self/Softmax"),
                       ("OnePassLayerNorm", "/attention/output/LayerNorm/LayerNormalization")):
        (m,) = [m for m in ws.transformations(nodes=[node], predict=False, names=[name])]
        ws.apply(m)
        assert reason(ws, name, node) == f"{node} already runs one pass per row"


def test_no_blas_is_named(sessions, monkeypatch):
    from transforms.layout import conv_shifted
    monkeypatch.setattr(conv_shifted, "blas_implementation", lambda: None)
    assert reason(sessions["resblock"], "ConvAsShiftedGemm", "/conv1/Conv") == \
        "no BLAS library found"


@pytest.mark.parametrize("model", MODELS)
def test_a_matched_node_is_never_refused(sessions, model):
    """Every node a transformation's match touches gets no refusal from it; the rest
    of the reasons are sentences, not code."""
    ws = sessions[model]
    everything = refusals(ws, [n.onnx_name for n, _ in onnx_nodes(ws.sdfg)])
    assert everything and all(isinstance(r, Refused) for r in everything)
    for t in transform.all_transformations():
        touched = {n for m in transform.find_matches(t, ws.sdfg, ws.model.weights)
                   for n in m.nodes}
        assert not [r for r in everything if r.transformation == t.name and r.node in touched]
    for r in everything:
        assert r.level == transform.get(r.transformation).level
        assert r.reason and "None" not in r.reason and " object at " not in r.reason


def test_selection_limits_the_answer(sessions):
    ws = sessions["mlp"]
    (ident,) = nodeid.selection(ws.sdfg, ["/fc3/Gemm"])
    found = refusals(ws, [ident])
    assert found and {r.node for r in found} == {ident}
    assert refusals(ws, []) == []
    # /fc1/Gemm has a GemmEpilogueFusion match (its Relu): that transformation is silent
    assert "GemmEpilogueFusion" not in {r.transformation for r in refusals(ws, ["/fc1/Gemm"])}


def test_find_keeps_its_matches_and_a_silent_transformation_gives_nothing(sessions):
    ws = sessions["mbconv"]
    t = transform.get("ConvEpilogueFusion")
    matches = transform.find_matches(t, ws.sdfg)
    assert matches and all(isinstance(m, transform.Match) for m in matches)

    class Quiet(transform.Transformation):
        level, name = "local", "Quiet"

        def find(self, sdfg):
            return []
    assert not transform.explains(Quiet())
    assert transform.refusals(Quiet(), ws.sdfg, None, ["/conv_pw/Conv"]) == []
    assert not transform.Refusal("why")   # false like the None a plan used to return


def test_apply_says_why_a_match_does_not_apply(sessions):
    """A recorded match replayed where the operator now refuses names the reason."""
    import copy
    ws = sessions["mlp"]
    (ident,) = nodeid.selection(ws.sdfg, ["/fc3/Gemm"])
    stale = transform.Match("GemmEpilogueFusion", (("core", ident),), "fuse into /fc3/Gemm")
    with pytest.raises(workbench.errors.TransformationError,
                       match="no longer a core and its epilogue .its output 'output' is a "
                             "graph output"):
        transform.apply_match(transform.get("GemmEpilogueFusion"), copy.deepcopy(ws.sdfg), stale)


# -- the panel -------------------------------------------------------------------
def test_panel_shows_the_folded_group(qtbot):
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    pytest.importorskip("pytestqt")
    from gui.qtapp import ensure_app
    ensure_app()
    from gui.controller import Controller
    from gui.transform_panel import NOT_OFFERED, TransformPanel

    ctl = Controller()
    ctl.verify_steps = False
    panel = TransformPanel(ctl)
    qtbot.addWidget(panel)
    panel.show()
    try:
        ws = workbench.open("mbconv")
        ctl.set_session(ws)
        ctl.set_selection(nodeid.selection(ws.sdfg, ["/conv_pw/Conv"]))
        qtbot.waitUntil(lambda: panel.refused.topLevelItemCount() == 1, timeout=60_000)
        group = panel.refused.topLevelItem(0)
        assert panel.refused.isVisible() and not group.isExpanded()
        expected = refusals(ws, ["/conv_pw/Conv"])
        assert group.text(0) == f"{NOT_OFFERED}  ({len(expected)})"
        rows = [group.child(i).text(0) for i in range(group.childCount())]
        assert any(row.startswith("ConvEpilogueFusion: its output 'conv_pw_Conv_output_0' "
                                  "is read by 2 nodes") for row in rows), rows
        folded = panel.refused.height()
        group.setExpanded(True)
        assert panel.refused.height() > folded
        ctl.set_selection(())   # no selection: nothing to explain
        assert not panel.refused.isVisible()
    finally:
        ctl.runner.shutdown(timeout_ms=120_000)
