"""A symbolic session's figures at the sizes the user sets (issue 30, items 2 and 6).

``Session.set_sizes`` changes the sizes a symbolic program's figures are taken
at: bytes moved, memory, FLOPs, the class table and the predictions of
transformations then equal those of the same program opened at those sizes,
the kept per-step figures included; its random inputs (what ``profile`` runs
on) are made at them; a session folder records them and every step the sizes
its bytes were recorded at, so a reopened session comes back at the new sizes
and still replays steps taken at the old ones. The listing worker takes its
figures at them too. Bad names and sizes, and a program of one size, are
refused.
"""
import json

import numpy as np
import pytest

import workbench
from test_symbolic import _symbolic_batch
from workbench.analysis.movement import data_movement
from workbench.analysis.sizes import at_sizes
from workbench.errors import BadInputError


@pytest.fixture
def mlp_path(tmp_path):
    return _symbolic_batch("mlp", tmp_path / "m.onnx")


def _open(path, batch: int):
    return workbench.open(path, symbolic=["batch"], input_shapes={"batch": batch})


def _first(ws, name):
    return ws.transformations(names=[name], predict=False)[0]


def _predictions(ws) -> dict:
    return {(m.transformation, m.where): m.delta_bytes for m in ws.transformations()}


def _figures(ws) -> tuple:
    summary = ws.summary()
    return (summary["data_movement"], summary["memory"], summary["flops"],
            summary["classes"], _predictions(ws))


def test_set_sizes_takes_every_figure_at_the_new_sizes(mlp_path):
    ws = _open(mlp_path, 4)
    at4 = _figures(ws)
    ws.apply(_first(ws, "GemmEpilogueFusion"))   # a step whose figure the session keeps
    step1_at4 = ws.data_movement().moved_bytes
    assert ws.set_sizes({"batch": 64}) == {"batch": 64} == ws.symbols
    # the same program opened at 64 with the same step: every figure equal
    fresh = _open(mlp_path, 64)
    fresh.replay(ws.recipe_steps())
    assert _figures(ws) == _figures(fresh)
    moved = ws.data_movement().moved_bytes
    assert moved > step1_at4
    with at_sizes({"batch": 64}):
        assert moved == data_movement(ws.sdfg, ws.operator_names()).moved_bytes
    assert ws.memory().peak_live_bytes > at4[1]["peak_live_bytes"]
    assert ws.summary()["flops"] == 16 * at4[2]   # every FLOP of the MLP scales with the batch
    # the import's kept figure was taken at 4: going back measures it again, at 64
    ws.undo()
    fresh.undo()
    assert _figures(ws) == _figures(fresh)
    assert ws.data_movement().moved_bytes > at4[0]["moved_bytes"]
    predicted = _predictions(ws)
    assert predicted != at4[4] and any(d for d in predicted.values())
    # what profile and verify run on unless told
    assert {k: v.shape for k, v in ws.random_inputs().items()} == {"input": (64, 784)}
    # and back: the figures at 4 again
    ws.set_sizes({"batch": 4})
    assert _figures(ws) == at4


def test_profile_runs_at_the_sizes_set(mlp_path):
    ws = _open(mlp_path, 4)
    ws.set_sizes({"batch": 9})
    seen, call_args = [], ws.call_args

    def recording(build, inputs, weights=None):
        seen.append({k: np.shape(v) for k, v in inputs.items()})
        return call_args(build, inputs, weights)
    ws.call_args = recording
    prof = ws.profile(repeat=2, warmup=0, reference=False)
    assert seen and all(s == {"input": (9, 784)} for s in seen)
    assert prof.total_ms > 0


def test_the_model_names_or_the_sdfg_names_of_a_symbol_are_taken():
    ws = workbench.open("zoo:bert", symbolic=["sequence"],
                        input_shapes={"batch": 1, "sequence": 16})
    assert ws.symbols == {"sequence": 16}
    at16 = ws.data_movement().moved_bytes
    assert ws.set_sizes({"sequence_": 64}) == {"sequence": 64}   # the SDFG's symbol
    assert ws.data_movement().moved_bytes > at16
    with at_sizes({"sequence": 64}):
        assert ws.data_movement().moved_bytes == \
            data_movement(ws.sdfg, ws.operator_names()).moved_bytes


@pytest.mark.parametrize("sizes,why", [
    ({"seq": 3}, "'seq' is not a symbol of .*its symbols are batch"),
    ({"batch": 0}, "not a whole number of at least 1"),
    ({"batch": -2}, "not a whole number of at least 1"),
    ({"batch": 2.5}, "not a whole number of at least 1"),
    ({"batch": "8"}, "not a whole number of at least 1"),
    ({"batch": True}, "not a whole number of at least 1"),
    ([("batch", 8)], "a dict of symbol -> size"),
])
def test_bad_names_and_sizes_are_refused(mlp_path, sizes, why):
    ws = _open(mlp_path, 4)
    before = ws.data_movement().moved_bytes
    with pytest.raises(BadInputError, match=why):
        ws.set_sizes(sizes)
    assert ws.symbols == {"batch": 4} and ws.data_movement().moved_bytes == before


def test_a_program_of_one_size_refuses_sizes():
    ws = workbench.open("mlp")
    assert ws.symbols == {}
    with pytest.raises(BadInputError, match="no symbolic sizes"):
        ws.set_sizes({"batch": 4})


def test_a_reopened_session_comes_back_at_its_sizes(mlp_path, tmp_path):
    """Steps recorded at 4 and at 64, none of them a checkpoint: reopening replays both,
    each checked against the bytes it recorded at its own sizes."""
    folder = tmp_path / "session"
    ws = _open(mlp_path, 4)
    ws.checkpoint_every = 100   # every step a journal entry, replayed when reopened
    ws.save(folder)
    ws.apply(_first(ws, "GemmEpilogueFusion"))
    ws.set_sizes({"batch": 64})
    ws.apply(_first(ws, "GemmEpilogueFusion"))
    assert [e["sizes"] for e in ws.steps] == [{"batch": 4}, {"batch": 64}]
    manifest = json.loads((folder / "session.json").read_text())
    assert manifest["input_shapes"] == {"batch": [64]} and manifest["checkpoints"] == []
    again = workbench.open_session(folder)
    assert again.recovery_note == "" and again.position == 2
    assert again.symbols == {"batch": 64}
    assert _figures(again) == _figures(ws)
    again.goto(1)
    ws.goto(1)
    assert again.data_movement().moved_bytes == ws.data_movement().moved_bytes
    # without the sizes its first step recorded, that step (at 4) is checked at 64: refused
    manifest["steps"][0].pop("sizes")
    (folder / "session.json").write_text(json.dumps(manifest))
    broken = workbench.open_session(folder)
    assert broken.position == 0 and "step 1 of the saved session could not be replayed" \
        in broken.recovery_note


def test_sizes_set_before_any_step_are_saved_too(mlp_path, tmp_path):
    ws = _open(mlp_path, 4)
    ws.save(tmp_path / "session")
    ws.set_sizes({"batch": 12})
    assert workbench.open_session(tmp_path / "session").symbols == {"batch": 12}


def test_the_listing_worker_takes_its_figures_at_the_sizes(mlp_path):
    from workbench.session import listing
    from workbench.session.replica import Replica
    ws = _open(mlp_path, 4)
    replica = Replica()
    try:
        for batch in (4, 32):
            ws.set_sizes({"batch": batch})
            request = listing.worker_request(ws, 0)   # the worker, whatever the graph's size
            assert request[0]["sizes"] == {"batch": batch}
            moved, classes, memory = replica.analysis(*request)
            assert moved.moved_bytes == ws.data_movement().moved_bytes
            assert memory.to_dict() == ws.memory().to_dict()
            assert classes == ws.class_table()
            listed = replica.listing(*request, None, lambda: False, lambda: (),
                                     lambda _: None)
            assert {(m.transformation, m.where): m.delta_bytes for m in listed} == \
                _predictions(ws)
    finally:
        replica.close()
