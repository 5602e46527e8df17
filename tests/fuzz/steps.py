"""Random step sequences never give a wrong answer: ``python -m tests.fuzz --steps``.

Each sequence opens a model, applies 10-30 steps drawn at random from the
matches the library lists at that point, then builds the program and
verifies it against onnxruntime. Rules:

1. A step picks a level uniformly (local, fusion, layout, global), then one
   of that level's matches (``ws.transformations(level=..., predict=False)``),
   so a level with many matches does not drown the others; a level with no
   match is left out for that step, and the sequence ends early when no level
   has one. The draw is seeded by (seed, model, index): a sequence is the same
   on every run of the same code.
2. A match ``ws.apply`` refuses with its own ``TransformationError`` is a
   refusal: counted, dropped from the list, and the sequence goes on. Any
   other exception out of a transformation (the session wraps it into a
   ``TransformationError`` with the original as its cause) is a bug.
3. After the sequence: build, run on the seeded inputs, compare with
   onnxruntime. A mismatch, a failed build after accepted steps, a crash
   (the child process died, or the program crashed in the run worker) and a
   hang (no progress for ``timeout`` seconds) are bugs.
4. Sequences run in child processes (one per model and batch, restarted
   after a crash), which write a journal line before and after every step
   and phase, so a crash still leaves the steps that led to it.
5. A failing sequence is written as a recipe (``ws.save_recipe``), and its
   shortest failing prefix is found by bisection: the prefix of ``k`` steps
   is replayed on a fresh import, built and verified, for ``k`` halving the
   range between the import (which verifies) and the whole sequence.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("local", "fusion", "layout", "global")
MIN_STEPS, MAX_STEPS = 10, 30

OK = "ok"
MISMATCH, CRASH, HANG = "wrong-answer", "crash", "hang"
BUILD_FAILURE, APPLY_ERROR, ERROR = "build-failure", "apply-error", "error"
# Worst first: a sequence's outcome is the worst thing that happened in it.
OUTCOMES = (CRASH, MISMATCH, HANG, BUILD_FAILURE, APPLY_ERROR, ERROR, OK)
BUGS = set(OUTCOMES) - {OK}


@dataclass
class Task:
    """One sequence: random (``length`` steps drawn from ``seed``) or a replay of ``steps``."""
    id: str
    model: str
    seed: str = ""
    length: int = 0
    steps: list = None         # recipe steps to replay exactly (bisection)


@dataclass
class Outcome:
    id: str
    model: str
    outcome: str = OK
    tried: int = 0             # steps drawn
    applied: int = 0
    refused: int = 0
    problems: list = field(default_factory=list)   # (outcome, message) of every bug seen
    steps: list = field(default_factory=list)      # the applied steps, as recipe steps
    crashed_in: str = ""       # what was running when the child died or hung
    seconds: float = 0.0
    recipe: str = ""           # recipe file of a failing sequence
    prefix: int = None         # shortest failing prefix (bisection), in applied steps
    prefix_recipe: str = ""

    @property
    def message(self) -> str:
        return "; ".join(f"{kind}: {text}" for kind, text in self.problems)


def models(names=None) -> list:
    """The zoo's small models (``zoo:NAME``), or ``names`` as given."""
    if names:
        return list(names)
    from sdfg_models import zoo
    return [zoo.PREFIX + n for n in zoo.names(full=False)]


def plan(model_names, count: int, seed: int) -> list:
    """``count`` random sequences, dealt to the models in turn."""
    tasks = []
    for i in range(count):
        model = model_names[i % len(model_names)]
        draw = random.Random(f"{seed}:{model}:{i}")
        tasks.append(Task(f"{i:04d}", model, f"{seed}:{model}:{i}",
                          draw.randint(MIN_STEPS, MAX_STEPS)))
    return tasks


def _file_stem(task) -> str:
    model = task.model.replace("zoo:", "").replace("/", "_").replace(".onnx", "")
    return f"{model}-{task.id}"


# -- the parent: children, outcomes, bisection ---------------------------------------
def outcome_of(task: Task, journal: Path, died: str = "") -> Outcome:
    """Read a task's journal; ``died`` says how its child ended when it never finished."""
    result = Outcome(task.id, task.model)
    lines = [json.loads(x) for x in journal.read_text().splitlines()] if journal.exists() else []
    pending, last = None, "start"
    for line in lines:
        event = line["event"]
        if event == "try":
            result.tried += 1
            pending, last = line["step"], f"applying {line['step']['transformation']}"
        elif event == "applied":
            result.applied += 1
            result.steps.append(pending)
            pending = None
        elif event == "refused":
            result.refused += 1
            pending = None
        elif event == "phase":
            last = line["phase"]
        elif event in BUGS:
            message = line.get("message", "")
            if event == APPLY_ERROR:
                message, pending = f"{pending['transformation']}: {message}", None
            result.problems.append((event, message))
    finished = bool(lines) and lines[-1]["event"] == "done"
    if not finished:
        kind = HANG if died == "timeout" else CRASH if died.startswith("killed") else ERROR
        result.crashed_in = last
        if pending is not None:   # died inside a step: it goes into the recipe
            result.steps.append(pending)
        result.problems.append((kind, f"child {died or 'died'} while {last}"))
    if len(lines) > 1:
        result.seconds = round(lines[-1]["t"] - lines[0]["t"], 1)
    kinds = [k for k, _ in result.problems]
    result.outcome = min(kinds, key=OUTCOMES.index) if kinds else OK
    return result


def _child_command(tasks: list, out: Path) -> list:
    spec = out / f"tasks-{tasks[0].id}-{len(tasks)}-{os.getpid()}-{time.monotonic_ns()}.json"
    spec.write_text(json.dumps([asdict(t) for t in tasks]))
    return [sys.executable, "-m", "tests.fuzz.step_child", str(spec), str(out)]


def run_tasks(tasks: list, out: Path, timeout: float, on_result=None) -> list:
    """Run ``tasks`` (one model) in child processes: a child that dies or hangs is
    replaced by a fresh one for the tasks after the one it died in."""
    results, pending = [], list(tasks)
    while pending:
        log = out / f"child-{pending[0].id}.log"
        with open(log, "ab") as stderr:
            proc = subprocess.Popen(_child_command(pending, out), cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)
            died = _watch(proc, pending, out, timeout)
        done = []
        for task in pending:
            journal = out / f"{_file_stem(task)}.jsonl"
            lines = journal.read_text().splitlines() if journal.exists() else []
            if lines and json.loads(lines[-1])["event"] == "done":
                done.append(outcome_of(task, journal))
            elif lines:   # the task the child was in when it died
                done.append(outcome_of(task, journal, died or f"exited {proc.returncode}"))
                break
            else:
                break
        for result in done:
            results.append(result)
            if on_result:
                on_result(result)
        finished = {r.id for r in done}
        if not done and died:   # died before any journal: count the first as crashed
            first = pending[0]
            result = Outcome(first.id, first.model, CRASH,
                             problems=[(CRASH, f"child {died}: {_tail(log)}")])
            results.append(result)
            finished.add(first.id)
            if on_result:
                on_result(result)
        pending = [t for t in pending if t.id not in finished]
    return results


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-500:]
    except OSError:
        return ""


def _watch(proc, tasks, out: Path, timeout: float) -> str:
    """Wait for ``proc``; kill it when one task's journal stops growing for ``timeout``
    seconds. Returns "" for a normal exit, else how it ended."""
    import signal
    seen, since = None, time.monotonic()
    while True:
        try:
            proc.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            pass
        sizes = tuple(_size(out / f"{_file_stem(t)}.jsonl") for t in tasks)
        if sizes != seen:
            seen, since = sizes, time.monotonic()
        elif time.monotonic() - since > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "timeout"
    code = proc.returncode
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return "" if code == 0 else f"exited {code}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def bisect(result: Outcome, out: Path, timeout: float) -> None:
    """Rule 5: the fewest applied steps whose replay still fails (in ``result.prefix``)."""
    from workbench.recipe import save_recipe
    steps = result.steps
    lo, hi = 0, len(steps)   # the import verifies; all of ``steps`` fail
    probe = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe += 1
        task = Task(f"{result.id}-prefix{mid}", result.model, steps=steps[:mid])
        (verdict,) = run_tasks([task], out, timeout) or [None]
        if verdict is not None and verdict.outcome != OK:
            hi = mid
        else:
            lo = mid
    result.prefix = hi
    path = out / f"{_file_stem(Task(result.id, result.model))}-prefix.json"
    save_recipe(path, f"{result.model}-{result.id}-shortest-failing-prefix", steps[:hi])
    result.prefix_recipe = str(path)


def batches(tasks: list, size: int) -> list:
    """Tasks of one model at a time, ``size`` per child (one import per batch), the
    models' batches taken in turn so that a run cut short has touched every model."""
    by_model = {}
    for task in tasks:
        by_model.setdefault(task.model, []).append(task)
    chunks = [[mine[k:k + size] for k in range(0, len(mine), size)]
              for mine in by_model.values()]
    return [c[k] for k in range(max(map(len, chunks), default=0)) for c in chunks if k < len(c)]


def fuzz(tasks: list, out: Path, timeout: float = 600.0, jobs: int = 1, bisect_failures=True,
         on_result=None, batch: int = 4) -> list:
    """Run ``tasks`` (``batch`` of one model per child, ``jobs`` children at a time);
    bisect the failures."""
    from concurrent.futures import ThreadPoolExecutor
    out.mkdir(parents=True, exist_ok=True)

    def one_batch(chunk):
        results = run_tasks(chunk, out, timeout, on_result)
        for r in results:
            recipe = out / f"{_file_stem(Task(r.id, r.model))}.json"
            if r.outcome in BUGS and r.steps:
                from workbench.recipe import save_recipe
                if not recipe.exists():   # died before the child could write it
                    save_recipe(recipe, f"{r.model}-{r.id}", r.steps)
                r.recipe = str(recipe)
                if bisect_failures and r.outcome != APPLY_ERROR and r.crashed_in in (
                        "", "build", "verify"):
                    bisect(r, out, timeout)
        return results

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        done = list(pool.map(one_batch, batches(tasks, batch)))
    order = {t.id: k for k, t in enumerate(tasks)}
    return sorted((r for b in done for r in b), key=lambda r: order[r.id])


def tally(results: list) -> dict:
    return {"sequences": len(results), "steps_tried": sum(r.tried for r in results),
            "steps_applied": sum(r.applied for r in results),
            "refusals": sum(r.refused for r in results),
            **{kind: sum(r.outcome == kind for r in results) for kind in OUTCOMES}}


def per_model(results: list) -> str:
    """One line per model: sequences, steps applied, refusals, outcomes."""
    lines = [f"{'model':28} {'seqs':>5} {'applied':>8} {'refused':>8}  outcomes"]
    for model in dict.fromkeys(r.model for r in results):
        mine = [r for r in results if r.model == model]
        counts = {k: sum(r.outcome == k for r in mine) for k in OUTCOMES}
        lines.append(f"{model:28} {len(mine):5} {sum(r.applied for r in mine):8} "
                     f"{sum(r.refused for r in mine):8}  "
                     + ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    return "\n".join(lines)


def describe(result: Outcome) -> str:
    text = f"#{result.id} {result.model}: {result.outcome} ({result.message[:600]})"
    if result.recipe:
        text += f"\n    recipe ({result.applied} steps): {result.recipe}"
    if result.prefix is not None:
        step = result.steps[result.prefix - 1]
        text += (f"\n    verify first fails after step {result.prefix}: {step['transformation']}"
                 f" ({step.get('description') or step.get('where')})"
                 f"\n    shortest failing prefix: {result.prefix_recipe}")
    return text


def main(args) -> int:
    """``python -m tests.fuzz --steps`` (arguments parsed in tests/fuzz/__main__.py)."""
    names = models(args.models.split(",") if args.models else None)
    if getattr(args, "train", False):
        from tests.fuzz.step_child import TRAIN
        names = [TRAIN + n for n in names]
    tasks = plan(names, args.count, args.seed)
    out = Path(args.out or tempfile.mkdtemp(prefix="fuzz-steps-"))
    t0 = time.perf_counter()
    done = [0]

    def report(result):
        done[0] += 1
        if result.outcome != OK or args.verbose:
            print(f"[{time.perf_counter() - t0:7.1f}s] {done[0]}/{len(tasks)} "
                  f"#{result.id} {result.model}: {result.outcome}, {result.applied} applied, "
                  f"{result.refused} refused {result.message[:300]}", file=sys.stderr, flush=True)

    results = fuzz(tasks, out, timeout=args.timeout, jobs=args.jobs,
                   bisect_failures=not args.no_bisect, on_result=report)
    wall = time.perf_counter() - t0
    counts = tally(results)
    print(per_model(results))
    print(f"{counts['sequences']} sequences on {len(names)} models, {counts['steps_tried']} steps "
          f"tried, {counts['steps_applied']} applied, {counts['refusals']} refused; "
          + ", ".join(f"{k} {counts[k]}" for k in OUTCOMES)
          + f"; wall {wall:.0f}s (seed {args.seed}, files in {out})")
    bad = [r for r in results if r.outcome in BUGS]
    for r in bad:
        print("  " + describe(r))
    if args.json:
        print(json.dumps({**counts, "models": names, "wall_s": round(wall, 1), "seed": args.seed,
                          "out": str(out), "results": [
                              {**asdict(r), "problems": [list(p) for p in r.problems]}
                              for r in results]}))
    return 1 if bad else 0
