"""Turning a session's SDFG into a loaded shared library.

Phases (each timed): copy + expand library nodes, simplify, generate code,
compile, load. Build folders live under one cache directory, one folder per
process and session, and the same SDFG name is reused inside a folder so
that CMake does not reconfigure.
"""
import copy
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import dace
from dace.codegen import codegen, compiler

from workbench.errors import BuildError
from workbench.build.settings import apply_build_settings, cache_dir
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

    @property
    def seconds(self) -> float:
        return sum(self.timings.values())


def session_build_folder(session_id: str) -> Path:
    """A build folder owned by this process and session only."""
    folder = cache_dir() / "builds" / f"{os.getpid()}-{session_id}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def compile_sdfg(sdfg: dace.SDFG, folder: Path, target: str = "cpu", progress=SILENT,
                 simplify: bool = True) -> Build:
    """Expand, generate and compile ``sdfg`` (a copy) inside ``folder``."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
    apply_build_settings()
    timings = {}
    with progress.phase("expand"):
        t = time.perf_counter()
        program = copy.deepcopy(sdfg)
        program.build_folder = str(folder / program.name)
        program.expand_library_nodes(recursive=True)
        if target == "gpu":
            program.apply_gpu_transformations()
        timings["expand"] = time.perf_counter() - t
    if simplify:
        with progress.phase("simplify"):
            t = time.perf_counter()
            program.simplify()
            timings["simplify"] = time.perf_counter() - t
    with progress.phase("generate code"):
        t = time.perf_counter()
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
    with progress.phase("compile"):
        t = time.perf_counter()
        try:
            library = compiler.configure_and_compile(program_folder, program.name)
        except Exception as e:
            raise BuildError(f"compilation of '{program.name}' failed: "
                             f"{compiler_first_error(str(e))} (sources in {program_folder})") from e
        timings["compile"] = time.perf_counter() - t
    with progress.phase("load"):
        t = time.perf_counter()
        compiled = compiler.get_program_handle(library, program)
        timings["load"] = time.perf_counter() - t
    return Build(compiled, program, Path(program_folder), target, timings)


def compiler_first_error(output: str) -> str:
    """The compiler's first ``error:`` line, else the first line of output."""
    for line in output.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE) and ":" in line:
            return line.strip()[:400]
    return _first_line(output)


def _first_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[0][:400] if lines else "unknown error"
