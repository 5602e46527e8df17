"""Code for one unit, and its compiler call.

Code generation is DaCe's, on the unit's standalone SDFG (expanded and
simplified as a whole program would be), in this thread: DaCe's generators
are not thread-safe. The compiler runs outside Python, so several run at
once while the next unit's code is generated.

The compile line is CMake's: the first unit that needs a set of DaCe
environments (OpenBLAS, the oneDNN shim, the precompiled dace.h) is built
through DaCe's CMake project, and its compile and link lines are kept as a
recipe (in memory and on disk, per environment set, compiler, flags and DaCe
version). Every later unit with that set is one ``c++ ... -shared`` call
with the same flags: no configure step, no CMake, no Ninja.
"""
import hashlib
import json
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import dace
import dace.library
from dace.codegen import codegen, compiler
from dace.config import Config

from workbench.build import errors_at, pch, reuse
from workbench.build.prepare import before_codegen, prepared
from workbench.build.units import cache

_recipes = {}
_recipe_lock = threading.Lock()


@dataclass
class Generated:
    key: str
    name: str              # the unit program's C name (u_<key>)
    folder: Path           # its program folder (src/, include/, build/)
    program: object        # the expanded SDFG (for error locations)
    info: dict             # what ``cache.publish`` stores: name, signature, argument types
    environments: list


def generate(unit, work: Path, simplify: bool = True) -> Generated:
    """Expand, simplify and generate the code of ``unit`` under ``work``."""
    name = f"u_{unit.key[:24]}"
    unit.sdfg.name = name
    program, _ = prepared(unit.sdfg, work, "cpu", simplify)
    before_codegen(program, "cpu")
    objects = codegen.generate_code(program, validate=True)
    folder = Path(compiler.generate_program_folder(program, objects, program.build_folder))
    header = _header()
    environments = reuse.listed_environments(folder, [pch.ENVIRONMENT] if header else [])
    arglist = program.arglist()
    signature = program.signature_arglist(with_types=False, arglist=arglist)
    types = {arg: ("void*" if isinstance(desc, dace.data.Array) else desc.dtype.ctype)
             for arg, desc in arglist.items()}
    info = {"name": name, "signature": signature, "types": types,
            "init": [a for a in signature if a in program.free_symbols]}
    return Generated(unit.key, name, folder, program, info, environments)


def compile_generated(gen: Generated, names: dict = None) -> Path:
    """Compile ``gen`` into its library and publish it to the cache; the library."""
    recipe = known_recipe(gen.environments)
    if recipe is None:
        library = _compile_with_cmake(gen, names)
    else:
        library = gen.folder / "build" / f"lib{gen.name}.so"
        library.parent.mkdir(parents=True, exist_ok=True)
        command = [*recipe["compile"], f'-DDACE_BINARY_DIR="{library.parent}"', "-shared",
                   "-o", str(library), str(_source(gen)), *recipe["link"]]
        # in the build folder: a cancel kills the compilers working there (build.cancel)
        done = subprocess.run(command, capture_output=True, text=True, cwd=library.parent)
        if done.returncode != 0:
            raise errors_at.compile_error(gen.program, gen.folder, done.stdout + done.stderr,
                                          names)
    cache.publish(gen.key, library, gen.info, _source(gen))
    return library


def _source(gen: Generated) -> Path:
    return gen.folder / "src" / "cpu" / f"{gen.name}.cpp"


def _header():
    try:
        return pch.ensure_pch()
    except Exception as e:   # a faster build is never worth a failed one
        pch.log.warning("precompiled dace.h unavailable, building without it: %s", e)
        return None


def _libraries(environments: list) -> list:
    """The files the environments link. A recipe's link line names them, so a library
    that moved (the oneDNN shim, whose path changes with its source) needs a new one."""
    out = []
    for name in environments:
        try:
            env = dace.library.get_environment(name)
        except Exception:  # noqa: BLE001 (a name DaCe no longer knows: keyed by name alone)
            continue
        libs = env.cmake_libraries() if callable(env.cmake_libraries) else env.cmake_libraries
        out += [str(lib) for lib in libs or ()]
    return out


def _recipe_key(environments: list) -> str:
    text = "\n".join([*environments, *_libraries(environments), str(pch.compiler_path()),
                      dace.__version__,
                      Config.get("compiler", "cpu", "args") or "",
                      str(Config.get("compiler", "build_type")),
                      Config.get("compiler", "extra_cmake_args") or "", str(pch.ensure_pch())])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _recipe_file(key: str) -> Path:
    return cache.root() / "recipes" / f"{key}.json"


def known_recipe(environments: list):
    key = _recipe_key(environments)
    with _recipe_lock:
        if key not in _recipes:
            try:
                _recipes[key] = json.loads(_recipe_file(key).read_text())
            except (OSError, ValueError):
                return None
        return _recipes[key]


def _compile_with_cmake(gen: Generated, names: dict) -> Path:
    """Build ``gen`` through DaCe's CMake project and keep its compile line as the recipe."""
    try:
        library = Path(compiler.configure_and_compile(str(gen.folder), gen.name))
    except Exception as e:
        raise errors_at.compile_error(gen.program, gen.folder, str(e), names) from e
    recipe = _harvest(gen)
    if recipe is not None:
        key = _recipe_key(gen.environments)
        path = _recipe_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{time.time_ns()}.tmp")
        staging.write_text(json.dumps(recipe))
        staging.replace(path)
        with _recipe_lock:
            _recipes[key] = recipe
    return library


def _harvest(gen: Generated):
    """The compile flags and link arguments CMake used for ``gen``, or None."""
    build = gen.folder / "build"
    try:
        commands = json.loads((build / "compile_commands.json").read_text())
    except (OSError, ValueError):
        return None
    source = str(_source(gen))
    line = next((c["command"] for c in commands if c["file"].endswith(source)), None)
    if line is None:
        return None
    tokens, flags, skip = shlex.split(line), [], False
    for token in tokens[1:]:
        if skip:
            skip = False
        elif token in ("-o", "-c"):
            skip = True
        elif token.startswith("-DDACE_BINARY_DIR=") or token == f"-D{gen.name}_EXPORTS":
            continue
        else:
            flags.append(token)
    link = _link_arguments(build, gen.name)
    if link is None:
        return None
    return {"compile": [tokens[0], *flags], "link": link}


def _link_arguments(build: Path, name: str):
    ninja = build / "build.ninja"
    if ninja.is_file():
        block, found = ninja.read_text().split("\n"), False
        args = []
        for line in block:
            if line.startswith("build ") and f"lib{name}.so:" in line:
                found = True
            elif found and line.startswith("build "):
                break
            elif found and re.match(r"\s+(LINK_FLAGS|LINK_LIBRARIES) = ", line):
                args += shlex.split(line.split("=", 1)[1])
        return args if found else None
    linker = build / "CMakeFiles" / f"{name}.dir" / "link.txt"
    if linker.is_file():
        tokens = shlex.split(linker.read_text())
        last_object = max((i for i, t in enumerate(tokens) if t.endswith(".o")), default=None)
        return tokens[last_object + 1:] if last_object is not None else None
    return None

