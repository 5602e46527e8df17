"""A precompiled ``dace/dace.h``, made once per compiler, flags and DaCe.

Parsing dace.h is most of the compile time of a small program. g++ uses a
``.gch`` only when every flag that changes the language (``-fopenmp``,
``-fPIC``, ``-O``, ``-march``, ``-g``) matches the compile line, so the header
is built with exactly the flags CMake will use (CPU args + ``-fPIC
-fopenmp``, build type None) and checked with ``-Winvalid-pch -H`` before it
is trusted.

The header in the cache is a one-line wrapper that includes the real
``dace.h`` by absolute path: a symlink does not work, because dace.h's own
``#include "types.h"`` and ``"../../../external/..."`` are resolved next to
the path g++ was given. When the ``.gch`` does not fit (a different
compile line) g++ reads the wrapper as text, so a build is never wrong,
only slower.

``-include <wrapper>`` reaches the compile line through a DaCe environment
(its ``cmake_compile_flags``), which DaCe's CMakeLists appends after
``project()`` and ``find_package(OpenMP)``: CMake's own test compiles never
see the flag, and they would not match the header's flags anyway.
"""
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import dace
from dace.config import Config

from workbench.build.settings import cache_dir, fast_build_enabled

log = logging.getLogger("workbench.build")

_lock = threading.Lock()
_known = {}          # (cache, key) -> wrapper path, or None when it could not be made
_keys = {}           # (compiler, flags) -> (key, key text, compiler's --version)
_warned = set()
_UNSAFE = re.compile(r"[\s\"'$;\\]")   # CMake gets the path inside a quoted string


def runtime_include() -> Path:
    return Path(dace.__file__).parent / "runtime" / "include"


def compiler_path():
    """The C++ compiler CMake will pick, resolved (None when not found)."""
    name = Config.get("compiler", "cpu", "executable") or os.environ.get("CXX") or "c++"
    return shutil.which(name)


def pch_flags(cxx: str):
    """The compile line's language-relevant flags, or None when they are not ours to predict."""
    if (Config.get("compiler", "build_type") or "").lower() != "none":
        return None   # CMake would add its build type's flags after ours
    return shlex.split(Config.get("compiler", "cpu", "args") or "") + ["-fPIC", "-fopenmp"]


def ensure_pch():
    """Path of the wrapper header to ``-include``, or None (then builds parse dace.h).

    Safe to call before every build: after the first call per process it is
    a dictionary look-up.
    """
    wanted = _wanted()
    if wanted is None:
        return None
    cxx, flags, key, key_text, version = wanted
    with _lock:
        if (str(cache_dir()), key) not in _known:
            _known[str(cache_dir()), key] = _find_or_make(cxx, flags, key, key_text, version)
        return _known[str(cache_dir()), key]


def header_for_build(progress, timings: dict):
    """The header to -include, made on the first build that needs it (timed apart)."""
    t = time.perf_counter()
    try:
        if decided():
            return ensure_pch()
        with progress.phase("precompile dace.h (once per compiler and flags)"):
            return ensure_pch()
    except Exception as e:   # a faster build is never worth a failed one
        log.warning("precompiled dace.h unavailable, building without it: %s", e)
        return None
    finally:
        if time.perf_counter() - t > 0.05:
            timings["precompile_header"] = time.perf_counter() - t


def decided() -> bool:
    """True when ``ensure_pch`` will answer at once (nothing to build or look for)."""
    wanted = _wanted()
    return wanted is None or (str(cache_dir()), wanted[2]) in _known


def _wanted():
    """(compiler, flags, key, key text, version) of the header this build wants, or None."""
    if not fast_build_enabled():
        return None
    cxx = compiler_path()
    flags = pch_flags(cxx) if cxx else None
    if flags is None:
        return None
    with _lock:
        if (cxx, tuple(flags)) not in _keys:
            try:
                version = _run([cxx, "--version"]).stdout
            except (OSError, subprocess.SubprocessError):
                version = ""   # then it is "not g++", said once
            text = _key_text(cxx, flags, version)
            _keys[cxx, tuple(flags)] = (hashlib.sha256(text.encode()).hexdigest()[:16], text,
                                        version)
        return (cxx, flags, *_keys[cxx, tuple(flags)])


def compile_flag(wrapper: Path) -> str:
    # One string: DaCe joins environment flags from a set, so separate items
    # could come out in any order.
    return f"-include {wrapper} -Winvalid-pch"


def _key_text(cxx: str, flags: list, version: str) -> str:
    header = runtime_include() / "dace" / "dace.h"
    return "\n".join([os.path.realpath(cxx), *version.splitlines()[:1], shlex.join(flags),
                      dace.__version__, str(header), str(header.stat().st_mtime_ns)])


def _find_or_make(cxx: str, flags: list, key: str, key_text: str, version: str):
    root = cache_dir() / "pch"
    final = root / key
    wrapper = final / "dace" / "dace.h"
    failed = root / f"{key}.failed"
    if (wrapper.parent / "dace.h.gch").is_file():
        return wrapper
    if failed.is_file():
        _warn_once(key, f"precompiled dace.h disabled earlier (see {failed}); builds parse it "
                        f"in full. Delete that file to retry.")
        return None
    if _UNSAFE.search(str(root)):
        _warn_once(key, f"no precompiled dace.h: the cache path {root} contains characters "
                        f"that cannot pass through CMake unquoted")
        return None
    if "Free Software Foundation" not in version and "g++" not in version.lower():
        _warn_once(key, f"no precompiled dace.h: {cxx} is not g++")
        return None
    _drop_abandoned(root)
    tmp = root / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        error = _build(cxx, flags, tmp, key_text)
        if error:
            root.mkdir(parents=True, exist_ok=True)
            failed.write_text(error)
            _warn_once(key, f"could not precompile dace.h, building without it: {error}")
            return None
        try:
            os.rename(tmp, final)
        except OSError:
            if not (wrapper.parent / "dace.h.gch").is_file():   # lost to a broken folder
                raise
        return wrapper   # ours, or another process's that won the race
    except Exception as e:   # OSError, a hung compiler: a slower build, never a failed one
        _warn_once(key, f"could not make the precompiled dace.h ({e}); building without it")
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _drop_abandoned(root: Path) -> None:
    # Left by a process killed mid-build; each holds a ~60 MB header.
    for tmp in root.glob(".tmp-*"):
        try:
            if time.time() - tmp.stat().st_mtime > 3600:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _build(cxx: str, flags: list, folder: Path, key_text: str):
    """Make and check the header in ``folder``; an error message, or None."""
    header = folder / "dace" / "dace.h"
    header.parent.mkdir(parents=True)
    real = runtime_include() / "dace" / "dace.h"
    header.write_text(f'// precompiled by the DaCe workbench; key:\n'
                      f'// {key_text.replace(chr(10), " | ")}\n#include "{real}"\n')
    include = ["-I", str(runtime_include())]
    made = _run([cxx, *flags, *include, "-x", "c++-header", str(header),
                 "-o", str(header) + ".gch"])
    if made.returncode != 0:
        return _first_error(made.stdout)
    probe = folder / "probe.cpp"
    probe.write_text("#include <dace/dace.h>\nint main() { return 0; }\n")
    used = _run([cxx, *flags, *include, "-include", str(header), "-Winvalid-pch", "-H",
                 "-fsyntax-only", str(probe)])
    if used.returncode != 0 or f"! {header}.gch" not in used.stdout:
        return "g++ does not use it with the same flags: " + _first_error(used.stdout)
    probe.unlink()
    return None


def _run(cmd: list) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)


def _first_error(output: str) -> str:
    lines = [l for l in output.splitlines() if "error" in l or "warning" in l]
    return (lines or output.splitlines() or ["no output"])[0][:300]


def _warn_once(key: str, message: str) -> None:
    if (str(cache_dir()), key) not in _warned:
        _warned.add((str(cache_dir()), key))
        log.warning(message)


@dace.library.environment
class WorkbenchPCH:
    """Puts ``-include <precompiled dace.h>`` on the program's compile line."""

    cmake_minimum_version = None
    cmake_packages = []
    cmake_variables = {}
    cmake_includes = []
    cmake_libraries = []
    cmake_link_flags = []
    cmake_files = []
    headers = []
    state_fields = []
    init_code = ""
    finalize_code = ""
    dependencies = []

    @staticmethod
    def cmake_compile_flags():
        wrapper = ensure_pch()
        return [compile_flag(wrapper)] if wrapper else []


ENVIRONMENT = WorkbenchPCH.full_class_path()
