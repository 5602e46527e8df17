"""``python -m tests.zoo [--full] [--models A,B] [--paths P,Q] [--jobs N] [--json]``

The path matrix: every zoo model (``sdfg_models/zoo.py``) through every path
a user takes, each cell checked against onnxruntime on the zoo's seeded inputs:

  import   open ``zoo:NAME`` -> verify
  default  the ``default`` recipe -> verify (steps it skipped are counted)
  auto     the ``auto`` recipe -> verify
  script   save_script -> replayed in a fresh process -> the same SDFG -> verify
  export   ws.export(folder) -> ``python run.py --check`` in a fresh process
  reopen   the session folder -> workbench.open_session in a fresh process -> the
           same SDFG -> verify

Each model runs in its own process; a cell that crashes or hangs it is marked
failed and the model's other cells run in a new process. ``--full`` runs the
full-size models, generating the missing ones first (needs torch). Builds go
to a per-run cache folder. ``--jobs 2`` runs two models at a time (their builds
are single compiler processes, so two cores finish the full matrix in about
half the time). Exit 1 if any cell failed.
"""
import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.zoo.cells import PATHS

ROOT = Path(__file__).resolve().parents[2]


def pick_models(full: bool, wanted: str) -> tuple:
    """(the zoo names picked, the names not in the zoo)."""
    from sdfg_models import zoo
    names = zoo.names(full=full)
    if not wanted:
        return names, []
    picked, unknown = [], []
    for name in wanted.split(","):
        name = name.strip().removeprefix(zoo.PREFIX)
        name = f"{name}-full" if full and f"{name}-full" in names else name
        (picked if name in names else unknown).append(name)
    return picked, unknown


def run_cache(keep: str = None) -> Path:
    """A fresh cache folder for this run's builds; the full-size models and the cached
    references stay shared with the user's cache (links)."""
    from sdfg_models import zoo
    cache = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="wb-zoo-"))
    cache.mkdir(parents=True, exist_ok=True)
    for shared in (zoo.full_folder(), zoo.cache_root() / "zoo-reference"):
        shared.mkdir(parents=True, exist_ok=True)
        link = cache / shared.name
        if not link.exists():
            link.symlink_to(shared, target_is_directory=True)
    return cache


def generate_missing(models: list, env: dict) -> dict:
    """Write the full-size models not generated yet; {name: error line} for failures."""
    from sdfg_models import zoo
    errors = {}
    for name in models:
        entry = zoo.get(name)
        if entry.available():
            continue
        print(f"generating {name}: {zoo.generate_command(entry)}", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, entry.generator, "--full", entry.file],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip() or "no output").splitlines()[-1]
            errors[name] = f"could not generate it ({zoo.generate_command(entry)}): {last[:200]}"
    return errors


class ModelRun:
    """The cells of one model, in as many child processes as crashes and hangs need."""

    def __init__(self, name, paths, work: Path, env, cell_timeout, log):
        self.name, self.paths, self.work, self.env = name, list(paths), work, env
        self.cell_timeout, self.log = cell_timeout, log
        self.results = {}

    def run(self) -> dict:
        while len(self.results) < len(self.paths):
            self._child([p for p in self.paths if p not in self.results])
        return self.results

    def command(self, paths) -> list:
        return [sys.executable, "-m", "tests.zoo.cells", self.name, "--paths", ",".join(paths),
                "--work", str(self.work)]

    def _child(self, paths):
        proc = subprocess.Popen(self.command(paths), cwd=ROOT, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        lines, tail = queue.Queue(), []
        threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True).start()
        errors = threading.Thread(target=_pump, args=(proc.stderr,
                                                       lambda s: _keep_tail(tail, s)),
                                  daemon=True)
        errors.start()
        for path in paths:
            t0 = time.perf_counter()
            try:
                line = _next_result(lines, self.cell_timeout)
            except queue.Empty:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and its fresh processes
                proc.wait()
                self._record({"model": self.name, "path": path, "ok": False, "skipped": 0,
                              "text": f"timed out after {self.cell_timeout:.0f} s",
                              "seconds": round(time.perf_counter() - t0, 1)})
                return
            if line is None:  # the child died inside this cell
                code = proc.wait()
                errors.join(timeout=10)   # its last words may still be in the pipe
                why = f"signal {-code}" if code < 0 else f"exit {code}"
                last = tail[-1] if tail else "no output"
                self._record({"model": self.name, "path": path, "ok": False, "skipped": 0,
                              "text": f"process died ({why}): {last[:200]}",
                              "seconds": round(time.perf_counter() - t0, 1)})
                return
            self._record(line)
        proc.wait()

    def _record(self, result):
        self.results[result["path"]] = result
        self.log(result)


def _pump(stream, put):
    for line in stream:
        put(line.rstrip("\n"))
    put(None)


def _keep_tail(tail: list, line):
    if line and line.strip():
        tail.append(line.strip())
        del tail[:-5]


def _next_result(lines: queue.Queue, timeout: float):
    while True:
        line = lines.get(timeout=timeout)
        if line is None:
            return None
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and "path" in result:
            return result


def mark(result) -> str:
    if not result["ok"]:
        return "FAIL"
    return "ok" + (f" ({result['skipped']} skipped)" if result.get("skipped") else "")


def table(models, paths, results) -> str:
    """Model x path marks, each failure's one-line error numbered below."""
    rows, notes = [], []
    for model in models:
        row = [model]
        for path in paths:
            r = results.get((model, path))
            if r is None:
                row.append("-")
            elif r["ok"]:
                row.append(mark(r))
            else:
                notes.append(f"[{len(notes) + 1}] {model} / {path}: {r['text']}")
                row.append(f"FAIL [{len(notes)}]")
        total = sum(r["seconds"] for (m, _), r in results.items() if m == model)
        rows.append(row + [f"{total:.0f} s"])
    header = ["model"] + paths + ["time"]
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.zoo", description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="the full-size models")
    p.add_argument("--models", help="comma-separated zoo names (default: all)")
    p.add_argument("--paths", help=f"comma-separated paths (default: {','.join(PATHS)})")
    p.add_argument("--cell-timeout", type=float, default=None,
                   help="seconds per cell before it counts as hung (default 1800, --full 7200)")
    p.add_argument("--jobs", type=int, default=1, help="models run at the same time (1)")
    p.add_argument("--keep", metavar="DIR", help="use DIR as the run's cache and keep it")
    p.add_argument("--json", action="store_true", help="one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no line per cell on stderr")
    args = p.parse_args(argv)
    paths = args.paths.split(",") if args.paths else list(PATHS)
    bad = [x for x in paths if x not in PATHS]
    if bad:
        p.error(f"unknown path(s) {', '.join(bad)}; paths are {', '.join(PATHS)}")
    models, unknown = pick_models(args.full, args.models)
    if unknown:
        from sdfg_models import zoo
        p.error(f"unknown {'full-size ' if args.full else ''}zoo model(s) {', '.join(unknown)}; "
                f"known: {', '.join(zoo.names(full=args.full))}")
    cache = run_cache(args.keep)
    env = {**os.environ, "WORKBENCH_CACHE": str(cache),
           "DACE_default_build_folder": str(cache / "dacecache")}
    if args.jobs > 1 and "OMP_NUM_THREADS" not in env:
        # spinning OpenMP teams of two models on the same cores slow both down
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.jobs))
    timeout = args.cell_timeout or (7200 if args.full else 1800)
    t0 = time.perf_counter()

    def log(result):
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:7.1f}s] {result['model']} / {result['path']}: "
                  f"{'ok' if result['ok'] else 'FAIL'} {result['text']} "
                  f"({result['seconds']} s)", file=sys.stderr, flush=True)

    results = {}
    missing = generate_missing(models, env) if args.full else {}
    for model in missing:
        for path in paths:
            results[(model, path)] = {"model": model, "path": path, "ok": False,
                                      "skipped": 0, "text": missing[model], "seconds": 0}
    runs = [ModelRun(model, paths, cache / "work" / model, env, timeout, log)
            for model in models if model not in missing]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for run, done in zip(runs, pool.map(ModelRun.run, runs)):
            for path, result in done.items():
                results[(run.name, path)] = result
    print(table(models, paths, results))
    failed = sum(not r["ok"] for r in results.values())
    if not args.keep:
        import shutil
        shutil.rmtree(cache, ignore_errors=True)
    else:
        print(f"run folder kept: {cache}", file=sys.stderr)
    if args.json:
        print(json.dumps({"cells": len(results), "passed": len(results) - failed,
                          "failed": failed,
                          "skipped_steps": sum(r.get("skipped", 0) for r in results.values()),
                          "seconds": round(time.perf_counter() - t0, 1),
                          "results": list(results.values())}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
