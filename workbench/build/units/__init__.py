"""Builds by units: a rebuild compiles what changed, not the network.

A one-state CPU program is cut into units (``split``: one per top-level
operator or copy), each keyed by its content (``keys``: code, shapes, types,
strides, compiler and flags; not array names or labels). A unit whose key is
in the on-disk cache (``cache``, shared by sessions and processes) is not
generated nor compiled again; the others are generated one after another in
this thread and compiled side by side (``compile``). A thin program
(``program``) allocates the session's transients, computes the views, and
calls the units in a topological order of the state; it has DaCe's C
interface, so everything that runs a ``Build`` runs it.

So a step that changes three operators compiles three units, the twelve
layers of a ViT compile their operators once, and a second session (or
process) building the same network compiles only the thin program.
"""
import contextlib
import copy
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workbench.build import cancel, reuse
from workbench.build.units import cache, keys, program
from workbench.build.units.split import NotSplittable, split
from workbench.errors import BuildError, Cancelled, WorkbenchError
from workbench.progress import SILENT

log = logging.getLogger("workbench.build")


@contextlib.contextmanager
def _cancellable(cancel_event, folder, name: str, library: Path):
    """Setting ``cancel_event`` kills the compilers working in ``folder``; the build then
    ends in ``Cancelled`` and leaves no half-written unit or program behind (units
    finished before are in the cache, whole)."""
    with cancel.stoppable(cancel_event, folder):
        try:
            yield
        except Exception:
            if cancel_event is None or not cancel_event.is_set():
                raise
        if cancel_event is not None and cancel_event.is_set():
            shutil.rmtree(Path(folder) / "unit-work", ignore_errors=True)
            library.unlink(missing_ok=True)
            raise Cancelled(f"the build of '{name}' was cancelled while compiling; "
                            f"nothing changed") from None


def _compile_units(missing, work, program_folder, simplify, names, infos, libraries,
                   cancel_event, step) -> float:
    """Generate the ``missing`` units one after another, compile them side by side; fills
    ``infos`` and ``libraries``; the seconds spent generating code."""
    from workbench.build.units import compile as unit_compile
    from workbench.ops.node import constant_reads
    codegen_s, learned = 0.0, {}
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        pending, by_recipe = [], {}
        for unit in missing:
            unit.compiled = False
            if cancel_event is not None and cancel_event.is_set():
                break
            if learned.get(unit.base) is False:   # its code is its constant-blind twin's
                unit.key = keys.without_constants(unit.base)
                continue
            unknown = unit.base is not None and cache.reads_constants(unit.base) is None
            t, reads = time.perf_counter(), constant_reads()
            try:
                gen = unit_compile.generate(unit, work, simplify)
            except WorkbenchError:
                raise   # typed already (an unsupported case names its node)
            except Exception as e:
                raise BuildError(f"generating the code of '{unit.label}' failed: "
                                 f"{type(e).__name__}: {str(e).strip()[:400]}") from e
            codegen_s += time.perf_counter() - t
            unit.compiled = True
            if unknown:
                learned[unit.base] = constant_reads() != reads
                cache.record_constant_reads(unit.base, learned[unit.base])
                if not learned[unit.base]:
                    unit.key = gen.key = keys.without_constants(unit.base)
            envs = tuple(gen.environments)
            if unit_compile.known_recipe(gen.environments) is None and envs in by_recipe:
                by_recipe[envs].result()   # the first of a set of environments makes its recipe
            future = pool.submit(unit_compile.compile_generated, gen, names)
            by_recipe.setdefault(envs, future)
            pending.append((unit, gen, future))
        for done, (unit, gen, future) in enumerate(pending, 1):
            built = future.result()
            infos[unit.key] = gen.info
            linked = program_folder / "units" / f"{gen.name}.so"
            if not linked.exists():
                linked.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(built, linked)
            libraries[unit.key] = str(linked)
            shutil.rmtree(gen.folder, ignore_errors=True)
            step(done, unit.label)
    return codegen_s


def _write_sources(sdfg, layout, libraries, infos, program_folder) -> Path:
    """The program's C++, with each unit's beside it (for the code panel)."""
    text = program.source(sdfg, layout, libraries, infos, program_folder / "perf")
    source_file = program_folder / "src" / "cpu" / f"{sdfg.name}.cpp"
    shutil.rmtree(source_file.parent, ignore_errors=True)   # an earlier build's units
    for key, info in infos.items():
        cache.link_into(key, source_file.parent, f"{info['name']}.cpp", cache.SOURCE)
    source_file.write_text(text)
    return source_file


def interface(sdfg):
    """What ``CompiledSDFG`` and the session read of a built program: its name, arguments,
    symbols and constants, copied (a deep copy of a ViT took 0.6 s). Its one state is
    empty, so a timer event names its unit by the event's own name."""
    import dace
    light = dace.SDFG(sdfg.name)
    light.add_state("program")
    for name, desc in sdfg.arglist().items():
        if name in sdfg.arrays:
            light.add_datadesc(name, copy.deepcopy(desc))
        elif name not in light.symbols:
            light.add_symbol(name, sdfg.symbols[name])
    light.constants_prop = copy.deepcopy(sdfg.constants_prop)
    return light


def why_not(sdfg):
    """Why ``sdfg`` cannot be built by units, or None when it can."""
    try:
        split(sdfg)
    except NotSplittable as e:
        return str(e)
    return None


def compile_by_units(sdfg, folder: Path, progress=SILENT, names: dict = None,
                     simplify: bool = True, timers: bool = False, defer_compile: bool = False):
    """A ``Build`` of ``sdfg`` made of cached and freshly compiled units."""
    from workbench.build import Build, pch
    timings = {}
    t = time.perf_counter()
    with progress.phase("split into units"):
        layout = split(sdfg)
        salted = keys.salt() + ("" if simplify else "-unsimplified")
        for unit in layout.units:
            unit.key, unit.base = keys.unit_keys(unit.sdfg, salted)
            if unit.base is not None and cache.reads_constants(unit.base) is False:
                unit.key = keys.without_constants(unit.base)
    timings["split"] = time.perf_counter() - t
    first = {}
    for unit in layout.units:
        first.setdefault(unit.key, unit)
    program_folder = Path(folder) / sdfg.name
    infos, libraries = {}, {}
    for key in first:   # linked at once: a unit evicted meanwhile by another process is a miss
        info = cache.lookup(key)
        path = info and cache.link_into(key, program_folder / "units", f"{info['name']}.so")
        infos[key], libraries[key] = (info, str(path)) if path else (None, None)
    missing = [first[key] for key, info in infos.items() if info is None]
    header = pch.header_for_build(progress, timings) if missing else None
    cancel_event = getattr(progress, "cancel_event", None)
    library = program_folder / "units-build" / f"lib{sdfg.name}.so"
    summary = f"{len(missing)} new of {len(first)} distinct units, {len(layout.units)} in all"
    log.info("building '%s' by units: %s", sdfg.name, summary)
    t = time.perf_counter()
    with progress.phase("compile", total=len(missing) + (0 if defer_compile else 1)) as step:
        with _cancellable(cancel_event, folder, sdfg.name, library):
            codegen_s = _compile_units(missing, Path(folder) / "unit-work", program_folder,
                                       simplify, names, infos, libraries, cancel_event, step)
            blind = {u.base for u in missing if u.base is not None and u.key ==
                     keys.without_constants(u.base)}
            for unit in layout.units:   # twins that differ only in constants their code ignores
                if unit.base in blind:
                    unit.key = keys.without_constants(unit.base)
            used = {unit.key for unit in layout.units}
            infos = {key: infos[key] for key in used}
            libraries = {key: libraries[key] for key in used}
            if missing:
                cache.evict()
            source_file = _write_sources(sdfg, layout, libraries, infos, program_folder)
            if not defer_compile:
                program.compile_program(source_file, library, timers)
                step(len(missing) + 1, "the program")
    timings["codegen"] = codegen_s
    timings["compile"] = time.perf_counter() - t - codegen_s
    units = {"units": len(layout.units), "distinct": len(infos),
             "compiled": sum(1 for u in missing if u.compiled)}

    def finish():
        t = time.perf_counter()
        if defer_compile:
            with progress.phase("compile"), _cancellable(cancel_event, folder, sdfg.name, library):
                program.compile_program(source_file, library, timers)
        program.place_stub(library, sdfg.name)
        timings["program"] = time.perf_counter() - t
        t = time.perf_counter()
        loaded_sdfg = interface(sdfg)
        loaded_sdfg.build_folder = str(program_folder)
        compiled = reuse.load_program(str(library), loaded_sdfg)
        timings["load"] = time.perf_counter() - t
        return Build(compiled, loaded_sdfg, program_folder, "cpu", timings, header, units=units)

    return finish if defer_compile else finish()
