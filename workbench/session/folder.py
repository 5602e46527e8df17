"""Session folders: a session that survives crashes, as JSON and .sdfgz files.

Layout of a folder:
  model.onnx            the model as imported (a copy, so the folder stands alone)
  session.json          manifest: model name, input shapes (or the sizes of the dims kept
                        symbolic, and their names), the journal of steps
                        (what each applied, as recipes record it), the checkpoints,
                        the current position
  steps/NNNN.sdfgz      the SDFG after step NNNN, for checkpoint steps only
  steps/NNNN.npz        the weights after step NNNN, for every step that changed them

Why a journal: writing every step's whole SDFG made saving a session after
`auto` cost minutes on a full-size network (EfficientNet-B0: 274 s under the
profiler, ViT-tiny ~380 s), and the window autosaves after every step. A
checkpoint is written every ``checkpoint_every`` steps (more apart the larger
the graph, so writing one stays a small share of the steps it covers) and at
every step applied to a whole copy (one costs as much to replay as to
write); the steps between are replayed from the nearest checkpoint before
them when the session goes to them. Step 0 is never written: opening
re-imports model.onnx. A replayed step must move the bytes its entry
recorded, or the replay stops there (``ReplayError``). Format 1 folders (a
file for every step) still open.

Rules:
1. Every file is written to a temporary name, flushed, then renamed into
   place, and session.json is written last: it is the commit point. A
   process killed mid-step leaves the previous manifest, which names only
   complete files; the journal in it is enough to replay every step.
2. Never pickle: JSON, compressed SDFG JSON and numpy .npz (allow_pickle off).
3. Opening reads the manifest, re-imports model.onnx and restores the SDFG
   of the current step; a missing or corrupt step file ends the history at
   the last good step, and the session says so in ``recovery_note``.
4. The manifest signs every step's SDFG (``workbench.session.signing``): a
   folder whose SDFGs this user's workbench did not write is refused
   (``UntrustedSDFGError``) before any of them is parsed, unless trusted.
5. A temporary file (``.NAME.PID-*.tmp``) is never read; one whose writer
   has ended (killed mid-write) is removed when the folder is next opened.
"""
import gzip
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.session import signing as provenance
from workbench.errors import BadInputError, UntrustedSDFGError
from workbench.session.history import Step

MANIFEST = "session.json"
FORMAT = 2
READABLE = (1, 2)   # format 1: every step's SDFG written, no journal-only steps
# graph nodes per step between checkpoints: ViT-tiny's 1,397 nodes give one every
# 21 steps; a graph of up to 64 nodes writes every step, as format 1 did
NODES_PER_CHECKPOINT_STEP = 64


def checkpoint_every(sdfg) -> int:
    """Steps from one checkpoint to the next for a session on ``sdfg``."""
    nodes = sum(state.number_of_nodes() for state in sdfg.states())
    return max(1, nodes // NODES_PER_CHECKPOINT_STEP)


def due_checkpoints(history, every: int) -> list:
    """Positions whose SDFG the next save writes: not written yet, and a multiple of
    ``every`` or applied to a whole copy (see the module notes)."""
    return [i for i, step in enumerate(history.steps) if i > 0 and not step.saved
            and (i % every == 0 or step.whole)]


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer's pid in the name tells a later opener whether it is still writing
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}-",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_history(folder, history, model, model_name: str, input_shapes: dict,
                 checkpoints: list, every: int, symbolic=()) -> None:
    """Write the SDFGs of ``checkpoints`` (positions from ``due_checkpoints``; each must
    hold its SDFG), the weights not on disk yet, then the manifest; ``model`` (the
    ONNX model as imported) is written once."""
    folder = Path(folder)
    (folder / "steps").mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    if not model_path.exists():
        atomic_write(model_path, model.SerializeToString())
    steps = history.steps
    for i in checkpoints:
        text = steps[i].sdfg_json
        atomic_write(folder / "steps" / f"{i:04d}.sdfgz", gzip.compress(text.encode(), compresslevel=5))
        steps[i].signature = provenance.sign(text)
        steps[i].saved = True
        steps[i].forget_json()
    for step in steps[1:]:
        if step.saved and step.signature is None:   # read from a folder and trusted
            step.signature = provenance.sign(step.sdfg_json)
    changed = [i for i in range(1, len(steps)) if steps[i].weights is not steps[i - 1].weights]
    for i in changed:
        if not steps[i].weights_saved:  # a step replaced after undo is new, whatever its number
            atomic_write(folder / "steps" / f"{i:04d}.npz", _npz_bytes(steps[i].weights))
    for step in steps:
        step.weights_saved = True
    kept = [i for i in range(1, len(steps)) if steps[i].saved]
    manifest = {"format": FORMAT, "model": model_name, "input_shapes": input_shapes,
                "position": history.position, "steps": [s.entry for s in steps[1:]],
                "checkpoint_every": every, "checkpoints": kept,
                "signatures": [s.signature if s.saved else None for s in steps[1:]],
                "weights_changed_at": changed}
    if symbolic:
        manifest["symbolic"] = list(symbolic)
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    wanted = {f"{i:04d}.sdfgz" for i in kept} | {f"{i:04d}.npz" for i in changed}
    for extra in (folder / "steps").iterdir():  # dropped by a new branch, or not a checkpoint
        if extra.name.split(".")[0].isdigit() and extra.name not in wanted:
            extra.unlink()


def _npz_bytes(weights: dict) -> bytes:
    import io
    buf = io.BytesIO()
    np.savez(buf, **weights)
    return buf.getvalue()


@dataclass
class SavedSession:
    """What a session folder holds, read and checked (rules 3 and 4); the caller
    re-imports ``model_path`` and restores ``steps`` after its import step."""
    model_path: Path
    model_name: str
    input_shapes: dict
    steps: list          # [history.Step] after the import, weights None where unchanged
    position: int        # the current step the manifest names
    note: str            # why the history ends early ("" when it does not)
    unsigned: list       # positions of steps accepted only because trusted
    checkpoint_every: int   # the folder's spacing of checkpoints (None: format 1)
    symbolic: list = ()     # dims kept symbols (``input_shapes`` gives their sizes)


def read_session(folder, trust: bool = False) -> SavedSession:
    """Read a session folder (see the module rules); ``trust`` accepts SDFGs this
    workbench did not write (rule 4)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("format") not in READABLE:
            raise ValueError(f"format {manifest.get('format')!r}")
    except FileNotFoundError:
        raise BadInputError(f"'{folder}' is not a session folder: {MANIFEST} is missing.") from None
    except (OSError, ValueError) as e:
        raise BadInputError(f"'{folder}/{MANIFEST}' cannot be read ({e}); the session "
                            f"folder is damaged.") from None
    if not (folder / "model.onnx").is_file():
        raise BadInputError(f"'{folder}' has no model.onnx; the session cannot be restored.")
    read, note = _read_steps(folder, manifest)
    signatures = manifest.get("signatures") or []
    written = [i for i, (_, sdfg_json, _) in enumerate(read, start=1) if sdfg_json is not None]
    unsigned = [i for i in written
                if not provenance.signed_here(read[i - 1][1], _at(signatures, i - 1))]
    if unsigned and not trust:
        raise UntrustedSDFGError(folder, f"{len(unsigned)} of its {len(written)} saved step(s) "
                                         f"carry no signature of this user's workbench, e.g. "
                                         f"step {unsigned[0]}")
    _drop_temporaries(folder)
    steps = [Step(entry, sdfg_json, weights, saved=sdfg_json is not None,
                  signature=None if i in unsigned or sdfg_json is None else signatures[i - 1],
                  lazy=sdfg_json is None)
             for i, (entry, sdfg_json, weights) in enumerate(read, start=1)]
    for step in steps:
        step.weights_saved = True
    return SavedSession(folder / "model.onnx", manifest.get("model"),
                        manifest.get("input_shapes"), steps, manifest.get("position", 0),
                        note, unsigned, manifest.get("checkpoint_every"),
                        list(manifest.get("symbolic") or ()))


def _read_steps(folder: Path, manifest: dict):
    """[(entry, SDFG JSON text or None, weights or None)] of the readable steps (None:
    a journal-only step, replayed later), and a recovery note.

    Nothing here parses an SDFG: the JSON is only checked to be JSON.
    """
    changed = set(manifest.get("weights_changed_at", []))
    entries = manifest.get("steps", [])
    written = set(manifest.get("checkpoints", [])) if manifest.get("format") != 1 \
        else set(range(1, len(entries) + 1))
    steps, note = [], ""
    for i, entry in enumerate(entries, start=1):
        weights, sdfg_json = None, None
        try:
            if i in written:
                sdfg_json = gzip.decompress(
                    (folder / "steps" / f"{i:04d}.sdfgz").read_bytes()).decode()
                json.loads(sdfg_json)
            if i in changed:
                with np.load(folder / "steps" / f"{i:04d}.npz", allow_pickle=False) as data:
                    weights = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, gzip.BadGzipFile) as e:
            note = (f"step {i} ({entry.get('transformation')}) could not be read "
                    f"({type(e).__name__}); the session was restored up to step {i - 1}.")
            break
        steps.append((entry, sdfg_json, weights))
    # a step without its own weights has those of the step before it
    last = None
    for k, (entry, sdfg_json, weights) in enumerate(steps):
        last = weights if weights is not None else last
        steps[k] = (entry, sdfg_json, last)
    return steps, note


def _at(items: list, i: int):
    return items[i] if 0 <= i < len(items) else None


def _drop_temporaries(folder: Path) -> None:
    """Remove temporary files whose writer has ended (rule 5)."""
    from workbench.build import process_alive
    for directory in (folder, folder / "steps"):
        for tmp in directory.glob(".*.tmp"):
            pid = tmp.name.rsplit(".", 2)[-2].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
                try:
                    tmp.unlink()
                except OSError:
                    pass


def remove_session(folder) -> None:
    shutil.rmtree(folder, ignore_errors=True)
