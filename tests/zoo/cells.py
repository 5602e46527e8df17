"""The cells of the path matrix for one zoo model, run in this process.

    python -m tests.zoo.cells MODEL --paths import,default,... --work DIR

writes one JSON line per finished cell to stdout (everything else printed goes to
stderr): ``{"model", "path", "ok",
"text", "seconds"}``. Every cell verifies against the zoo's reference (seeded
inputs, onnxruntime's outputs on them). The cells after the recipes (script,
export, reopen) work on the session the ``auto`` recipe left (opened again
here if the ``auto`` cell did not run in this process); the fresh-process
halves run ``python -m tests.zoo.fresh``.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

PATHS = ["import", "default", "auto", "script", "export", "reopen"]
# A fresh process gets this long to replay/open, build and verify one model.
FRESH_TIMEOUT_S = 3600


class CellFailed(Exception):
    """A cell's one-line outcome when it did not pass."""


def verify_text(ws, model) -> str:
    """Verify against the zoo's reference; the worst relative error, or CellFailed."""
    from sdfg_models import zoo
    inputs, outputs = zoo.reference(model)
    report = ws.verify(inputs, expect=outputs)
    worst = report.worst()
    if not report.match:
        raise CellFailed(f"mismatch: {worst.name} max abs err {worst.max_abs_err:.3g}, "
                         f"max rel err {worst.max_rel_err:.3g}")
    return f"max rel err {worst.max_rel_err:.1e}"


def sdfg_digest(sdfg) -> str:
    """Of the canonical JSON without memlet GUIDs (random per copy of an SDFG)."""
    from workbench.session.history import canonical_json
    return hashlib.sha256(canonical_json(sdfg).encode()).hexdigest()[:16]


def skipped_steps(added) -> list:
    """The steps a recipe skipped (``ws.optimize`` returns them as ``.skipped``)."""
    return list(getattr(added, "skipped", None) or ())


def steps_text(added) -> str:
    skipped = skipped_steps(added)
    text = f"{len(added)} steps"
    if skipped:
        names = sorted({_skip_name(s) for s in skipped})
        text += f", {len(skipped)} skipped ({', '.join(names)})"
    return text


def _skip_name(skip) -> str:
    for key in ("transformation", "name"):
        value = skip.get(key) if isinstance(skip, dict) else getattr(skip, key, None)
        if value:
            return str(value)
    return str(skip).split(":")[0][:40]


class ModelCells:
    def __init__(self, model, work: Path):
        self.model, self.work = model, work
        self.work.mkdir(parents=True, exist_ok=True)
        self.imported = None   # the session of the import cell (the default cell goes on it)
        self.tuned = None      # the session after the auto recipe
        self.skipped = 0       # steps the last recipe cell skipped

    def open(self):
        import workbench
        return workbench.open(f"zoo:{self.model.name}")

    # -- the cells ----------------------------------------------------------------
    def cell_import(self) -> str:
        self.imported = self.open()
        return verify_text(self.imported, self.model)

    def cell_default(self) -> str:
        ws, self.imported = self.imported or self.open(), None
        added = ws.optimize("default")
        self.skipped = len(skipped_steps(added))
        return f"{steps_text(added)}; {verify_text(ws, self.model)}"

    def cell_auto(self) -> str:
        ws = self.open()
        added = ws.optimize("auto")
        self.tuned, self.skipped = ws, len(skipped_steps(added))
        return f"{steps_text(added)}; {verify_text(ws, self.model)}"

    def cell_script(self) -> str:
        ws = self._tuned()
        script = self.work / "script.py"
        ws.save_script(script)
        verified = self._check_fresh(self._fresh("script", script), ws, "replayed")
        return f"{len(ws.history)} steps replayed, same SDFG; {verified}"

    def cell_export(self) -> str:
        ws = self._tuned()
        folder = self.work / "export"
        ws.export(folder)
        done = subprocess.run([sys.executable, "run.py", "--check"], cwd=folder,
                              capture_output=True, text=True, timeout=FRESH_TIMEOUT_S)
        if done.returncode != 0:
            lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
            raise CellFailed(f"run.py --check exit {done.returncode}: {lines[-1][:200]}")
        return "run.py --check passed"

    def cell_reopen(self) -> str:
        ws = self._tuned()
        folder = self.work / "session"
        ws.save(folder)
        verified = self._check_fresh(self._fresh("session", folder), ws, "reopened")
        return f"same SDFG at step {len(ws.history)}; {verified}"

    # -- shared ---------------------------------------------------------------------
    def _tuned(self):
        if self.tuned is None:
            self.tuned = self.open()
            self.tuned.optimize("auto")
        return self.tuned

    def _fresh(self, kind: str, target: Path) -> dict:
        """Replay a script / reopen a session folder in a new process; its digest and
        verify text (or CellFailed with its one-line error)."""
        done = subprocess.run([sys.executable, "-m", "tests.zoo.fresh", kind, str(target),
                               self.model.name], capture_output=True, text=True,
                              timeout=FRESH_TIMEOUT_S, cwd=Path(__file__).resolve().parents[2])
        lines = done.stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            err = (done.stderr.strip() or "no output").splitlines()
            raise CellFailed(f"fresh process exit {done.returncode}: {err[-1][:200]}") from None
        if not result.get("ok"):
            raise CellFailed(f"fresh process: {result.get('error')}")
        return result

    def _check_fresh(self, fresh: dict, ws, what: str) -> str:
        if fresh["digest"] != sdfg_digest(ws.sdfg):
            raise CellFailed(f"{what}: the SDFG differs from the session's "
                             f"({fresh['steps']} vs {len(ws.history)} steps)")
        if "verify_error" in fresh:
            raise CellFailed(f"{what}, same SDFG, then {fresh['verify_error']}")
        return fresh["verify"]


def one_line(e: BaseException) -> str:
    if isinstance(e, CellFailed):
        return str(e)
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def run_cells(name: str, paths, work: Path, out=sys.stdout) -> None:
    from sdfg_models import zoo
    cells = ModelCells(zoo.get(name), work)
    for path in paths:
        t0, cells.skipped = time.perf_counter(), 0
        try:
            ok, text = True, getattr(cells, f"cell_{path}")()
        except Exception as e:  # noqa: BLE001 (a cell's failure is its result)
            ok, text = False, one_line(e)
            if isinstance(e, (KeyError, AttributeError, TypeError)):  # a bug: show where
                traceback.print_exc(file=sys.stderr)
        out.write(json.dumps({"model": name, "path": path, "ok": ok, "text": text,
                              "skipped": cells.skipped,
                              "seconds": round(time.perf_counter() - t0, 1)}) + "\n")
        out.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.zoo.cells")
    p.add_argument("model")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--work", required=True, help="folder for scripts, exports, sessions")
    args = p.parse_args(argv)
    # The result lines keep the real stdout; whatever else prints (DaCe, compilers) goes
    # to stderr, so the parent reads nothing but results here.
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    run_cells(args.model, args.paths.split(","), Path(args.work), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
