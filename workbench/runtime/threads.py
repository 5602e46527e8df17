"""How many threads compiled programs (OpenMP) and BLAS use in this process.

Benchmarks compare runtimes at the same thread count: the workbench's
OpenMP maps and BLAS calls, and onnxruntime's intra-op pool, all get ``n``.
"""
import ctypes
import ctypes.util
import os

from workbench.export.runner import choose_openblas_kernels, choose_openblas_threads

DEFAULT_THREADS = int(os.environ.get("WORKBENCH_THREADS", "2"))

choose_openblas_kernels()  # read by OpenBLAS when it loads: first
ONE_POOL = choose_openblas_threads()
if not ONE_POOL:
    # Two pools: OpenMP threads that spin after a parallel region steal the cores
    # OpenBLAS's threads need (im2col Conv measured 72 ms spinning vs 15 ms passive).
    # Must be set before libgomp starts, i.e. before the first program loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def set_threads(n: int) -> None:
    """Set OpenMP and (when loaded) OpenBLAS/MKL thread counts to ``n``."""
    os.environ["OMP_NUM_THREADS"] = str(n)
    done = set()
    # "blas" only stands in for an OpenBLAS not found by its own name: loading the
    # system's libblas.so.3 next to another OpenBLAS would start a second copy
    for lib, fn in (("gomp", "omp_set_num_threads"), ("openblas", "openblas_set_num_threads"),
                    ("blas", "openblas_set_num_threads"), ("mkl_rt", "MKL_Set_Num_Threads")):
        if fn in done:
            continue
        path = ctypes.util.find_library(lib)
        if not path:
            continue
        try:
            func = getattr(ctypes.CDLL(path), fn)
        except (OSError, AttributeError):
            continue
        func(ctypes.c_int(n))
        done.add(fn)
