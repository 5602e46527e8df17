"""Which library runs a GEMM shape faster on this machine: measured once, remembered.

Neither library wins by rule: oneDNN with its weights packed once beat
OpenBLAS by up to 1.6x on most transformer shapes here and ran 128x3072 @
3072x768 2.9x slower (BENCHMARKS.md, sixteenth session). ``gemm_times``
times both on the shape, in a child process running the programs' thread
count with the BLAS build the programs bind to (so the session's own OpenMP
pool and loaded libraries stay untouched), and keeps the result in
``<cache>/kernel-choices/<machine>.json``. The machine key holds the CPU
model and vector flags, the thread count and both libraries' identities, so
a choice made on one machine or build is never read on another, and a
second run, or a replayed recipe, times nothing: the choice is
deterministic given the cache. That holds across a session's processes too
(the worker lists the matches the window shows), so a timing taken under load
is kept like any other: a cache that refused it let two processes time the
same shape apart and disagree (tests/test_replica.py). Each timing records the
load per core it was taken under; ``python app.py kernels`` lists them and
``--retime --busy`` times those taken under load again, at a point the user
chooses (``retime``), not in the middle of a session.

A product whose row count is a symbol (a sequence length) is timed at
``PROBE_ROWS``; ``rows_where_faster`` turns those into the row ranges where
oneDNN runs, decided per call (``matmul_onednn``).
"""
import contextlib
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

# oneDNN is chosen only when it is this much faster: the VM's noise (a few %)
# must not flip a choice that makes no difference
MARGIN = 0.95
_ROUNDS = 5
_VERSION = 2  # of the measurement: a new one is not mixed with older choices
_lock = threading.Lock()
# row counts a symbolic GEMM is timed at: a factor 4 apart, from a decode step's one row
# to a long sequence (the crossover on this machine lies between 64 and 256 rows)
PROBE_ROWS = (1, 4, 16, 64, 256, 1024)


def _cpu() -> str:
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = sorted(f for f in flags if f.startswith(("avx", "fma", "amx")))
    return f"{model} {' '.join(wanted)}"


def blas_library():
    """The OpenBLAS the programs call (Debian's OpenMP build when bound), or None."""
    from workbench.export.runner import OPENMP_OPENBLAS, choose_openblas_threads
    if choose_openblas_threads():
        return OPENMP_OPENBLAS
    import ctypes.util
    return ctypes.util.find_library("openblas")


def machine_key(threads: int, shim: Path, blas: str) -> str:
    text = f"{_VERSION}|{_cpu()}|{threads}|{shim.parent.name}|{Path(blas).resolve()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache_file(key: str) -> Path:
    from workbench.build.settings import cache_dir
    return cache_dir() / "kernel-choices" / f"{key}.json"


def shape_key(m: int, k: int, n: int, b_transposed: bool) -> str:
    return f"gemm {m}x{k}x{n}{' bT' if b_transposed else ''}"


def parse_shape_key(key: str):
    """(m, k, n, b_transposed) of a ``shape_key``."""
    words = key.split()
    m, k, n = (int(v) for v in words[1].split("x"))
    return m, k, n, words[-1] == "bT"


# a timing taken with at least this many runnable processes per core (the one-minute load
# average) had to share the cores: its choice may be another than on a quiet machine
BUSY_LOAD = 1.0


def load_per_core() -> float:
    return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)


def _libraries():
    """(cache file of this machine, shim, blas), or None when either library is missing."""
    from workbench.build import onednn
    from workbench.runtime.threads import DEFAULT_THREADS
    blas, shim = blas_library(), onednn.shim() if onednn.available() else None
    if not blas or not shim:
        return None
    return _cache_file(machine_key(DEFAULT_THREADS, shim, blas)), shim, blas


@contextlib.contextmanager
def _held(path: Path):
    """This machine's cache held by this thread and process alone: a session's worker
    and the window (or two suites) asking for a new shape at once measure it once and
    both read that timing; the file is read, merged and written whole under it."""
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock, open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _store(path: Path, entries: dict) -> None:
    """Merge ``entries`` into the cache file (under ``_held``)."""
    known = {**_read(path), **entries}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    os.replace(tmp, path)


def cached():
    """{shape key: timing} this machine's cache holds, or None when a library is missing."""
    found = _libraries()
    if found is None:
        return None
    return _read(found[0])


def retime(keys) -> dict:
    """Time the shapes ``keys`` again now and keep the new timings: {key: timing}. A
    session already open keeps the choices it made; the next ``auto`` reads these."""
    from workbench.runtime.threads import DEFAULT_THREADS
    path, shim, blas = _libraries()
    with _held(path):
        fresh = {key: _measure(*parse_shape_key(key), DEFAULT_THREADS, shim, blas)
                 for key in keys}
        _store(path, fresh)
    return fresh


def faster(timing: dict) -> str:
    """The library a timing chooses: "onednn" only when it wins by the margin."""
    return "onednn" if timing["onednn"] <= MARGIN * timing["blas"] else "blas"


def gemm_times(m: int, k: int, n: int, b_transposed: bool):
    """{"onednn": ms, "blas": ms} for Y[m, n] = A[m, k] @ B (+ bias) on this machine,
    from the cache or measured now; None when either library is missing here."""
    from workbench.runtime.threads import DEFAULT_THREADS
    found = _libraries()
    if found is None:
        return None
    path, shim, blas = found
    key = shape_key(m, k, n, b_transposed)
    with _held(path):
        known = _read(path)
        if key not in known:
            known[key] = _measure(m, k, n, b_transposed, DEFAULT_THREADS, shim, blas)
            _store(path, {key: known[key]})
        return known[key]


def rows_where_faster(k: int, n: int, b_transposed: bool):
    """For Y[m, n] = A[m, k] @ B with m a symbol: ``(ranges, times)``, the row counts
    [lo, hi) where oneDNN measured faster (hi None: no end), and the times at each of
    ``PROBE_ROWS``; None when either library is missing. A probe's choice holds halfway
    (in the ratio) to the next probe."""
    times = {}
    for m in PROBE_ROWS:
        t = gemm_times(m, k, n, b_transposed)
        if t is None:
            return None
        times[m] = t
    ranges = []
    for i, m in enumerate(PROBE_ROWS):
        if faster(times[m]) != "onednn":
            continue
        lo = 0 if i == 0 else 2 * PROBE_ROWS[i - 1]
        hi = 2 * m if i + 1 < len(PROBE_ROWS) else None
        if ranges and ranges[-1][1] == lo:
            ranges[-1] = (ranges[-1][0], hi)
        else:
            ranges.append((lo, hi))
    return ranges, times


def _measure(m, k, n, b_transposed, threads, shim, blas) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    # run as a file, not a module: the package's imports would load DaCe (3 s)
    cmd = [sys.executable, __file__, str(m), str(k), str(n), str(int(b_transposed)), str(shim),
           blas]
    load = load_per_core()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode:
        raise RuntimeError(f"timing the GEMM {m}x{k}x{n} failed:\n{done.stderr[-2000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": load}


def _time_both(m, k, n, b_transposed, shim, blas) -> dict:
    """In the child: both libraries on random data, interleaved rounds; the fastest round
    of each, in ms (another process on the machine only ever adds time, so the minimum is
    what the kernel can do; a median kept whichever library was unlucky)."""
    import importlib.util
    import numpy as np
    spec = importlib.util.spec_from_file_location(
        "runner", Path(__file__).resolve().parents[1] / "export" / "runner.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    runner.choose_openblas_kernels()  # the core type the programs' OpenBLAS gets
    ob = ctypes.CDLL(blas, mode=ctypes.RTLD_GLOBAL)
    ob.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [
        ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    lib = ctypes.CDLL(shim)
    lib.wb_dnnl_context_new.restype = ctypes.c_void_p
    fields = [ctypes.c_long] * 5 + [ctypes.c_long * 2, ctypes.c_int]

    class Desc(ctypes.Structure):  # wb_matmul_desc (onednn.MatMulDesc, without dace)
        _fields_ = list(zip(("m", "k", "n", "lda", "ldc", "b_strides", "has_bias"), fields))

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if b_transposed else (k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    y1, y2 = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    d = Desc(m, k, n, k, n, (ctypes.c_long * 2)(*((1, k) if b_transposed else (n, 1))), 1)
    ctx = ctypes.c_void_p(lib.wb_dnnl_context_new())
    p = {x: ctypes.c_void_p(v.ctypes.data) for x, v in (("a", a), ("b", b), ("bias", bias),
                                                         ("y1", y1), ("y2", y2))}

    def onednn():
        if lib.wb_dnnl_matmul(ctx, ctypes.byref(d), p["a"], p["b"], p["bias"], p["y1"]):
            raise RuntimeError("wb_dnnl_matmul failed")

    def blas_call():  # what the BLAS implementation runs: bias rows, then sgemm onto them
        y2[:] = bias
        ob.cblas_sgemm(101, 111, 112 if b_transposed else 111, m, n, k, 1.0, p["a"], k, p["b"],
                       k if b_transposed else n, 1.0, p["y2"], n)

    for f in (onednn, blas_call):
        f()
    if not np.allclose(y1, y2, rtol=1e-3, atol=1e-3 * np.sqrt(k)):
        raise RuntimeError("oneDNN and the BLAS disagree on this GEMM")
    reps = max(3, int(0.02 / max(2 * m * k * n / 50e9, 1e-6)))
    times = {"onednn": [], "blas": []}
    for _ in range(_ROUNDS):
        for name, f in (("onednn", onednn), ("blas", blas_call)):
            start = time.perf_counter()
            for _ in range(reps):
                f()
            times[name].append((time.perf_counter() - start) / reps * 1e3)
    return {name: round(min(t), 4) for name, t in times.items()}


if __name__ == "__main__":
    m_, k_, n_, t_ = (int(v) for v in sys.argv[1:5])
    print(json.dumps(_time_both(m_, k_, n_, bool(t_), sys.argv[5], sys.argv[6])))
