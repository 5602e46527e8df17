"""Where the window's sessions live, and how Open Recent names them.

A model opened in the window autosaves into a session folder of its own
(``workbench.session.folder``) under ``root()``: ``$WORKBENCH_SESSIONS``, else
``$XDG_DATA_HOME/dace-workbench/sessions``, else
``~/.local/share/dace-workbench/sessions``. The folder is reserved (made,
empty) when the model opens and filled at the first step; an automatic folder
that never got a step is removed when its session ends. File > Save Session
As moves an automatic folder to the place the user picks; a folder the user
chose is left as it was (the session then autosaves into the new one).
"""
import json
import os
import re
import shutil
import time
from pathlib import Path

from workbench.errors import BadInputError
from workbench.session.folder import MANIFEST


def root() -> Path:
    """The folder that holds the automatic session folders."""
    if os.environ.get("WORKBENCH_SESSIONS"):
        return Path(os.environ["WORKBENCH_SESSIONS"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "dace-workbench" / "sessions"


def reserve(model_name: str) -> Path:
    """A new, empty folder ``<model>-<YYYYmmdd-HHMMSS>[-N]`` under ``root()``; made
    now so that two sessions opened in the same second never share one."""
    base = root()
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInputError(f"no session folder can be made under '{base}' ({e}); set "
                            f"$WORKBENCH_SESSIONS to a folder you can write.") from None
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(model_name)).stem).strip("._") or "model"
    name = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 1000):
        folder = base / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
        except OSError as e:
            raise BadInputError(f"no session folder can be made under '{base}' ({e}).") \
                from None
    raise BadInputError(f"no free session folder name '{name}-N' under '{base}'.")


def is_automatic(folder) -> bool:
    """True for a folder ``reserve`` made (directly under ``root()``)."""
    return folder is not None and Path(folder).resolve().parent == root().resolve()


def written(folder) -> bool:
    """True once the session folder holds a manifest (its first step, or Ctrl+S)."""
    return folder is not None and (Path(folder) / MANIFEST).is_file()


def discard_if_empty(folder) -> None:
    """Remove a reserved folder that never got a step (only ever an empty one)."""
    if folder is not None:
        try:
            Path(folder).rmdir()
        except OSError:   # not empty (or already gone): it is kept
            pass


def check_target(folder, current) -> Path:
    """The folder Save Session As may write to: the current one, or a new or empty one."""
    folder = Path(folder).expanduser()
    if current is not None and folder.resolve() == Path(current).resolve():
        return folder
    if current is not None and folder.resolve().is_relative_to(Path(current).resolve()):
        raise BadInputError(f"'{folder}' is inside the session folder '{current}'; choose a "
                            f"folder elsewhere. Nothing was saved there.")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BadInputError(f"'{folder}' is not an empty folder; choose (or make) an empty "
                            f"folder for the session. Nothing was saved there.")
    return folder


def remove_moved(old, new) -> bool:
    """After the session was saved into ``new``: remove ``old`` when it was an automatic
    folder (the session moved); a folder the user chose stays. True when removed."""
    if old is None or not is_automatic(old) or Path(old).resolve() == Path(new).resolve():
        return False
    shutil.rmtree(old, ignore_errors=True)
    return True


def recent_entry(item: str) -> tuple:
    """(label, available) of ``item`` in Open Recent: a session folder or a model (a path
    or a bundled name), told apart at a glance; a path that is gone is not available."""
    path = Path(item)
    if path.is_dir():
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            steps = len(manifest.get("steps") or [])
            what = f"{manifest.get('model')}, step {manifest.get('position', 0)} of {steps}"
        except (OSError, ValueError):
            what = "not readable"
        return f"Session: {what} — {item}", True
    if os.sep in item and not path.exists():
        return f"Gone: {item}", False
    return f"Model: {item}", True
