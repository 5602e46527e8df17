"""Rebuilding in the same folder: a stable CMake command, a library that can be replaced.

DaCe 1.0.2 skips CMake's configure step only when the new cmake command
equals the one saved in ``build/cmake_configure.sh``. That command lists the
DaCe environments the generated code uses (OpenBLAS, ...), so switching an
operator between its BLAS and pure expansions would reconfigure on every
toggle. A folder therefore keeps the union of all environments it has ever
needed: linking a library the program no longer calls costs nothing, and
the command changes only when a new one first appears.

Loading: a process can hold only one library per path (``dlopen`` answers
with the old one), and DaCe's reaction to a loaded path is to copy the new
file to ``<name>.so_`` with a warning. The session finalizes and drops its
old program before a rebuild, which unloads it (``finalize()`` alone does
not, and ``ReloadableDLL.is_loaded()`` must not be used to check: its
``dlopen(RTLD_NOLOAD)`` is never closed and keeps the library loaded for
good). For anyone else still holding the previous program we unload it if
it is not running (calling it afterwards raises BuildError), or, when it is
still initialized, load the new library from a private copy.
"""
import _ctypes
import os
import shutil
import threading
import time
import weakref
from pathlib import Path

import dace
from dace.codegen import compiler

from workbench.errors import BuildError

MEMORY = "wb_environments.txt"   # beside dace_environments.csv in a program folder

_lock = threading.Lock()
_programs = {}   # realpath of a library -> weakref to the CompiledSDFG loaded from it


def stabilize_environments(program_folder: Path, extra=()) -> list:
    """Make ``dace_environments.csv`` the union of this and earlier builds (+ ``extra``)."""
    listing = Path(program_folder) / "dace_environments.csv"
    memory = Path(program_folder) / MEMORY
    needed = _names(listing)
    union = needed | {name for name in _names(memory) if _registered(name)}
    memory.write_text("\n".join(sorted(union)))
    # ``extra`` (the precompiled header) is a choice of this build, not a need
    # to remember: with fast builds off it must leave the command again.
    final = sorted(union | set(extra))
    listing.write_text("\n".join(final))
    return final


def listed_environments(program_folder: Path, extra=()) -> list:
    """The environments a freshly generated folder lists, plus ``extra``, written back.
    A unit's folder is new every time, so there is no earlier build to remember."""
    listing = Path(program_folder) / "dace_environments.csv"
    final = sorted(_names(listing) | set(extra))
    listing.write_text("\n".join(final))
    return final


def _names(path: Path) -> set:
    if not path.is_file():
        return set()
    return {line.strip() for line in path.read_text().splitlines() if line.strip()}


def _registered(name: str) -> bool:
    # A remembered plug-in environment that this process never imported
    # would make configure fail with KeyError; drop it instead.
    return name in dace.library._DACE_REGISTERED_ENVIRONMENTS


def load_program(library: str, program):
    """``compiler.get_program_handle`` without DaCe's "already loaded" copy dance."""
    path = os.path.realpath(library)
    with _lock:
        if is_loaded(path):
            previous = _programs.get(path)
            previous = previous() if previous is not None else None
            if previous is not None and not previous._initialized:
                _retire(previous)
        load_from = _private_copy(path) if is_loaded(path) else _drop_copies(path)
        compiled = compiler.get_program_handle(load_from, program)
        _programs[path] = weakref.ref(compiled)
        return compiled


def is_loaded(path: str) -> bool:
    """Whether this process has ``path`` loaded, without keeping it loaded."""
    try:
        handle = _ctypes.dlopen(path, os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    _ctypes.dlclose(handle)
    return True


def _retire(compiled) -> None:
    compiled._lib.unload()

    def replaced(*args, **kwargs):
        raise BuildError(f"this build of '{compiled.sdfg.name}' was replaced by a newer build "
                         f"in the same folder; use the new one")

    # Its function pointers now point into unmapped memory, and DaCe would
    # reload the file (by now another program's) on the next call: make any
    # later call fail in Python instead.
    compiled._lib.load = compiled._init = compiled._cfunc = replaced
    compiled._exit = None


def _private_copy(path: str) -> str:
    """A fresh file name for a library whose usual name is taken in this process."""
    base = Path(_drop_copies(path))
    copy = base.parent / f"{base.stem}-copy{time.time_ns()}{base.suffix}"
    shutil.copyfile(path, copy)
    return str(copy)


def _drop_copies(path: str) -> str:
    base = Path(path)
    for old in base.parent.glob(base.stem + "-copy*" + base.suffix):
        old.unlink(missing_ok=True)   # a loaded copy stays mapped; its file can go
    return path
