"""How many threads compiled programs (OpenMP) and BLAS use in this process.

Benchmarks compare runtimes at the same thread count: the workbench's
OpenMP maps and BLAS calls, and onnxruntime's intra-op pool, all get ``n``.
"""
import ctypes
import ctypes.util
import os

from workbench.export_runner import choose_openblas_kernels

DEFAULT_THREADS = int(os.environ.get("WORKBENCH_THREADS", "2"))

# OpenMP threads that spin after a parallel region steal the cores OpenBLAS's
# own threads need (im2col Conv measured 72 ms spinning vs 15 ms passive).
# Must be set before libgomp starts, i.e. before the first program loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
choose_openblas_kernels()

# Debian ships OpenBLAS built with its own pthreads pool and with OpenMP; which
# one a program gets is the system's choice (update-alternatives: pthreads).
# WORKBENCH_OPENBLAS_THREADS=openmp loads the OpenMP build first, so programs
# (whose NEEDED entry is the shared soname libopenblas.so.0) bind to it and BLAS
# calls share the maps' OpenMP threads instead of adding a second pool.
_OPENMP_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"
if os.environ.get("WORKBENCH_OPENBLAS_THREADS") == "openmp" and os.path.exists(_OPENMP_OPENBLAS):
    ctypes.CDLL(_OPENMP_OPENBLAS, mode=ctypes.RTLD_GLOBAL)


def set_threads(n: int) -> None:
    """Set OpenMP and (when loaded) OpenBLAS/MKL thread counts to ``n``."""
    os.environ["OMP_NUM_THREADS"] = str(n)
    for lib, fn in (("gomp", "omp_set_num_threads"), ("openblas", "openblas_set_num_threads"),
                    ("blas", "openblas_set_num_threads"), ("mkl_rt", "MKL_Set_Num_Threads")):
        path = ctypes.util.find_library(lib)
        if not path:
            continue
        try:
            func = getattr(ctypes.CDLL(path), fn)
        except (OSError, AttributeError):
            continue
        func(ctypes.c_int(n))
