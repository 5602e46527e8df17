"""Session folders: a session that survives crashes, as JSON and .sdfgz files.

Layout of a folder:
  model.onnx            the model as imported (a copy, so the folder stands alone)
  session.json          manifest: model name, input shapes, steps, current position
  steps/NNNN.sdfgz      the SDFG after step NNNN (0 = as imported)
  steps/NNNN.npz        the weights after step NNNN, only when a step changed them

Rules:
1. Every file is written to a temporary name, flushed, then renamed into
   place, and session.json is written last: it is the commit point. A
   process killed mid-step leaves the previous manifest, which names only
   complete files.
2. Never pickle: JSON, compressed SDFG JSON and numpy .npz (allow_pickle off).
3. Opening reads the manifest, re-imports model.onnx and restores the SDFG
   of the current step; a missing or corrupt step file ends the history at
   the last good step, and the session says so in ``recovery_note``.
"""
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

from workbench.errors import BadInputError

MANIFEST = "session.json"
FORMAT = 1


def canonical_json(sdfg) -> str:
    """The SDFG's JSON without memlet GUIDs (random per copy), for comparing
    a replayed SDFG with the original."""
    import re
    return re.sub(r'"guid": "[^"]*"', '"guid": ""', json.dumps(sdfg.to_json(), sort_keys=True))


def atomic_write(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def save_session(ws, folder) -> None:
    """Write what is not on disk yet, then the manifest."""
    folder = Path(folder)
    (folder / "steps").mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    if not model_path.exists():
        atomic_write(model_path, ws.model.reference_model.SerializeToString())
    previous_weights = None
    for i, step in enumerate(ws._steps):
        if not step.saved:  # a step replaced after undo is new, whatever its number
            atomic_write(folder / "steps" / f"{i:04d}.sdfgz",
                         gzip.compress(step.sdfg_json.encode(), compresslevel=5))
            if i > 0 and step.weights is not previous_weights:
                atomic_write(folder / "steps" / f"{i:04d}.npz", _npz_bytes(step.weights))
            step.saved = True
        previous_weights = step.weights
    shapes = {i.onnx_name: list(i.shape) for i in ws.inputs}
    manifest = {"format": FORMAT, "model": ws.name, "input_shapes": shapes,
                "position": ws.position, "steps": [s.entry for s in ws._steps[1:]],
                "weights_changed_at": [i for i in range(1, len(ws._steps))
                                       if ws._steps[i].weights is not ws._steps[i - 1].weights]}
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    for extra in (folder / "steps").iterdir():  # files of steps dropped by a new branch
        if extra.name.split(".")[0].isdigit() and int(extra.name.split(".")[0]) >= len(ws._steps):
            extra.unlink()


def _npz_bytes(weights: dict) -> bytes:
    import io
    buf = io.BytesIO()
    np.savez(buf, **weights)
    return buf.getvalue()


def open_session(folder, progress=None):
    """Reopen a session folder (see the module rules)."""
    from workbench.importer import import_model
    from workbench.progress import SILENT
    from workbench.session import Session, _Step
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}")
    except FileNotFoundError:
        raise BadInputError(f"'{folder}' is not a session folder: {MANIFEST} is missing.") from None
    except (OSError, ValueError) as e:
        raise BadInputError(f"'{folder}/{MANIFEST}' cannot be read ({e}); the session "
                            f"folder is damaged.") from None
    if not (folder / "model.onnx").is_file():
        raise BadInputError(f"'{folder}' has no model.onnx; the session cannot be restored.")
    imported = import_model(folder / "model.onnx", input_shapes=manifest.get("input_shapes"),
                            name=manifest.get("model"), progress=progress or SILENT)
    ws = Session(imported, progress or SILENT)
    ws.folder = None  # no autosave while restoring
    weights = ws.model.weights
    changed = set(manifest.get("weights_changed_at", []))
    note = ""
    for i, entry in enumerate(manifest.get("steps", []), start=1):
        try:
            sdfg_json = gzip.decompress((folder / "steps" / f"{i:04d}.sdfgz").read_bytes()).decode()
            json.loads(sdfg_json)
            if i in changed:
                with np.load(folder / "steps" / f"{i:04d}.npz", allow_pickle=False) as data:
                    weights = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, gzip.BadGzipFile) as e:
            note = (f"step {i} ({entry.get('transformation')}) could not be read "
                    f"({type(e).__name__}); the session was restored up to step {i - 1}.")
            break
        ws._steps.append(_Step(entry, sdfg_json, weights, saved=True))
    position = min(manifest.get("position", 0), len(ws._steps) - 1)
    ws._steps[0].saved = True
    ws.goto(position)
    ws.recovery_note = note
    ws.folder = folder
    if note:  # make the folder consistent with what was restored
        save_session(ws, folder)
    return ws


def remove_session(folder) -> None:
    shutil.rmtree(folder, ignore_errors=True)
