"""Test-wide setup: every build and cached model goes to a throw-away folder.

This runs before any test module imports workbench or dace, so the cache
and DaCe's build folder never point into the repository or the user's home.
Set WORKBENCH_TEST_CACHE to a folder to keep the generated code for a look.

The test processes (pytest-xdist's workers) share one cache, as a user's
processes share ~/.cache/dace-workbench: a unit, the precompiled header or a
zoo export made by one is used by the others (and the sharing is exercised).
The controller makes the folder before it starts the workers, which inherit
its environment; DaCe's own build folder and the sessions stay per process.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

_kept = os.environ.get("WORKBENCH_TEST_CACHE")
_shared = os.environ.get("WB_TESTS_SHARED_CACHE") if os.environ.get("PYTEST_XDIST_WORKER") \
    else None
_cache = Path(_kept or _shared or tempfile.mkdtemp(prefix="wb-tests-"))
_owner = not (_kept or _shared)   # the process that made the folder removes it
_cache.mkdir(parents=True, exist_ok=True)
os.environ["WB_TESTS_SHARED_CACHE"] = str(_cache)
_private = _cache / f"process-{os.getpid()}"
os.environ["WORKBENCH_CACHE"] = str(_cache)
os.environ["DACE_default_build_folder"] = str(_private / "dacecache")
os.environ["WORKBENCH_SESSIONS"] = str(_private / "sessions")   # the window's autosaved sessions
if "dace" in sys.modules:  # imported early by a plugin: its config is already read
    import dace
    dace.config.Config.set("default_build_folder", value=str(_private / "dacecache"))

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # for `import onnx_helpers` under any rootdir/import mode
    sys.path.insert(0, str(TESTS))


def pytest_unconfigure(config):
    if _owner:
        shutil.rmtree(_cache, ignore_errors=True)


# The files that take longest (seconds of one process in a fresh-clone run of
# 2026-11-27: the one-test suite files run 2-3.5 minutes each), started first: with
# ``--dist loadfile --no-loadscope-reorder`` (the Makefile) files go out in this
# order, and a long file handed out last keeps one process busy while the other
# has nothing left to do.
LONGEST_FIRST = ("test_ops.py", "test_conformance_sample.py", "test_cuda_compile.py",
                 "test_real_exports.py", "test_quantized_models.py", "test_more_ops.py",
                 "test_ops_losses_bits.py", "test_transforms_fusion.py", "test_backend.py",
                 "test_fuzz_sample.py", "test_half.py", "test_isolated_run.py",
                 "test_linear_attention.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: order kept
