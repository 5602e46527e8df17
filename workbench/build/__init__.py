"""Turning a session's SDFG into a loaded shared library.

Phases (each timed): copy + expand library nodes, simplify, generate code,
compile, load. Build folders live under one cache directory, one folder per
process and session (two processes compiling into one folder corrupt each
other's objects), and the same SDFG name is reused inside a folder so that
a rebuild skips CMake's configure step and recompiles only what changed.

What makes a rebuild fast (measured by ``python -m workbench.build.bench``):
the unchanged cmake command (``reuse.stabilize_environments``), Ninja, and a
precompiled dace.h (``pch``). ``WORKBENCH_FAST_BUILD=0`` turns the last two
off.
"""
import copy
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import dace
from dace.codegen import codegen, compiler

from workbench.errors import BuildError, WorkbenchError
from workbench.build import pch, reuse
from workbench.build.settings import (apply_build_settings, building_for,  # noqa: F401
                                      cache_dir, fast_build_enabled)
from workbench.build.storage import heap_for_large_transients
from workbench.progress import SILENT

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
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def simplify_program(program: dace.SDFG) -> None:
    """DaCe's simplify, with multi-state inlining off when the program has Views.

    Multi-state inlining splits the state around the nested SDFG and copies
    the access nodes cut by the split; a View's copy loses the edge to the
    data it views (DaCe 1.0.2), which leaves an invalid SDFG. The layout
    transformations make Views (reshapes and slices without copies).
    """
    from dace.transformation.passes.fusion_inline import InlineSDFGs
    from dace.transformation.passes.simplify import SimplifyPass
    simplifier = SimplifyPass(validate=True)
    if any(isinstance(desc, dace.data.View) for desc in program.arrays.values()):
        for step in simplifier.passes:
            if isinstance(step, InlineSDFGs):
                step.multistate = False
    simplifier.apply_pass(program, {})


def compile_sdfg(sdfg: dace.SDFG, folder: Path, target: str = "cpu", progress=SILENT,
                 simplify: bool = True, instrument_with=None) -> Build:
    """Expand, generate and compile ``sdfg`` (a copy) inside ``folder``.

    Rebuilding the same SDFG name in the same folder reuses CMake's
    configuration and the unchanged objects. Release the previous build of
    that folder first (``build.compiled.finalize()`` and drop it), as the
    session does; one still held is unloaded if idle, else left loaded and
    the new library is loaded from a copy.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    apply_build_settings()
    timings = {}
    with progress.phase("expand"):
        t = time.perf_counter()
        program = copy.deepcopy(sdfg)
        program.build_folder = str(Path(folder) / program.name)
        if target == "gpu":  # before expansion, so operators expand for the GPU
            program.apply_gpu_transformations()
        try:
            with building_for(target):
                program.expand_library_nodes(recursive=True)
        except WorkbenchError:
            raise  # typed already (an unsupported case names its node)
        except Exception as e:
            raise BuildError(f"expanding the operators of '{program.name}' failed: "
                             f"{type(e).__name__}: {_first_line(str(e))}") from e
        timings["expand"] = time.perf_counter() - t
    if simplify:
        with progress.phase("simplify"):
            t = time.perf_counter()
            simplify_program(program)
            timings["simplify"] = time.perf_counter() - t
    if instrument_with is not None:  # timers go on the final, simplified program
        instrument_with(program)
    with progress.phase("generate code"):
        t = time.perf_counter()
        if target == "cpu":
            heap_for_large_transients(program)
        try:
            program.fill_scope_connectors()
            objects = codegen.generate_code(program, validate=True)
        except Exception as e:
            raise BuildError(f"code generation failed for '{program.name}': "
                             f"{_first_line(str(e))}") from e
        program_folder = compiler.generate_program_folder(program, objects, program.build_folder)
        timings["codegen"] = time.perf_counter() - t
    if target == "gpu":
        return Build(None, program, Path(program_folder), target, timings)
    header = _precompiled_header(progress, timings)
    reuse.stabilize_environments(Path(program_folder), [pch.ENVIRONMENT] if header else [])
    with progress.phase("compile"):
        t = time.perf_counter()
        try:
            library = compiler.configure_and_compile(program_folder, program.name)
        except Exception as e:
            first = compiler_first_error(str(e))
            raise BuildError(f"compilation of '{program.name}' failed: {first} "
                             f"(sources in {program_folder})") from e
        timings["compile"] = time.perf_counter() - t
    with progress.phase("load"):
        t = time.perf_counter()
        compiled = reuse.load_program(library, program)
        timings["load"] = time.perf_counter() - t
    return Build(compiled, program, Path(program_folder), target, timings, header)


def _precompiled_header(progress, timings: dict):
    """The header to -include, made on the first build that needs it (timed apart)."""
    t = time.perf_counter()
    try:
        if pch.decided():
            return pch.ensure_pch()
        with progress.phase("precompile dace.h (once per compiler and flags)"):
            return pch.ensure_pch()
    except Exception as e:   # a faster build is never worth a failed one
        pch.log.warning("precompiled dace.h unavailable, building without it: %s", e)
        return None
    finally:
        if time.perf_counter() - t > 0.05:
            timings["precompile_header"] = time.perf_counter() - t


def compiler_first_error(output: str) -> str:
    """The compiler's first ``error:`` line, else a line that mentions an error, else the first."""
    lines = [line.strip() for line in output.splitlines()]
    for pattern in (r":\d+(:\d+)?: (fatal )?error:", r"\berror\b.*:|:.*\berror\b"):
        for line in lines:
            if re.search(pattern, line, re.IGNORECASE):
                return line[:400]
    return _first_line(output)


def _first_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[0][:400] if lines else "unknown error"
