"""The on-disk cache of compiled units, shared by builds, sessions and processes.

One folder per content key: ``<cache>/units/<key[:2]>/<key>/`` holding the
unit's library (``unit.so``) and ``meta.json`` (its C name and signature).
An entry appears whole or not at all: it is made in a private folder and
renamed into place; when two processes make the same unit, the first
rename wins and the other's copy is dropped. A hit touches ``meta.json``;
past the size cap (``WORKBENCH_UNIT_CACHE_MB``, default 2048) the least
recently used entries go. A build never loads a library from here: it
hard-links what it uses into its own folder, so an eviction cannot take a
unit from a program that is built or running.
"""
import json
import logging
import os
import shutil
import time
from pathlib import Path

from workbench.build.settings import cache_dir

log = logging.getLogger("workbench.build")
LIBRARY, META, SOURCE = "unit.so", "meta.json", "unit.cpp"


def root() -> Path:
    """``$WORKBENCH_UNIT_CACHE``, else ``units`` in the workbench's cache."""
    folder = Path(os.environ.get("WORKBENCH_UNIT_CACHE") or cache_dir() / "units").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def entry(key: str) -> Path:
    return root() / key[:2] / key


def lookup(key: str):
    """The entry's metadata (touched as used), or None on a miss."""
    meta = entry(key) / META
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if not (entry(key) / LIBRARY).is_file():
        return None
    try:
        os.utime(meta)
    except OSError:
        pass
    return info


def publish(key: str, library: Path, info: dict, source: Path = None) -> None:
    """Put a freshly compiled unit (and its C++, for reading) into the cache, atomically;
    a racing twin is dropped."""
    staging = root() / "staging" / f"{os.getpid()}-{time.time_ns()}-{key[:16]}"
    staging.mkdir(parents=True)
    shutil.copyfile(library, staging / LIBRARY)
    if source is not None and source.is_file():
        shutil.copyfile(source, staging / SOURCE)
    (staging / META).write_text(json.dumps(info, sort_keys=True))
    final = entry(key)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
    except OSError:   # another process published the same unit first
        shutil.rmtree(staging, ignore_errors=True)


def link_into(key: str, folder: Path, name: str, what: str = LIBRARY) -> Path:
    """The unit's library (or ``what``) hard-linked (or copied) into ``folder`` as ``name``."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if not target.exists():
        source = entry(key) / what
        if not source.exists():
            return None
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    return target


def reads_constants(base: str):
    """Whether units of constants-blind key ``base`` were found to read their recorded
    constants (True/False), or None when no such unit was generated yet."""
    folder = root() / "constants"
    if (folder / f"{base}.reads").exists():
        return True
    if (folder / f"{base}.blind").exists():
        return False
    return None


def record_constant_reads(base: str, reads: bool) -> None:
    folder = root() / "constants"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{base}.{'reads' if reads else 'blind'}").touch()


def cap_bytes() -> int:
    return int(float(os.environ.get("WORKBENCH_UNIT_CACHE_MB", "2048")) * 2 ** 20)


def evict(cap: int = None) -> int:
    """Drop least recently used entries until the cache holds at most ``cap`` bytes
    (default ``cap_bytes()``); how many were dropped."""
    cap = cap_bytes() if cap is None else cap
    drop_stale_staging()
    entries = []
    for shard in root().iterdir():
        if shard.name == "staging" or not shard.is_dir():
            continue
        for folder in shard.iterdir():
            try:
                used = (folder / META).stat().st_mtime
                size = sum(f.stat().st_size for f in folder.iterdir())
            except OSError:
                continue
            entries.append((used, size, folder))
    total = sum(size for _, size, _ in entries)
    dropped = 0
    for used, size, folder in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        dropped += 1
    if dropped:
        log.info("unit cache: dropped %d least recently used units", dropped)
    return dropped


def drop_stale_staging(age_s: float = 3600) -> None:
    """Remove staging folders a crashed process left behind."""
    staging = root() / "staging"
    if not staging.is_dir():
        return
    now = time.time()
    for folder in staging.iterdir():
        try:
            if now - folder.stat().st_mtime > age_s:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass


class empty_cache:
    """A context in which the unit cache is a new, empty folder (for measuring a cold
    build); child processes started inside share it. The folder goes afterwards."""

    def __enter__(self):
        import tempfile
        self.saved = os.environ.get("WORKBENCH_UNIT_CACHE")
        self.folder = tempfile.mkdtemp(prefix="units-cold-", dir=cache_dir())
        os.environ["WORKBENCH_UNIT_CACHE"] = self.folder
        return Path(self.folder)

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop("WORKBENCH_UNIT_CACHE", None)
        else:
            os.environ["WORKBENCH_UNIT_CACHE"] = self.saved
        shutil.rmtree(self.folder, ignore_errors=True)
        return False
