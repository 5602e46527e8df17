"""The working graph: steps spliced into the live SDFG equal steps applied to a whole copy.

Every check compares with the whole-graph route (``transformation_api.apply_to_copy``,
what every step did before) through canonical JSON, so a splice that put a node, an
edge, an operand or an array in another place than the whole-graph route would is a
failure here, not a subtle difference in a later build.
"""
import re

import pytest

import workbench
from workbench import transformation_api as transform
from workbench.analysis.movement import data_movement, same_figure
from workbench.errors import TransformationError
from workbench.session import shapes
from workbench.session.history import canonical_json

# A deep copy turns an absent debuginfo into an empty one; neither says anything.
_EMPTY_DEBUGINFO = re.compile(
    r'(, )?"debuginfo": \{"end_column": 0, "end_line": 0, "filename": null, '
    r'"start_column": 0, "start_line": 0, "type": "DebugInfo"\}(, )?')


def comparable(sdfg) -> str:
    return _EMPTY_DEBUGINFO.sub(lambda m: ", " if m.group(1) and m.group(2) else "",
                                canonical_json(sdfg))


def spliced(ws) -> bool:
    return ws.timeline.current.shape is not None


def every_match_equals_the_whole_route(ws, every: int = 1) -> dict:
    """Apply each listed match (every ``every``-th) from the import, spliced, and compare
    with the whole-graph route; undo and redo must give both SDFGs back exactly."""
    ws.full_checks = True
    imported = comparable(ws.sdfg)
    counts = {"spliced": 0, "whole": 0, "refused": 0}
    for match in ws.transformations(predict=False)[::every]:
        ws.goto(0)
        try:
            expected = comparable(transform.apply_to_copy(ws.sdfg, match, ws.model.weights))
        except Exception:  # noqa: BLE001 (the session must refuse it too)
            expected = None
        try:
            ws.apply(match)
        except TransformationError:
            assert expected is None, f"{match.transformation} applies whole but was refused"
            assert comparable(ws.sdfg) == imported and ws.position == 0
            counts["refused"] += 1
            continue
        counts["spliced" if spliced(ws) else "whole"] += 1
        after = comparable(ws.sdfg)
        assert after == expected, f"{match.transformation} on {match.nodes}: not the whole route"
        assert ws.undo() and comparable(ws.sdfg) == imported
        assert ws.redo() and comparable(ws.sdfg) == after
    return counts


@pytest.mark.parametrize("model", ["mlp", "resblock", "mbconv"])
def test_every_match_of_a_bundled_block_splices_like_the_whole_route(model):
    counts = every_match_equals_the_whole_route(workbench.open(model))
    assert counts["spliced"] >= 10 and counts["spliced"] > counts["whole"]


def test_a_sample_of_a_resnet_export_splices_like_the_whole_route():
    counts = every_match_equals_the_whole_route(workbench.open("zoo:resnet"), every=4)
    assert counts["spliced"] >= 20


def test_a_step_that_fails_after_changing_its_copy_leaves_the_session_identical(monkeypatch):
    """The transformation runs on the region's copy: whatever it did before raising, the
    live graph, its figure and the history are as they were."""
    ws = workbench.open("resblock")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    before, moved, position = canonical_json(ws.sdfg, guids=True), ws.data_movement(), ws.position
    t = transform.get("ConvEpilogueFusion")
    real = type(t).apply

    def half_done(self, sdfg, match, *rest):
        real(self, sdfg, match, *rest)
        raise RuntimeError("failed after rewriting")
    monkeypatch.setattr(type(t), "apply", half_done)
    match = next(m for m in ws.transformations(predict=False)
                 if m.transformation == "ConvEpilogueFusion")
    with pytest.raises(TransformationError, match="failed after rewriting"):
        ws.apply(match)
    assert canonical_json(ws.sdfg, guids=True) == before
    assert ws.data_movement() is moved and ws.position == position and spliced(ws)


def test_a_result_reaching_outside_its_region_is_applied_to_the_whole_graph(monkeypatch):
    """A step that changes what the region copy cannot show (here: a symbol of the SDFG)
    is not spliced; the whole-graph route applies it, with the same result."""
    ws = workbench.open("mlp")
    t = transform.get("ExpandToMaps")
    real = type(t).apply

    def with_symbol(self, sdfg, match, *rest):
        real(self, sdfg, match, *rest)
        sdfg.add_symbol("wb_extra", int)
    monkeypatch.setattr(type(t), "apply", with_symbol)
    match = next(m for m in ws.transformations(predict=False) if m.transformation == "ExpandToMaps")
    ws.apply(match)
    assert not spliced(ws) and "wb_extra" in ws.sdfg.symbols
    ws.undo()
    assert "wb_extra" not in ws.sdfg.symbols


def test_a_recipe_runs_in_one_pass_and_every_step_comes_back_exactly():
    """``auto`` records each step; going to any of them gives the SDFG that replaying the
    steps up to it on a fresh import gives; each step's figure is a full analysis's."""
    ws = workbench.open("resblock")
    ws.full_checks = True   # validates and analyses the whole graph after every step
    added = ws.optimize("auto")
    assert len(added) >= 5 and sum(s.shape is not None for s in ws.timeline.steps) >= 5
    fresh = workbench.open("resblock")
    for position in range(1, ws.position + 1):
        fresh.replay([ws.timeline[position].entry])
        ws.goto(position)
        assert comparable(ws.sdfg) == comparable(fresh.sdfg), f"step {position}"
        assert same_figure(ws.data_movement(), data_movement(fresh.sdfg, fresh.operator_names()))


def test_a_step_read_without_moving_is_an_independent_copy():
    ws = workbench.open("mlp")
    ws.optimize("auto")
    live = canonical_json(ws.sdfg, guids=True)
    first = ws.sdfg_at(1)
    assert first is not ws.sdfg and canonical_json(ws.sdfg, guids=True) == live
    copy_json = comparable(first)
    ws.goto(1)
    assert comparable(ws.sdfg) == copy_json
    assert ws.timeline[1].sdfg_json == canonical_json(ws.sdfg, guids=True)


def test_an_invalid_program_after_a_recipe_ends_the_session_before_the_step(monkeypatch):
    """Spliced steps are validated on their region; the whole program is validated once
    after a recipe, and a step that left it invalid is found and reported."""
    ws = workbench.open("mlp")
    calls = {"n": 0}
    real = type(ws.sdfg).validate

    def fails_after_two_steps(sdfg, *a, **kw):
        if sdfg is ws.sdfg and ws.position >= 2:
            calls["n"] += 1
            raise ValueError("broken on purpose")
        return real(sdfg, *a, **kw)
    monkeypatch.setattr(type(ws.sdfg), "validate", fails_after_two_steps)
    result = ws.optimize("auto")
    assert ws.position == 1 and len(result) == 1 and calls["n"] >= 1
    assert any("does not validate" in s.reason for s in result.skipped)


def assert_containers_agree(state):
    """Each node's own edge dicts and networkx's graph hold what the edge list holds (an
    install that changes only what differs must leave them as a full install does)."""
    edges = state.edges()
    for node in state.nodes():
        assert state.in_edges(node) == [e for e in edges if e.dst is node], node
        assert state.out_edges(node) == [e for e in edges if e.src is node], node
    assert set(state._nx.nodes) == set(state.nodes())
    assert sorted(map(id, (d["data"] for _, _, d in state._nx.edges(data=True)))) == \
        sorted(id(e.data) for e in edges)
    for e in edges:
        assert e.data._state is state and e.data._edge is e


def test_shapes_install_in_any_order():
    ws = workbench.open("mbconv")
    ws.optimize("auto")
    jsons = {}
    for position in range(ws.position, -1, -1):
        ws.goto(position)
        jsons[position] = canonical_json(ws.sdfg, guids=True)
    for position in (3, 0, ws.position, 1, 2, 4, 3):
        ws.goto(position)
        assert canonical_json(ws.sdfg, guids=True) == jsons[position]
        assert_containers_agree(ws.sdfg.nodes()[0])
        host = ws.timeline[position].sdfg
        if ws.timeline[position].shape is not None:
            assert shapes.installed(host) is ws.timeline[position].shape


def test_in_place_steps_decide_on_the_whole_graph_and_splice():
    """In-place writes are decided from whole lifetimes, which a region's cut edges hide:
    after a few in-place steps, a region copy once refused a Mul that the whole graph
    accepts (tests/test_transforms_global.py::test_in_place_elementwise). The decision
    is made on the live graph and the region is rewritten by it: all 14 apply, spliced,
    each exactly as on a copy of the whole graph. Buffer reuse rewrites every transient
    and still takes the whole route."""
    ws = workbench.open("bert-layer")
    ws.full_checks = True
    applied = 0
    while True:
        match = next((m for m in ws.transformations(predict=False)
                      if m.transformation == "InPlaceElementwise"), None)
        if match is None:
            break
        expected = comparable(transform.apply_to_copy(ws.sdfg, match, ws.model.weights))
        ws.apply(match)
        assert spliced(ws), match.description
        assert comparable(ws.sdfg) == expected, match.description
        applied += 1
    assert applied == 14
    reuse = next(m for m in ws.transformations(predict=False)
                 if m.transformation == "TransientReuse")
    ws.apply(reuse)
    assert not spliced(ws)
