"""A first CMake configure that skips CMake's detection work: seeded from an earlier one.

Every new program folder (a model opened, a test, a profile's instrumented
twin) pays CMake's configure: ~0.65-0.9 s here, of which compiler
identification is ~0.5 s, ``find_package(OpenMP)`` ~0.35 s and
``find_package(Threads)`` ~0.1 s. A rebuild in the same folder skips it
already (DaCe compares the command with ``build/cmake_configure.sh``). All
three results are the same for every program built with the same command,
so the first configure of a folder starts from a copy of an earlier
folder's ``CMakeCache.txt`` and ``CMakeFiles/<cmake version>/`` and takes
~0.07 s.

Rules:
1. A seed is used only for a command equal to the one it was made by, except
   for the program's own folder and name (``DACE_SRC_DIR``, ``DACE_FILES``,
   ``DACE_PROGRAM_NAME``, which the command sets again anyway). A cache value
   set by ``-D`` in one command and not given by another would otherwise stay.
2. The key also holds the compiler binary (path, size, mtime): the cached
   compiler identification must describe the compiler that runs.
3. Paths of the seed's folder in the cache file are rewritten to the new one.
4. A folder that has a ``CMakeCache.txt`` already is never touched.
5. If a seeded configure fails, DaCe wipes the build folder and configures
   from scratch; the seed is then dropped.
6. Seeds live in the build cache (``cmake-seeds/``), written to a temporary
   name and renamed, so processes sharing the cache never see half a seed.

DaCe 1.0.2 has no hook around its configure call: ``run_seeded`` runs in
place of ``dace.codegen.compiler._run_liveoutput`` (the function that runs
it), a patch installed with the others by ``workbench.dace_patches.install``;
every other command passes through unchanged. ``WORKBENCH_FAST_BUILD=0``
turns seeding off with the other build shortcuts.
"""
import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

from workbench.build.settings import cache_dir, fast_build_enabled

CACHE_FILE = "CMakeCache.txt"
SEEDS = "cmake-seeds"
_PROGRAM_ARGS = re.compile(r'-D(DACE_SRC_DIR|DACE_FILES|DACE_PROGRAM_NAME)=("[^"]*"|\S*)')
_VERSION_DIR = re.compile(r"^\d+\.\d+(\.\d+)*$")


def run_seeded(run, command, shell=False, cwd=None, output_stream=None):
    """``run`` (DaCe's command runner) on ``command``; a configure in an unconfigured
    folder starts from a seed, and a configure from scratch leaves one."""
    configure = _is_configure(command) and cwd is not None and fast_build_enabled()
    seeded = configure and plant(Path(cwd), command)
    try:
        result = run(command, shell=shell, cwd=cwd, output_stream=output_stream)
    except Exception:
        if seeded:
            drop(command)
        raise
    if configure and not seeded:
        keep(Path(cwd), command)
    return result


def _is_configure(command) -> bool:
    text = command if isinstance(command, str) else " ".join(map(str, command))
    return text.startswith("cmake ") and "--build" not in text.split()


def key(command: str) -> str:
    """What a seed must share with a command to be used for it (rule 1 and 2)."""
    general = _PROGRAM_ARGS.sub(lambda m: f"-D{m.group(1)}=*", command)
    cxx = shutil.which(os.environ.get("CXX") or "c++") or ""
    try:
        st = os.stat(os.path.realpath(cxx)) if cxx else None
    except OSError:
        st = None
    identity = f"{cxx}:{st.st_size}:{st.st_mtime_ns}" if st else cxx
    return hashlib.sha256(f"{general}\n{identity}".encode()).hexdigest()[:20]


def _seed_folder(command: str) -> Path:
    return cache_dir() / SEEDS / key(command)


def plant(build_folder: Path, command: str) -> bool:
    """Copy a matching seed into an unconfigured ``build_folder``; True if one was planted."""
    if (build_folder / CACHE_FILE).exists():
        return False
    seed = _seed_folder(command)
    try:
        origin = (seed / "origin").read_text()
        text = (seed / CACHE_FILE).read_text()
        versions = [d for d in (seed / "CMakeFiles").iterdir() if _VERSION_DIR.match(d.name)]
    except OSError:
        return False
    program_folder = str(build_folder.parent)
    try:
        build_folder.mkdir(parents=True, exist_ok=True)
        for version in versions:
            shutil.copytree(version, build_folder / "CMakeFiles" / version.name,
                            dirs_exist_ok=True)
        (build_folder / CACHE_FILE).write_text(text.replace(origin, program_folder))
    except OSError:
        _clear(build_folder)
        return False
    return True


def keep(build_folder: Path, command: str) -> None:
    """Save a configured folder as the seed for its command, if there is none yet."""
    seed = _seed_folder(command)
    if seed.exists():
        return
    versions = [d for d in (build_folder / "CMakeFiles").iterdir()
                if _VERSION_DIR.match(d.name)] if (build_folder / "CMakeFiles").is_dir() else []
    if not versions or not (build_folder / CACHE_FILE).is_file():
        return
    tmp = seed.with_name(f"{seed.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        for version in versions:
            shutil.copytree(version, tmp / "CMakeFiles" / version.name)
        shutil.copy2(build_folder / CACHE_FILE, tmp / CACHE_FILE)
        (tmp / "origin").write_text(str(build_folder.parent))
        os.rename(tmp, seed)
    except OSError:   # another process kept the same seed first, or the disk is full
        shutil.rmtree(tmp, ignore_errors=True)


def drop(command: str) -> None:
    shutil.rmtree(_seed_folder(command), ignore_errors=True)


def _clear(build_folder: Path) -> None:
    (build_folder / CACHE_FILE).unlink(missing_ok=True)
