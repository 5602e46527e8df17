"""Session folders as a journal with checkpoints: only some steps' SDFGs are written,
the others are replayed from the checkpoint before them, exactly."""
import gzip
import json

import pytest

import workbench
from workbench.session import folder as session_folder
from workbench.session.history import canonical_json
from workbench.session.stepping import ReplayError

EVERY = 4


@pytest.fixture
def every_fourth(monkeypatch):
    """Checkpoints every 4 steps on the small bundled blocks (a full-size network gets
    that spacing from its node count)."""
    monkeypatch.setattr(session_folder, "checkpoint_every", lambda sdfg: EVERY)


def same_text(sdfg) -> str:
    """Canonical JSON with GUIDs blanked and empty debug information left out (a deep
    copy, which reading a step off a shared host makes, fills it in)."""
    def empty(value):
        return value is None or (isinstance(value, dict) and not value.get("filename")
                                 and not value.get("start_line"))

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()
                    if not (k == "debuginfo" and empty(v))}
        return [plain(v) for v in value] if isinstance(value, list) else value
    return json.dumps(plain(json.loads(canonical_json(sdfg))), sort_keys=True)


def each_step(ws) -> list:
    """``same_text`` of every step of ``ws``, read from the session."""
    return [same_text(ws.sdfg_at(i)) for i in range(len(ws.timeline))]


@pytest.fixture
def tuned(every_fourth, tmp_path):
    ws = workbench.open("bert-layer", session_dir=tmp_path / "s")
    ws.optimize("auto")
    assert ws.position > 2 * EVERY
    return ws, tmp_path / "s"


def test_only_checkpoints_are_written_and_every_step_reopens_exactly(tuned):
    ws, folder = tuned
    manifest = json.loads((folder / "session.json").read_text())
    whole = [i for i, step in enumerate(ws.timeline.steps) if i and step.whole]
    assert manifest["format"] == 2
    assert manifest["checkpoints"] == sorted({i for i in range(EVERY, ws.position + 1, EVERY)}
                                             | set(whole))
    written = sorted(int(p.name[:4]) for p in (folder / "steps").glob("*.sdfgz"))
    assert written == manifest["checkpoints"] and len(written) < ws.position
    assert all(manifest["signatures"][i - 1] for i in written)
    assert sum(1 for s in manifest["signatures"] if s) == len(written)

    expected = each_step(ws)
    again = workbench.open_session(folder)
    assert again.position == ws.position and not again.recovery_note
    assert same_text(again.sdfg) == expected[-1]
    lazy = [i for i, step in enumerate(again.timeline.steps) if step.lazy]
    assert lazy and all(i % EVERY and i not in whole for i in lazy)
    assert each_step(again) == expected   # each replayed from the checkpoint before it
    again.goto(EVERY + 1)
    assert same_text(again.sdfg) == expected[EVERY + 1]
    assert again.undo() and same_text(again.sdfg) == expected[EVERY]
    assert again.verify().match


def test_a_step_that_does_not_replay_to_its_record_is_refused_and_ends_the_history(tuned):
    ws, folder = tuned
    manifest = json.loads((folder / "session.json").read_text())
    broken = next(i for i in range(ws.position, 0, -1) if i not in manifest["checkpoints"])
    expected = each_step(ws)
    manifest["steps"][broken - 1]["bytes_after"] += 4   # no replay moves these bytes
    (folder / "session.json").write_text(json.dumps(manifest))
    looked = workbench.open(folder)   # a look: nothing written
    assert looked.position == ws.position and not looked.recovery_note
    with pytest.raises(ReplayError, match=f"step {broken} .*bytes"):
        looked.goto(broken)
    assert looked.position == ws.position and same_text(looked.sdfg) == expected[-1]

    manifest["position"] = broken   # saved while the session stood on that step
    (folder / "session.json").write_text(json.dumps(manifest))
    again = workbench.open(folder)
    assert again.position == broken - 1 and len(again.timeline) == broken
    assert f"step {broken}" in again.recovery_note and "bytes" in again.recovery_note
    assert same_text(again.sdfg) == expected[broken - 1]


def test_saving_a_reopened_journal_elsewhere_replays_its_checkpoints(tuned, tmp_path):
    ws, folder = tuned
    expected = each_step(ws)
    again = workbench.open_session(folder)
    again.goto(1)
    again.save(tmp_path / "copy")
    written = sorted(int(p.name[:4]) for p in (tmp_path / "copy" / "steps").glob("*.sdfgz"))
    assert written == json.loads((folder / "session.json").read_text())["checkpoints"]
    copy = workbench.open_session(tmp_path / "copy")
    assert copy.position == 1 and each_step(copy) == expected


def test_a_format_1_folder_with_every_step_written_still_opens(tmp_path, monkeypatch):
    monkeypatch.setattr(session_folder, "checkpoint_every", lambda sdfg: 1)
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    for name in ("ExpandToMaps", "ChooseImplementation"):
        ws.apply(next(m for m in ws.transformations(predict=False) if m.transformation == name))
    manifest = json.loads((tmp_path / "s" / "session.json").read_text())
    manifest["format"] = 1
    del manifest["checkpoints"]
    (tmp_path / "s" / "session.json").write_text(json.dumps(manifest))
    step_files = sorted(p.name for p in (tmp_path / "s" / "steps").iterdir())
    assert step_files == ["0001.sdfgz", "0002.sdfgz"]
    again = workbench.open(tmp_path / "s")
    assert again.position == 2 and not any(s.lazy for s in again.timeline.steps)
    assert same_text(again.sdfg) == same_text(ws.sdfg)
    assert json.loads(gzip.decompress((tmp_path / "s" / "steps" / "0002.sdfgz").read_bytes()))
