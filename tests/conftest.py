"""Test-wide setup: every build and cached model goes to a throw-away folder.

This runs before any test module imports workbench or dace, so the cache
and DaCe's build folder never point into the repository or the user's home.
Set WORKBENCH_TEST_CACHE to a folder to keep the generated code for a look.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

_kept = os.environ.get("WORKBENCH_TEST_CACHE")
_cache = Path(_kept) if _kept else Path(tempfile.mkdtemp(prefix="wb-tests-"))
_cache.mkdir(parents=True, exist_ok=True)
os.environ["WORKBENCH_CACHE"] = str(_cache)
os.environ["DACE_default_build_folder"] = str(_cache / "dacecache")
os.environ["WORKBENCH_SESSIONS"] = str(_cache / "sessions")   # the window's autosaved sessions
if "dace" in sys.modules:  # imported early by a plugin: its config is already read
    import dace
    dace.config.Config.set("default_build_folder", value=str(_cache / "dacecache"))

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # for `import onnx_helpers` under any rootdir/import mode
    sys.path.insert(0, str(TESTS))


def pytest_unconfigure(config):
    if not _kept:
        shutil.rmtree(_cache, ignore_errors=True)
