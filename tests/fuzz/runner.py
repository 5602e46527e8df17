"""Run the CLI on mutants in subprocesses and classify how each run ended.

Each mutant gets its own folder under one temporary root (next to
``secret.bin``, the target of escaping external-data paths). ``app.py info``
runs on every mutant; ``app.py verify`` (a real DaCe build and an
onnxruntime comparison) on the mutants ``info`` accepted, a seeded fraction
of them. Every run has a wall-clock limit and an address-space limit
(``RLIMIT_AS``), and the workbench's own memory budget is set below that
limit, so a model that would allocate too much must be refused by the
workbench before the kernel refuses the allocation.
"""
from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.fuzz.mutations import MODEL_FILE, MUTATIONS, OUTSIDE_FILE, mutate

ROOT = Path(__file__).resolve().parents[2]
BASE_MODELS = ("mlp", "resblock", "mbconv", "bert-layer")

# How a run may end. The first two are fine; every other one fails the fuzz run.
# ``accepted-invalid``: exit 0 on a mutant onnxruntime refuses to load.
OK, CLEAN = "ok", "clean-fail"
CRASH, TRACEBACK, HANG, BLOWUP, MESSY = "crash", "traceback", "hang", "blow-up", "messy-message"
INVALID = "accepted-invalid"
OUTCOMES = (OK, CLEAN, INVALID, CRASH, TRACEBACK, HANG, BLOWUP, MESSY)
BAD = (INVALID, CRASH, TRACEBACK, HANG, BLOWUP, MESSY)

# Whether a mutant is still a valid model: onnxruntime builds a session for it.
_ORT_LOADS = ("import sys, onnxruntime as ort; "
              "ort.set_default_logger_severity(4); "
              "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])")

_MEMORY_SIGNS = ("MemoryError", "std::bad_alloc", "Unable to allocate", "out of memory",
                 "Cannot allocate memory")


@dataclass
class Settings:
    timeout_s: float = 120.0           # per command; a run past it is a hang
    address_space: int = 4 << 30       # RLIMIT_AS of each command
    memory_budget: str = "1G"          # WORKBENCH_MEMORY_BUDGET, below address_space
    verify_fraction: float = 1.0       # of the mutants info accepted
    keep_failures: str | None = None   # folder to copy failing mutants into


@dataclass
class Run:
    command: str
    outcome: str
    code: int
    seconds: float
    message: str          # the stderr paragraph (or its start)


@dataclass
class Result:
    index: int
    kind: str
    base: str
    note: str
    runs: list = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """The worst outcome of its runs."""
        return max((r.outcome for r in self.runs), key=OUTCOMES.index)


def plan(count: int, seed: int, kinds=None) -> list:
    """(index, kind, base model) of each mutant: kinds in turn, base models in turn."""
    kinds = list(kinds or MUTATIONS)
    return [(i, kinds[i % len(kinds)], BASE_MODELS[(i // len(kinds)) % len(BASE_MODELS)])
            for i in range(count)]


def mutant_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


def classify(code: int, stderr: str, timed_out: bool, stdout: str = "") -> str:
    if timed_out:
        return HANG
    if any(sign in stderr for sign in _MEMORY_SIGNS) or code == -signal.SIGKILL:
        return BLOWUP
    if "Traceback (most recent call last)" in stderr:
        return TRACEBACK
    if code < 0 or code not in (0, 1, 2):
        return CRASH
    if code == 0:
        return OK
    if code == 1 and not stderr.strip() and ": MISMATCH against " in stdout:
        return CLEAN  # verify's report of a mismatch: on stdout, exit 1
    return CLEAN if is_one_paragraph(stderr) else MESSY


def is_one_paragraph(stderr: str) -> bool:
    """One ``error: ...`` paragraph: only the workbench's own ``warning:`` lines before it,
    no blank line inside it, not longer than the CLI's cut."""
    text = stderr.strip()
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("error: ")), None)
    return (start is not None and all(line.startswith("warning: ") for line in lines[:start])
            and "\n\n" not in text and len(text) < 5000)


def _limit_memory(address_space: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_cli(args: list, cwd: Path, settings: Settings, env: dict):
    """(exit code, stdout, stderr, seconds, timed out) of ``app.py ARGS``."""
    return run_python([str(ROOT / "app.py"), *args], cwd, settings, env)


def onnxruntime_loads(path: Path, settings: Settings, env: dict) -> bool:
    code, _, _, _, timed_out = run_python(["-c", _ORT_LOADS, str(path)], path.parent, settings, env)
    return code == 0 and not timed_out


def run_python(args: list, cwd: Path, settings: Settings, env: dict):
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True,
                            preexec_fn=_limit_memory(settings.address_space))
    try:
        out, err = proc.communicate(timeout=settings.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # its own session: the compiler goes too
        out, err = proc.communicate()
        timed_out = True
    return proc.returncode, out, err, time.perf_counter() - t0, timed_out


def child_env(settings: Settings) -> dict:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(ROOT), "WORKBENCH_MEMORY_BUDGET": settings.memory_budget,
                "WORKBENCH_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    return env


def write_mutant(mutant, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for rel, data in mutant.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for rel, target in mutant.links.items():
        os.symlink(target, folder / rel)
    return folder / MODEL_FILE


def run_mutant(index, kind, base, model, seed, root: Path, settings: Settings) -> Result:
    rng = mutant_rng(seed, index)
    mutant = mutate(kind, model, rng)
    folder = root / f"m{index:05d}"
    path = write_mutant(mutant, folder)
    result = Result(index, kind, base, mutant.note)
    env = child_env(settings)
    commands = ["info"]
    for command in commands:
        code, out, err, seconds, timed_out = run_cli(["--quiet", command, str(path)], folder,
                                                     settings, env)
        outcome = classify(code, err, timed_out, out)
        if command == "info" and outcome == OK and not onnxruntime_loads(path, settings, env):
            outcome, err = INVALID, "onnxruntime refuses this model, info accepted it"
        result.runs.append(Run(command, outcome, code, round(seconds, 2), err.strip()[:2000]))
        if command == "info" and outcome == OK and rng.random() < settings.verify_fraction:
            commands.append("verify")
    if settings.keep_failures and result.outcome in BAD:
        shutil.copytree(folder, Path(settings.keep_failures) / folder.name, symlinks=True,
                        dirs_exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    return result


def run_all(count: int, seed: int, settings: Settings, jobs: int = 1, kinds=None,
            on_result=None) -> list:
    """Run ``count`` mutants (``jobs`` at a time); results in index order."""
    import sdfg_models
    work = plan(count, seed, kinds)
    models = {name: sdfg_models.build(name) for name in {base for _, _, base in work}}
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as tmp:
        root = Path(tmp)
        (root / OUTSIDE_FILE).write_bytes(b"outside the model folder\n" * 64)

        def one(item):
            index, kind, base = item
            result = run_mutant(index, kind, base, models[base], seed, root, settings)
            if on_result:
                on_result(result)
            return result

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            results = list(pool.map(one, work))
    return sorted(results, key=lambda r: r.index)


def tally(results) -> dict:
    """kind -> command -> outcome -> count (commands: info, verify)."""
    table = {}
    for r in results:
        for run in r.runs:
            row = table.setdefault(r.kind, {}).setdefault(run.command, dict.fromkeys(OUTCOMES, 0))
            row[run.outcome] += 1
    return table


W = max(len(o) for o in OUTCOMES) + 1


def format_table(results) -> str:
    table = tally(results)
    head = f"{'mutation':<17}{'cmd':<7}" + "".join(f"{o:>{W}}" for o in OUTCOMES)
    lines = [head, "-" * len(head)]
    totals = {}
    for kind in sorted(table):
        for command in ("info", "verify"):
            row = table[kind].get(command)
            if not row:
                continue
            total = totals.setdefault(command, dict.fromkeys(OUTCOMES, 0))
            for o in OUTCOMES:
                total[o] += row[o]
            lines.append(f"{kind:<17}{command:<7}" + "".join(f"{row[o]:>{W}}" for o in OUTCOMES))
    lines.append("-" * len(head))
    for command, row in totals.items():
        lines.append(f"{'total':<17}{command:<7}" + "".join(f"{row[o]:>{W}}" for o in OUTCOMES))
    return "\n".join(lines)


def failures(results) -> list:
    return [r for r in results if r.outcome in BAD]


def to_json(results) -> list:
    return [{**asdict(r), "outcome": r.outcome} for r in results]
