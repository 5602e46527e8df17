"""DaCe configuration the workbench builds with, set once per process."""
import os
from pathlib import Path

import dace

_applied = False


def cache_dir() -> Path:
    """Root of everything the workbench caches (models, builds)."""
    root = Path(os.environ.get("WORKBENCH_CACHE", "~/.cache/dace-workbench")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def apply_build_settings() -> None:
    """Keep DaCe's output out of the working directory; quiet, uncached builds."""
    global _applied
    if _applied:
        return
    cfg = dace.config.Config
    cfg.set("default_build_folder", value=str(cache_dir() / "dacecache"))
    cfg.set("compiler", "use_cache", value=False)
    cfg.set("debugprint", value=False)
    # The session passes C-contiguous reshapes of the user's arrays; safe.
    cfg.set("compiler", "allow_view_arguments", value=True)
    _applied = True


def blas_implementation():
    """DaCe's BLAS implementation name to use, or None when none is usable.

    OpenBLAS (Debian's libopenblas-dev) is faster on the machines measured;
    MKL is the fallback for users without root (pip mkl + MKLROOT).
    ``WORKBENCH_BLAS`` forces one (``OpenBLAS``, ``MKL`` or ``none``).
    """
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
