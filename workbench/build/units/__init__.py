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
import copy
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workbench.build import reuse
from workbench.build.units import cache, keys, program
from workbench.build.units.split import NotSplittable, split
from workbench.errors import BuildError, Cancelled
from workbench.progress import SILENT

log = logging.getLogger("workbench.build")


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
    from workbench.build import Build, _precompiled_header
    from workbench.build.units import compile as unit_compile
    timings = {}
    t = time.perf_counter()
    with progress.phase("split into units"):
        layout = split(sdfg)
        salted = keys.salt()
        for unit in layout.units:
            unit.key = keys.unit_key(unit.sdfg, salted) + ("" if simplify else "-unsimplified")
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
    header = _precompiled_header(progress, timings) if missing else None
    work = Path(folder) / "unit-work"
    cancel_event = getattr(progress, "cancel_event", None)
    codegen_s = 0.0
    t = time.perf_counter()
    with progress.phase(f"compile {len(missing)} of {len(first)} distinct units "
                        f"({len(layout.units)} in all)"):
        with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
            pending, by_recipe = [], {}
            for unit in missing:
                if cancel_event is not None and cancel_event.is_set():
                    raise Cancelled("the build was cancelled; nothing changed")
                g = time.perf_counter()
                try:
                    gen = unit_compile.generate(unit, work, simplify)
                except BuildError:
                    raise
                except Exception as e:
                    raise BuildError(f"generating the code of '{unit.label}' failed: "
                                     f"{type(e).__name__}: {str(e).strip()[:400]}") from e
                codegen_s += time.perf_counter() - g
                envs = tuple(gen.environments)
                if unit_compile.known_recipe(gen.environments) is None and envs in by_recipe:
                    by_recipe[envs].result()   # the first of a set of environments makes its recipe
                future = pool.submit(unit_compile.compile_generated, gen, names)
                by_recipe.setdefault(envs, future)
                pending.append((unit, gen, future))
            for unit, gen, future in pending:
                library = future.result()
                infos[unit.key] = gen.info
                linked = program_folder / "units" / f"{gen.name}.so"
                if not linked.exists():
                    linked.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(library, linked)
                libraries[unit.key] = str(linked)
                shutil.rmtree(gen.folder, ignore_errors=True)
    timings["codegen"] = codegen_s
    timings["compile"] = time.perf_counter() - t - codegen_s
    if missing:
        cache.evict()
    t = time.perf_counter()
    text = program.source(sdfg, layout, libraries, infos, program_folder / "perf")
    source_file = program_folder / "src" / "cpu" / f"{sdfg.name}.cpp"
    shutil.rmtree(source_file.parent, ignore_errors=True)   # an earlier build's units
    for key, info in infos.items():   # beside the program's, for the code panel to show
        cache.link_into(key, source_file.parent, f"{info['name']}.cpp", cache.SOURCE)
    source_file.write_text(text)
    library = program_folder / "units-build" / f"lib{sdfg.name}.so"
    library.parent.mkdir(parents=True, exist_ok=True)

    def finish():
        program.compile_program(source_file, library, timers)
        program.place_stub(library, sdfg.name)
        timings["program"] = time.perf_counter() - t
        t_load = time.perf_counter()
        loaded_sdfg = interface(sdfg)
        loaded_sdfg.build_folder = str(program_folder)
        compiled = reuse.load_program(str(library), loaded_sdfg)
        timings["load"] = time.perf_counter() - t_load
        return Build(compiled, loaded_sdfg, program_folder, "cpu", timings, header,
                     units={"units": len(layout.units), "distinct": len(first),
                            "compiled": len(missing)})

    return finish if defer_compile else finish()
