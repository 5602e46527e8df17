"""Compiling the generated CUDA program with CUDA 13, without touching DaCe.

DaCe 1.0.2's CUDA output does not compile with CUDA 13 as shipped:
1. its CMake file pins ``CMAKE_CUDA_STANDARD 14`` while CCCL 3 needs C++17:
   CMake is given ``nvcc17`` (beside this file) as its CUDA compiler, which
   rewrites the flag;
2. its runtime headers use CUB names CUDA 13 removed (``CTA_SYNC``,
   ``cub::CountingInputIterator``, ``cub::TransformInputIterator``):
   ``dace_cuda13_compat.h`` defines them and is force-included;
3. a toolkit without cuBLAS (nvcc + cudart only) gets cuBLAS's headers and
   library from the ``nvidia-cublas`` wheel.
4. DaCe's CMake file asks ``nvcc --run`` for the local GPU's architecture and
   caches it in the build folder, ignoring ``cuda_arch`` once cached: the
   architecture is passed as ``LOCAL_CUDA_ARCHITECTURES`` on every configure.
Without a GPU the build is compile-only: the library is made, not loaded.
``load_cuda`` compiles for the device's own architecture and loads it.
"""
import contextlib
import os
import shlex
import shutil
import time
from pathlib import Path

import dace
from dace.codegen import compiler

from workbench.build.cuda.device import (cuda_device_count, device_arch,  # noqa: F401
                                         normalize_arch, require_cuda_device)
from workbench.build import release
from workbench.errors import BuildError

HERE = Path(__file__).resolve().parent
DEFAULT_ARCH = os.environ.get("WORKBENCH_CUDA_ARCH", "80")  # A100; "90" for H100/H200


def nvcc() -> str:
    found = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                     if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not found:
        raise BuildError("no CUDA compiler: nvcc is not on PATH (install the CUDA toolkit).")
    return found


def cublas_paths():
    """(include dir, library) of cuBLAS: the toolkit's, else the nvidia-cublas wheel's."""
    toolkit = Path(nvcc()).resolve().parents[1]
    if (toolkit / "include" / "cublas_v2.h").exists():
        return None
    try:
        import nvidia
    except ImportError:
        nvidia = None
    for root in (Path(p) for p in getattr(nvidia, "__path__", [])):
        for sub in sorted(root.glob("cu*")) + [root / "cublas"]:
            libs = sorted((sub / "lib").glob("libcublas.so*"))
            if (sub / "include" / "cublas_v2.h").exists() and libs:
                return str(sub / "include"), str(libs[0])
    raise BuildError("the CUDA toolkit has no cuBLAS: pip install nvidia-cublas "
                     "(the project's 'gpu' extra) to compile GPU programs.")


def cuda_args(base: str) -> list:
    """DaCe's nvcc flags without ``--use_fast_math``: like the CPU build (settings.cpu_args),
    GPU programs keep IEEE semantics (no flush-to-zero, exact division and sqrt), so
    that they compare with onnxruntime under the same tolerances."""
    return [a for a in shlex.split(base) if a not in ("--use_fast_math", "-use_fast_math")]


@contextlib.contextmanager
def cuda_settings(arch: str = DEFAULT_ARCH):
    """DaCe configuration (and the cuBLAS environment) for one CUDA compile."""
    from dace.libraries.blas.environments import cuBLAS
    cfg = dace.config.Config
    cmake = (f"{cfg.get('compiler', 'extra_cmake_args')} -DCMAKE_CUDA_COMPILER={HERE / 'nvcc17'}"
             f" -DLOCAL_CUDA_ARCHITECTURES={arch}")
    args = " ".join([*cuda_args(cfg.get("compiler", "cuda", "args") or ""),
                     "-include", str(HERE / "dace_cuda13_compat.h")])
    saved = (cuBLAS.cmake_includes, cuBLAS.cmake_libraries)
    paths = cublas_paths()
    os.environ.setdefault("NVCC_REAL", nvcc())
    try:
        if paths:
            cuBLAS.cmake_includes, cuBLAS.cmake_libraries = [paths[0]], [paths[1]]
        with dace.config.set_temporary("compiler", "extra_cmake_args", value=cmake), \
                dace.config.set_temporary("compiler", "cuda", "args", value=args), \
                dace.config.set_temporary("compiler", "cuda", "cuda_arch", value=arch):
            yield
    finally:
        cuBLAS.cmake_includes, cuBLAS.cmake_libraries = saved


def compile_cuda(build, arch: str = DEFAULT_ARCH) -> Path:
    """Compile a GPU ``Build`` (from ``compile_sdfg(target="gpu")``) into its library.

    ``arch``: "80", "sm_90", ... (one that this nvcc supports)."""
    from workbench.build import compiler_first_error
    arch = normalize_arch(arch, nvcc())
    t = time.perf_counter()
    with cuda_settings(arch):
        try:
            library = compiler.configure_and_compile(str(build.folder), build.sdfg.name)
        except Exception as e:
            raise BuildError(f"CUDA compilation of '{build.sdfg.name}' failed: "
                             f"{compiler_first_error(str(e))} (sources in {build.folder})") from e
    build.timings["compile"] = time.perf_counter() - t
    build.arch = arch
    return Path(library)


def load_cuda(build, arch: str = None):
    """Compile ``build`` (a GPU build) for ``arch`` (default: the device's) and load it.

    Raises ``NoCudaDeviceError`` (exit 2) first where no device can run it.
    A build already loaded for that architecture is returned as it is.
    """
    from workbench.build import reuse
    require_cuda_device()
    arch = normalize_arch(arch or device_arch(), nvcc())
    if build.compiled is not None and build.arch == arch:
        return build
    if build.compiled is not None:
        release(build)
        build.compiled = None
    library = compile_cuda(build, arch)
    t = time.perf_counter()
    build.compiled = reuse.load_program(str(library), build.sdfg)
    build.timings["load"] = time.perf_counter() - t
    return build
