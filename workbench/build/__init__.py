"""Turning a session's SDFG into a loaded shared library.

Phases (each timed): copy + expand library nodes, simplify, generate code,
compile, load. Build folders live under one cache directory, one folder per
process and session (two processes compiling into one folder corrupt each
other's objects), and the same SDFG name is reused inside a folder so that
a rebuild skips CMake's configure step and recompiles only what changed.

What makes a rebuild fast (measured by ``python -m workbench.build.build_speed``):
the unchanged cmake command (``reuse.stabilize_environments``), Ninja, and a
precompiled dace.h (``pch``); a new folder's first configure starts from an
earlier one's (``configure_seed``). ``WORKBENCH_FAST_BUILD=0`` turns the last
three off.
"""
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import dace
from dace.codegen import codegen, compiler

from workbench import dace_patches
from workbench.errors import BuildError, Cancelled
from workbench.build import cancel, errors_at, pch, reuse
from workbench.build.prepare import before_codegen, prepared
from workbench.build.settings import (apply_build_settings, building_for,  # noqa: F401
                                      cache_dir, fast_build_enabled, unit_builds_enabled)
from workbench.progress import SILENT

log = logging.getLogger("workbench.build")
TARGETS = ("cpu", "gpu")


@dataclass
class Build:
    """A compiled program and what it took to make it."""
    compiled: object
    sdfg: dace.SDFG          # the expanded SDFG that was compiled
    folder: Path
    target: str
    timings: dict = field(default_factory=dict)
    precompiled_header: Path = None   # the -include'd header, when one was used
    arch: str = None                  # GPU: the CUDA architecture compiled for ("80")
    units: dict = None                # by units: how many, how many distinct, how many compiled

    @property
    def seconds(self) -> float:
        return sum(self.timings.values())


def session_build_folder(session_id: str) -> Path:
    """A build folder owned by this process and session only."""
    _prune_dead_processes()
    folder = cache_dir() / "builds" / f"{os.getpid()}-{session_id}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


_pruned = False


def _prune_dead_processes() -> None:
    """Once per process: remove build folders whose process has ended (~0.7 MB each;
    nobody can reuse them, as folders are never shared between processes)."""
    global _pruned
    if _pruned:
        return
    _pruned = True
    import shutil
    for folder in (cache_dir() / "builds").glob("*-*"):
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a folder or file it owns may be in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def compile_sdfg(sdfg: dace.SDFG, folder: Path, target: str = "cpu", progress=SILENT,
                 simplify: bool = True, instrument_with=None, names: dict = None,
                 defer_compile: bool = False, by_units: bool = None) -> Build:
    """Expand, generate and compile ``sdfg`` (a copy) inside ``folder``.

    A compiler error raises ``CompileError`` naming the ONNX node whose code
    failed (``names``: SDFG node name -> ONNX name, for operators expanded
    earlier) and the compiler's first error line. A ``progress`` with a
    ``cancel_event`` (the GUI's) stops the compiler when the event is set:
    ``Cancelled``, and the folder is left fit for the next build.

    Rebuilding the same SDFG name in the same folder reuses CMake's
    configuration and the unchanged objects. Release the previous build of
    that folder first (``release(build)`` and drop it), as the
    session does; one still held is unloaded if idle, else left loaded and
    the new library is loaded from a copy. ``defer_compile`` returns, after code
    generation, a function that compiles and loads (see ``compile_together``).

    A one-state CPU program is built by units (``build.units``: each operator
    compiled once into a content-keyed cache, a thin program calling them) unless
    ``by_units`` is False or ``WORKBENCH_UNIT_BUILDS=0``; anything else as one program.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    apply_build_settings()
    dace_patches.install()
    if target == "cpu" and (unit_builds_enabled() if by_units is None else by_units):
        from workbench.build import units
        try:
            return units.compile_by_units(sdfg, folder, progress=progress, names=names,
                                          simplify=simplify, timers=instrument_with is not None,
                                          defer_compile=defer_compile)
        except units.NotSplittable as e:
            log.info("building '%s' as one program: %s", sdfg.name, e)
    with progress.phase("expand"):
        program, timings = prepared(sdfg, folder, target, simplify, instrument_with)
    with progress.phase("generate code"):
        t = time.perf_counter()
        try:
            before_codegen(program, target)
            objects = codegen.generate_code(program, validate=True)
        except Exception as e:
            where = errors_at.invalid_node(e, names)
            raise BuildError(f"code generation failed for '{program.name}'"
                             f"{f' at ONNX node {where!r}' if where else ''}: "
                             f"{_first_line(str(e))}") from e
        program_folder = compiler.generate_program_folder(program, objects, program.build_folder)
        timings["codegen"] = time.perf_counter() - t
    if target == "gpu":
        return Build(None, program, Path(program_folder), target, timings)
    header = pch.header_for_build(progress, timings)
    reuse.stabilize_environments(Path(program_folder), [pch.ENVIRONMENT] if header else [])
    if defer_compile:
        return lambda: _compile_and_load(program, program_folder, header, timings, progress,
                                         names)
    return _compile_and_load(program, program_folder, header, timings, progress, names)


def compile_together(jobs: list) -> list:
    """Builds of several SDFGs (``compile_sdfg`` keyword arguments each), the compilers
    running at the same time: the Python phases run one after another (DaCe's code
    generation is not thread-safe), the C++ compilers and loads in parallel threads.
    A profile needs the program and its instrumented twin: on 2 cores this takes
    one compile's time instead of two."""
    finishers = [compile_sdfg(**job, defer_compile=True) for job in jobs]
    pending = [f for f in finishers if callable(f)]
    if len(pending) < 2:
        return [f() if callable(f) else f for f in finishers]
    results = {}
    with ThreadPoolExecutor(len(pending)) as pool:
        futures = {i: pool.submit(f) for i, f in enumerate(finishers) if callable(f)}
        for i, future in futures.items():
            results[i] = future.result()
    return [results.get(i, f) for i, f in enumerate(finishers)]


def _compile_and_load(program, program_folder, header, timings, progress, names,
                      target="cpu") -> Build:
    with progress.phase("compile"):
        t = time.perf_counter()
        cancel_event = getattr(progress, "cancel_event", None)
        try:
            with cancel.stoppable(cancel_event, program_folder):
                library = compiler.configure_and_compile(program_folder, program.name)
        except Exception as e:
            if cancel_event is not None and cancel_event.is_set():
                cancel.forget_outputs(program_folder, program.name)
                raise Cancelled(f"the build of '{program.name}' was cancelled while "
                                f"compiling; nothing changed") from None
            raise errors_at.compile_error(program, program_folder, str(e), names) from e
        timings["compile"] = time.perf_counter() - t
    with progress.phase("load"):
        t = time.perf_counter()
        compiled = reuse.load_program(library, program)
        timings["load"] = time.perf_counter() - t
    return Build(compiled, program, Path(program_folder), target, timings, header)


compiler_first_error = errors_at.compiler_first_error
_first_line = errors_at.first_line


def release(build) -> None:
    """End a loaded program (its ``__dace_exit``), if it was ever initialized.

    Programs normally run in the isolated worker, so the copy loaded in this
    process often never was; DaCe's ``finalize`` would then call
    ``__dace_exit(NULL)``, which crashed the process on SqueezeNet.
    """
    compiled = build.compiled if build is not None else None
    if compiled is not None and getattr(compiled, "_initialized", False):
        compiled.finalize()
