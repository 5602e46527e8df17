"""The thin top-level program: allocate, call the units in order, free.

Its C interface is the one DaCe gives a compiled SDFG (``__dace_init_<name>``,
``__program_<name>``, ``__dace_exit_<name>``, the arguments in the session
SDFG's signature order), so ``CompiledSDFG``, the isolated worker and the
benchmarks load it like any build. What a whole-program build decides across
operators stays here: the session's transients are allocated once, when the
program starts, and every view is its base array's pointer plus the offset
DaCe's own code would add. Each unit is loaded from its own library
(``RTLD_LOCAL``: two units' helper functions may share a name) and gets its
own instance (persistent buffers, oneDNN contexts) from its ``__dace_init``.

Built with ``WB_TIMERS`` the program times every call and writes a DaCe
instrumentation report per run (Chrome trace format, one event per unit,
located at the unit's node), so ``runtime.profiling`` reads it unchanged.
"""
import math
import subprocess
from pathlib import Path

import dace
from dace.config import Config

from workbench.build import pch
from workbench.errors import BuildError


def source(sdfg, layout, libraries: dict, infos: dict, perf_folder: Path) -> str:
    """C++ of the program. ``libraries``: key -> path; ``infos``: key -> cache metadata."""
    keys = list(dict.fromkeys(u.key for u in layout.units))
    index = {key: i for i, key in enumerate(keys)}
    arglist = sdfg.arglist()
    signature = sdfg.signature_arglist(with_types=False, arglist=arglist)
    cname = {a: f"arg{i}" for i, a in enumerate(signature)}
    params = ", ".join(f"{_ctype(arglist[a])} {cname[a]}" for a in signature)
    out = [_PRELUDE, "struct wb_state {"]
    for i, key in enumerate(keys):
        info = infos[key]
        types = ", ".join(["void*"] + [info["types"][a] for a in info["signature"]])
        inits = ", ".join(info["types"][a] for a in info["init"])
        out.append(f"  void* lib{i}; void* (*init{i})({inits}); void (*run{i})({types}); "
                   f"int (*exit{i})(void*);")
    out.append(f"  void* unit[{max(1, len(layout.units))}];")
    out.append(f"  char* data[{max(1, len(layout.transients))}];")
    out.append(f"  double seconds[{max(1, len(layout.units))}];")
    out.append("};")
    out.append(f'extern "C" DACE_EXPORTED void* __dace_init_{sdfg.name}() {{')
    out.append("  wb_state* s = new wb_state();")
    for i, key in enumerate(keys):
        name = infos[key]["name"]
        out.append(f'  s->lib{i} = dlopen({_quote(libraries[key])}, RTLD_NOW | RTLD_LOCAL);')
        out.append(f'  if (!s->lib{i}) {{ wb_fail(dlerror()); return nullptr; }}')
        for part, symbol in (("init", "__dace_init_"), ("run", "__program_"),
                             ("exit", "__dace_exit_")):
            out.append(f'  *(void**)&s->{part}{i} = dlsym(s->lib{i}, "{symbol}{name}");')
            out.append(f'  if (!s->{part}{i}) {{ wb_fail(dlerror()); return nullptr; }}')
    for u, unit in enumerate(layout.units):
        out.append(f"  s->unit[{u}] = s->init{index[unit.key]}();")
        out.append(f'  if (!s->unit[{u}]) {{ wb_fail("unit {u} ({_safe(unit.label)}) '
                   f'did not start"); return nullptr; }}')
    for t, name in enumerate(layout.transients):
        size = _bytes(sdfg.arrays[name])
        out.append(f"  s->data[{t}] = (char*)aligned_alloc(64, {size});")
        out.append(f"  if (!s->data[{t}]) {{ wb_fail(\"out of memory\"); return nullptr; }}")
        out.append(f"  memset(s->data[{t}], 0, {size});")
    out.append("  return s;")
    out.append("}")
    out.append(f'extern "C" DACE_EXPORTED void __program_{sdfg.name}(void* state'
               f'{", " + params if params else ""}) {{')
    out.append("  wb_state* s = (wb_state*)state;")
    for a in signature:
        if not isinstance(arglist[a], dace.data.Array):   # by value: the units take pointers
            out.append(f"  {_ctype(arglist[a])} {cname[a]}_value = {cname[a]};")
    out.append("#ifdef WB_TIMERS")
    out.append("  double wb_start = wb_now();")
    out.append("#endif")
    pointers = _pointers(sdfg, layout, arglist, cname)
    for u, unit in enumerate(layout.units):
        info = infos[unit.key]
        args = [f"s->unit[{u}]"] + [_argument(pointers[unit.data[a]], info["types"][a])
                                    for a in info["signature"]]
        out.append(f"  // unit: {_safe(unit.label)} -> {info['name']}")
        out.append("#ifdef WB_TIMERS")
        out.append("  { double t = wb_now();")
        out.append("#endif")
        out.append(f"  s->run{index[unit.key]}({', '.join(args)});")
        out.append("#ifdef WB_TIMERS")
        out.append(f"  s->seconds[{u}] = wb_now() - t; }}")
        out.append("#endif")
    out.append("#ifdef WB_TIMERS")
    labels = ", ".join(_quote(_safe(u.label)) for u in layout.units) or '""'
    ids = ", ".join(str(u.node_id) for u in layout.units) or "0"
    out.append(f"  static const char* labels[] = {{{labels}}};")
    out.append(f"  static const int ids[] = {{{ids}}};")
    out.append(f"  wb_report({_quote(perf_folder)}, {_quote(_safe(sdfg.name))}, wb_start, "
               f"wb_now() - wb_start, labels, ids, s->seconds, {len(layout.units)});")
    out.append("#endif")
    out.append("}")
    out.append(f'extern "C" DACE_EXPORTED int __dace_exit_{sdfg.name}(void* state) {{')
    out.append("  wb_state* s = (wb_state*)state;")
    out.append("  if (!s) return 0;")
    out.append("  int result = 0;")
    for u, unit in enumerate(layout.units):
        out.append(f"  if (s->unit[{u}]) result |= s->exit{index[unit.key]}(s->unit[{u}]);")
    for t in range(len(layout.transients)):
        out.append(f"  free(s->data[{t}]);")
    for i in range(len(keys)):
        out.append(f"  if (s->lib{i}) dlclose(s->lib{i});")
    out.append("  delete s;")
    out.append("  return result;")
    out.append("}")
    return "\n".join(out) + "\n"


def _argument(address: str, ctype: str) -> str:
    """A unit's argument: the address, or the value for a scalar it takes by value."""
    return address if ctype == "void*" else f"*({ctype}*){address}"


def _pointers(sdfg, layout, arglist, cname: dict) -> dict:
    """Session array -> the C expression of its address inside the program function."""
    held = {name: f"(void*)s->data[{t}]" for t, name in enumerate(layout.transients)}
    for name, desc in arglist.items():
        held[name] = (f"(void*){cname[name]}" if isinstance(desc, dace.data.Array)
                      else f"(void*)&{cname[name]}_value")

    def address(name):
        if name in held:
            return held[name]
        base, offset = layout.views[name]
        itemsize = sdfg.arrays[base].dtype.bytes
        return f"(void*)((char*){address(base)} + {offset * itemsize})"

    return {name: address(name) for name in
            {n for unit in layout.units for n in unit.data.values()}}


def _bytes(desc) -> int:
    return max(64, math.ceil(int(desc.total_size) * desc.dtype.bytes / 64) * 64)


def _ctype(desc) -> str:
    return "void*" if isinstance(desc, dace.data.Array) else desc.dtype.ctype


def _quote(text) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _safe(text) -> str:
    return str(text).replace("\\", "").replace('"', "").replace("\n", " ")


def compile_program(source_file: Path, library: Path, timers: bool) -> None:
    """``source_file`` into ``library`` with the CPU flags (no dace.h: it needs none)."""
    cxx = pch.compiler_path() or "c++"
    flags = [f for f in (Config.get("compiler", "cpu", "args") or "").split()
             if not f.startswith("-march")]   # plain calls: no vector code to tune
    command = [cxx, *flags, "-O1", "-fPIC", "-shared", *(["-DWB_TIMERS"] if timers else []),
               "-o", str(library), str(source_file), "-ldl"]
    library.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=library.parent)
    if done.returncode != 0:
        raise BuildError(f"compiling the program that calls the units failed: "
                         f"{(done.stderr or done.stdout).strip()[:600]} (source {source_file})")


_PRELUDE = r'''// Generated by the DaCe Workbench (workbench/build/units/program.py): the
// program that calls the separately compiled units in order.
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <ctime>
#include <sys/stat.h>
#define DACE_EXPORTED __attribute__((visibility("default")))

static void wb_fail(const char* why) { fprintf(stderr, "workbench program: %s\n", why ? why : "?"); }

static double wb_now() {
  timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void wb_report(const char* folder, const char* name, double start, double total,
                      const char** labels, const int* ids, const double* seconds, int n) {
  mkdir(folder, 0755);
  timespec now; clock_gettime(CLOCK_REALTIME, &now);
  char path[4096];
  snprintf(path, sizeof path, "%s/report-%lld%09ld.json", folder, (long long)now.tv_sec,
           now.tv_nsec);
  FILE* f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "{\"sdfgHash\": \"\", \"traceEvents\": [");
  fprintf(f, "{\"name\": \"%s\", \"cat\": \"Timer\", \"ph\": \"X\", \"ts\": %.3f, "
             "\"dur\": %.3f, \"pid\": 0, \"tid\": 0, \"args\": {\"cfg_id\": 0}}",
          name, start * 1e6, total * 1e6);
  double at = start;
  for (int i = 0; i < n; ++i) {
    fprintf(f, ", {\"name\": \"%s\", \"cat\": \"Timer\", \"ph\": \"X\", \"ts\": %.3f, "
               "\"dur\": %.3f, \"pid\": 0, \"tid\": 0, \"args\": {\"cfg_id\": 0, "
               "\"state_id\": 0, \"id\": %d}}", labels[i], at * 1e6, seconds[i] * 1e6, ids[i]);
    at += seconds[i];
  }
  fprintf(f, "]}\n");
  fclose(f);
}
'''


def place_stub(library: Path, name: str) -> None:
    """DaCe's loader stub (``dacestub.cpp``) beside ``library``, as ``CompiledSDFG`` wants it:
    compiled once per compiler and DaCe into the unit cache, then hard-linked."""
    import hashlib
    import os
    import shutil
    import threading
    from workbench.build.units import cache
    stub_source = Path(dace.__file__).parent / "codegen" / "tools" / "dacestub.cpp"
    cxx = pch.compiler_path() or "c++"
    key = hashlib.sha256(stub_source.read_bytes() + cxx.encode() + dace.__version__.encode())
    compiled = cache.root() / "stubs" / f"libdacestub-{key.hexdigest()[:16]}.so"
    if not compiled.is_file():
        compiled.parent.mkdir(parents=True, exist_ok=True)
        # per process and thread: a session builds its program and the profile's
        # instrumented one side by side, and both may find no stub yet
        staging = compiled.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        done = subprocess.run([cxx, "-O2", "-fPIC", "-shared", "-fopenmp", "-o", str(staging),
                               str(stub_source), "-ldl"], capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"compiling DaCe's loader stub failed: {done.stderr.strip()[:400]}")
        staging.replace(compiled)
    target = library.parent / f"libdacestub_{name}.so"
    if not target.exists():
        try:
            os.link(compiled, target)
        except OSError:
            shutil.copyfile(compiled, target)
