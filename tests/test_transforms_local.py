"""Local transformations on expanded operators of the bundled models: where they
match, where they must not, and that the program still matches onnxruntime."""
import pytest

import workbench
from workbench import transformation_api as transform

LOCAL = ["ChooseImplementation", "ExpandToMaps", "MapTiling", "Vectorization",
         "MapInterchange", "MapCollapse", "MapExpansion", "AccumulateTransient",
         "TrivialMapElimination", "MapSchedule"]


def _matches(ws, name, text=""):
    return [m for m in transform.find_matches(transform.get(name), ws.sdfg, ws.model.weights)
            if text in m.description]


def _expanded(model: str, *operators: str):
    """``model`` with the named operators (all when none) expanded into maps."""
    ws = workbench.open(model)
    for match in _matches(ws, "ExpandToMaps"):
        if not operators or any(f"expand {op} " in match.description for op in operators):
            ws.apply(match)
    return ws


def _verify(ws):
    report = ws.verify()
    assert report.match, report.text()


def test_library_has_the_local_level():
    names = {t.name for t in transform.all_transformations("local")}
    assert set(LOCAL) <= names
    assert all(t.description for t in transform.all_transformations("local"))


def test_choose_implementation():
    ws = workbench.open("mlp")
    found = _matches(ws, "ChooseImplementation")
    assert found and all("/Relu" not in m.description for m in found)  # Relu has one
    gemm = next(m for m in found if m.description.startswith("/fc1/Gemm"))
    ws.apply(gemm)
    node = next(n for n, _ in ws.sdfg.all_nodes_recursive() if getattr(n, "onnx_name", "") == "/fc1/Gemm")
    assert node.implementation == gemm.options_dict()["implementation"]
    _verify(ws)


def test_expand_to_maps():
    ws = _expanded("mlp")
    assert _matches(ws, "ExpandToMaps") == []  # no operator is left to expand
    assert any(type(n).__name__ == "MapEntry" for n in ws.sdfg.states()[0].nodes())
    _verify(ws)


def test_map_tiling():
    ws = _expanded("mlp", "/Relu")
    found = _matches(ws, "MapTiling", "Relu__Relu_map")
    assert len(found) == 1
    ws.apply(found[0])
    # neither the tile loop nor the 32-wide loop inside it tiles again
    assert _matches(ws, "MapTiling", "Relu__Relu_map") == []
    _verify(ws)


def test_map_expansion_then_collapse():
    ws = _expanded("mlp", "/Relu")
    assert _matches(ws, "MapCollapse") == []  # one two-dimensional map: nothing nested
    ws.apply(_matches(ws, "MapExpansion", "Relu__Relu_map")[0])
    _verify(ws)
    found = _matches(ws, "MapCollapse")
    assert len(found) == 1
    ws.apply(found[0])
    assert _matches(ws, "MapCollapse") == []
    _verify(ws)


def test_map_interchange():
    ws = _expanded("bert-layer", "/attention/self/Softmax")
    found = _matches(ws, "MapInterchange", "m_reduce")
    assert len(found) == 1
    ws.apply(found[0])
    _verify(ws)


def test_accumulate_transient():
    ws = _expanded("bert-layer", "/attention/self/Softmax")
    found = {m.description.split(",")[0]: m.options_dict() for m in _matches(ws, "AccumulateTransient")}
    identities = {desc.split("__")[-1]: opts["identity"] for desc, opts in found.items()}
    # a sum starts at 0, a max at the lowest float (DaCe cannot print -inf)
    assert identities == {"m_reduce": repr(float(-3.4028234663852886e38)), "s_reduce": "0"}
    for match in _matches(ws, "AccumulateTransient"):
        ws.apply(match)
    assert _matches(ws, "AccumulateTransient") == []
    _verify(ws)


def test_vectorization():
    ws = _expanded("bert-layer", "/attention/self/Div", "/attention/self/query/Add")
    found = _matches(ws, "Vectorization")
    # the Add reads a weight (caller memory, alignment unknown): not vectorized
    assert [m.description for m in found] == ["map attention_self_Div__Div_map"]
    ws.apply(found[0])
    _verify(ws)
    source = "".join(f.read_text() for f in ws.build().folder.glob("src/cpu/*.cpp"))
    assert "dace::vec<float, 4>" in source
    mlp = _expanded("mlp", "/Relu")
    assert _matches(mlp, "Vectorization") == []  # max() has no vector form in DaCe


def test_trivial_map_elimination_and_schedule():
    # The Softmax expands into a nested SDFG that sees its input reshaped: DaCe's
    # memlet propagation after TrivialMapElimination must not break its edges.
    ws = _expanded("bert-layer", "/attention/output/Add", "/output/Add", "/attention/self/Softmax")
    # [1, 128, 768] maps: by default the parallel loop is the batch dimension of 1
    for label in (" attention_output_Add__Add_map", " output_Add__Add_map"):
        found = _matches(ws, "MapSchedule", label)
        assert [m.options_dict() for m in found] == [{"schedule": "CPU_Multicore", "collapse": 2}]
    ws.apply(_matches(ws, "MapSchedule", " output_Add__Add_map")[0])
    assert _matches(ws, "MapSchedule", " output_Add__Add_map") == []
    # dropping the batch dimension parallelizes over the 128 rows as it is
    trivial = _matches(ws, "TrivialMapElimination", " attention_output_Add__Add_map")
    assert len(trivial) == 1
    ws.apply(trivial[0])
    assert _matches(ws, "TrivialMapElimination", " attention_output_Add__Add_map") == []
    assert _matches(ws, "MapSchedule", " attention_output_Add__Add_map") == []
    _verify(ws)
    source = "".join(f.read_text() for f in ws.build().folder.glob("src/cpu/*.cpp"))
    assert "collapse(2)" in source


def test_map_schedule_small_map_runs_sequentially():
    ws = _expanded("mlp", "/fc3/Gemm")
    found = _matches(ws, "MapSchedule")
    assert [m.options_dict()["schedule"] for m in found] == ["Sequential"]  # 64 x 10 bias map
    ws.apply(found[0])
    assert _matches(ws, "MapSchedule") == []
    _verify(ws)


def test_vectorization_leaves_maps_over_bools_alone():
    """DaCe's vector.h has no vector of bool: a vectorized Cast from a bool comparison
    failed to compile (found by the step fuzz on zoo:control_flow). Neither found nor
    replayed from a recorded match."""
    from workbench.errors import TransformationError
    from workbench.transformation_api import Match
    ws = workbench.open("zoo:control_flow")
    ws.replay([Match("ExpandToMaps", (("node", "main:op:/Cast#0"),))])
    bool_map = "main:map:Cast__Cast_map#0"
    offered = [m for m in ws.transformations(predict=False, names={"Vectorization"})]
    assert all(bool_map not in dict(m.where).values() for m in offered)
    with pytest.raises(TransformationError, match="no longer applies"):
        ws.apply(Match("Vectorization", (("map_entry", bool_map),)))
