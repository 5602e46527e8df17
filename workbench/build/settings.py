"""DaCe configuration the workbench builds with.

Applied before every build and re-applied only when ``WORKBENCH_FAST_BUILD``
changes, so one process can measure both modes. A ``DACE_*`` environment
variable still beats everything here (DaCe reads those first), which is why
the precompiled header derives its flags from ``Config.get`` at build time
rather than from the values set below.
"""
import contextlib
import os
import shlex
import shutil
import threading
from pathlib import Path

import dace

_lock = threading.Lock()
_applied_mode = None
_user_values = {}   # DaCe's values before the workbench first touched them


def cache_dir() -> Path:
    """Root of everything the workbench caches (models, builds, headers)."""
    root = Path(os.environ.get("WORKBENCH_CACHE", "~/.cache/dace-workbench")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def fast_build_enabled() -> bool:
    """Precompiled header + Ninja, unless ``WORKBENCH_FAST_BUILD=0``."""
    return os.environ.get("WORKBENCH_FAST_BUILD", "1").strip().lower() not in ("0", "no", "false",
                                                                              "off")


def ninja_available() -> bool:
    return shutil.which("ninja") is not None


def apply_build_settings() -> None:
    """Keep DaCe's output out of the working directory; quiet, uncached builds.

    Both modes compile with the same flags (build type None, so that CMake
    adds none of its own); they differ only in generator and header, so a
    comparison between them measures just that.
    """
    global _applied_mode
    fast = fast_build_enabled()
    with _lock:
        if _applied_mode == fast:
            return
        cfg = dace.config.Config
        if not _user_values:
            _user_values["args"] = cfg.get("compiler", "cpu", "args") or ""
            _user_values["cmake"] = cfg.get("compiler", "extra_cmake_args") or ""
        cfg.set("default_build_folder", value=str(cache_dir() / "dacecache"))
        cfg.set("compiler", "use_cache", value=False)
        cfg.set("debugprint", value=False)
        # The session passes C-contiguous reshapes of the user's arrays; safe.
        cfg.set("compiler", "allow_view_arguments", value=True)
        # DaCe's default RelWithDebInfo appends "-O2 -g" after the -O3 in the
        # CPU args, so programs were really built at -O2 with debug info; None
        # keeps our flags as they are (and the header's flags predictable).
        cfg.set("compiler", "build_type", value="None")
        cfg.set("compiler", "cpu", "args", value=cpu_args(_user_values["args"]))
        cmake = shlex.split(_user_values["cmake"])
        if fast and ninja_available() and "-G" not in cmake:
            cmake = ["-G", "Ninja"] + cmake
        # compile_commands.json lets a user (and the tests) see the exact line.
        cmake.append("-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
        cfg.set("compiler", "extra_cmake_args", value=shlex.join(cmake))
        _applied_mode = fast


def cpu_args(base: str) -> str:
    """DaCe's CPU flags, with NDEBUG (which the None build type no longer adds).

    OpenMP is not a flag here: CMake adds ``-fopenmp`` to every target
    through OpenMP::OpenMP_CXX, and the precompiled header is built with it.
    """
    args = shlex.split(base)
    # -ffast-math (DaCe's default) breaks ONNX semantics: isnan/isinf fold to
    # false, infinities in reductions go wrong, and loading the library turns
    # on flush-to-zero for the whole process. Keep IEEE; drop errno only.
    args = [a for a in args if a not in ("-fno-openmp", "-ffast-math")]
    if "-fno-math-errno" not in args:
        args.append("-fno-math-errno")
    if not any(a.startswith("-O") for a in args):
        args.append("-O3")
    if "-DNDEBUG" not in args:
        args.append("-DNDEBUG")
    if not any(a.startswith("-std=") for a in args):
        args += language_standard()
    return shlex.join(args)


def language_standard() -> list:
    """``-std=c++NN`` for DaCe 2.0+, whose runtime headers need C++20 (``std::bit_cast``).

    Its CMakeLists sets the standard on the program target only; the loader stub and the
    precompiled dace.h (built from these args) must get the same one, or the header is
    rejected and the stub, which ``-include``s it, fails to compile. DaCe 1.x has no
    ``compiler.cpp_standard`` setting and needs g++'s default dialect: nothing is added.
    """
    try:
        standard = dace.config.Config.get("compiler", "cpp_standard")
    except KeyError:
        return []
    return [f"-std=c++{standard}"] if standard else []


_target = ["cpu"]  # what the build in progress generates code for


@contextlib.contextmanager
def building_for(target: str):
    """Expansions made inside pick the target's libraries (cuBLAS on GPU)."""
    _target.append(target)
    try:
        yield
    finally:
        _target.pop()


def target() -> str:
    """What the build in progress generates code for: "cpu" or "gpu"."""
    return _target[-1]


def transient_storage():
    """Where an expansion's whole-tensor transients (padded inputs, im2col columns) live.

    CPU_Heap on the CPU (large arrays must stay off the stack); on the GPU the
    kernels that fill and read them need device memory.
    """
    return dace.StorageType.GPU_Global if _target[-1] == "gpu" else dace.StorageType.CPU_Heap


def blas_implementation():
    """DaCe's BLAS implementation name to use, or None when none is usable.

    On the GPU it is cuBLAS. On the CPU, OpenBLAS (Debian's libopenblas-dev)
    is faster on the machines measured; MKL is the fallback for users without
    root (pip mkl + MKLROOT). ``WORKBENCH_BLAS`` forces one (``OpenBLAS``,
    ``MKL`` or ``none``) for CPU builds.
    """
    if _target[-1] == "gpu":
        return "cuBLAS"
    forced = os.environ.get("WORKBENCH_BLAS")
    if forced:
        return None if forced.lower() == "none" else forced
    from dace.libraries.blas.environments import IntelMKL, OpenBLAS
    headers = ("/usr/include/cblas.h", "/usr/include/x86_64-linux-gnu/cblas.h")
    if any(Path(h).exists() for h in headers) and OpenBLAS.is_installed():
        return "OpenBLAS"
    if os.environ.get("MKLROOT") and IntelMKL.is_installed():
        return "MKL"
    return None


def unit_builds_enabled() -> bool:
    """Build one-state CPU programs by units (``build.units``), unless
    ``WORKBENCH_UNIT_BUILDS=0``."""
    return os.environ.get("WORKBENCH_UNIT_BUILDS", "1").strip().lower() not in ("0", "no",
                                                                               "false", "off")
