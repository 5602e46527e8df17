"""Is there a CUDA device to run on, and which architectures can nvcc target.

Asked through the CUDA runtime with ctypes (no Python CUDA package needed):
the driver library (``libcuda.so.1``) must load and ``cudaGetDeviceCount``
must report a device. Without one, GPU programs can still be generated and
compiled, only not run.
"""
import ctypes
import functools
import re
import shutil
import subprocess
from pathlib import Path

from workbench.errors import BadInputError, NoCudaDeviceError

# cudaDeviceAttr values (driver_types.h); stable since CUDA 5.
_CC_MAJOR, _CC_MINOR = 75, 76


@functools.lru_cache(maxsize=1)
def _runtime():
    """(cudart library, None) or (None, why there is no usable device)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, "no NVIDIA driver: libcuda.so.1 cannot be loaded"
    cudart = None
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so", *_toolkit_cudart()):
        try:
            cudart = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if cudart is None:
        return None, "the CUDA runtime library libcudart.so cannot be loaded"
    cudart.cudaGetErrorString.restype = ctypes.c_char_p
    count = ctypes.c_int(0)
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0:
        return None, (f"cudaGetDeviceCount failed: "
                      f"{cudart.cudaGetErrorString(status).decode(errors='replace')}")
    if count.value == 0:
        return None, "cudaGetDeviceCount reports 0 devices"
    return cudart, None


def _toolkit_cudart() -> list:
    """libcudart.so of the toolkit that nvcc belongs to (often not on the loader's path)."""
    roots = [Path("/usr/local/cuda")]
    if shutil.which("nvcc"):
        roots.insert(0, Path(shutil.which("nvcc")).resolve().parents[1])
    return [str(root / lib / "libcudart.so") for root in roots for lib in ("lib64", "lib")]


def cuda_device_count() -> int:
    cudart, _ = _runtime()
    if cudart is None:
        return 0
    count = ctypes.c_int(0)
    cudart.cudaGetDeviceCount(ctypes.byref(count))
    return count.value


def require_cuda_device() -> None:
    """Raise ``NoCudaDeviceError`` (exit 2) saying why, unless a device can run programs."""
    _, why = _runtime()
    if why:
        raise NoCudaDeviceError(why)


def device_arch(device: int = 0) -> str:
    """Compute capability of ``device`` as CMake writes it ("90" for an H100)."""
    require_cuda_device()
    cudart, _ = _runtime()
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    cudart.cudaDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device)
    cudart.cudaDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device)
    return f"{major.value}{minor.value}"


@functools.lru_cache(maxsize=4)
def supported_archs(nvcc_path: str) -> tuple:
    """The real architectures ``nvcc`` compiles for ("75", "80", ...)."""
    try:
        out = subprocess.run([nvcc_path, "--list-gpu-code"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted(set(re.findall(r"sm_(\d+)\b", out)), key=int))


def normalize_arch(value: str, nvcc_path: str) -> str:
    """``sm_90``, ``compute_90`` or ``90`` (``90a`` too) as CMake's "90"; checked against nvcc."""
    text = str(value).strip().lower()
    found = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3}[a-z]?)", text)
    known = supported_archs(nvcc_path)
    plain = found.group(1) if found else None
    if plain is None or (known and re.sub(r"[a-z]$", "", plain) not in known):
        listed = ", ".join(f"sm_{a}" for a in known) or "see nvcc --list-gpu-code"
        raise BadInputError(f"--arch '{value}' is not a CUDA architecture that "
                            f"{Path(nvcc_path).name} here compiles for; use one of {listed} "
                            f"(e.g. sm_80 for A100, sm_90 for H100/H200).")
    return plain
