"""Verified steps: the program of one history step, built and compared with onnxruntime.

``Session.apply(m, verify=True)`` checks the new step before returning;
with ``Session.verify_steps`` every applied step is checked in the
background. The result goes into the step's history entry (and so into the
session folder's manifest):

    entry["verified"] = {"match": bool, "max_abs_err": float, "output": worst output}

plus ``"error"`` when the step's program did not build or crashed (then
``match`` is False and ``max_abs_err`` None). Rules:
1. A check works on the step it was given (its SDFG JSON and weights never
   change), never on ``ws.sdfg``: the session may have moved on meanwhile.
2. DaCe's code generation is not thread-safe: ``prepare`` (JSON to SDFG,
   expand, simplify, generate code) runs under the session's lock; the C++
   compile, the run (in the worker process) and the comparison do not.
3. A background check builds in its own folder (``<slot>-check``), one check
   at a time per session, so it never disturbs the session's build cache.
4. The reference is onnxruntime on the session's seeded inputs (seed 0),
   computed once per session.
5. ``cancel`` (an event) stops a check: its compiler is killed, or its
   worker run; ``Cancelled`` is raised and nothing is recorded.
"""
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from workbench.build import release
from workbench.errors import Cancelled, WorkbenchError
from workbench.progress import Progress
from workbench.runtime.verify import (DEFAULT_ATOL, DEFAULT_RTOL, compare_conditioned,
                                      quantization_steps)


def verified_from(report) -> dict:
    """The history entry's record of a verification report."""
    worst = report.worst()
    return {"match": bool(report.match), "max_abs_err": float(worst.max_abs_err),
            "output": worst.name}


def failed(error: Exception) -> dict:
    """The record of a step whose program did not build or crashed."""
    from workbench.errors import ProgramCrashed
    if isinstance(error, ProgramCrashed):
        what = f"the program crashed: {error.cause}"
    else:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        what = f"{type(error).__name__}: {first[:300]}"
    return {"match": False, "max_abs_err": None, "output": "", "error": what}


def check_now(ws, step, lock, cancel=None) -> dict:
    """Check ``step`` (a ``Session`` step) and record the result; returns the record."""
    with _serial(ws):
        try:
            with lock:
                finish = prepare(ws, step, cancel)
            verified = run_and_compare(ws, step, finish, cancel)
        except Cancelled:
            raise
        except WorkbenchError as e:   # a failed build or a crash is a finding, not an error
            verified = failed(e)
        with lock:
            record(ws, step, verified)
    return verified


def prepare(ws, step, cancel=None):
    """Expand and generate the step's program (rule 2); returns what compiles and loads it."""
    import dace
    from workbench.build import compile_sdfg, session_build_folder
    sdfg = dace.SDFG.from_json(json.loads(step.sdfg_json))
    return compile_sdfg(sdfg, session_build_folder(f"{ws.build_slot}-check"),
                        progress=_Stoppable(cancel), names=dict(ws.operator_names()),
                        defer_compile=True)


def run_and_compare(ws, step, finish, cancel=None) -> dict:
    from workbench.runtime import isolated
    build = finish() if callable(finish) else finish
    try:
        inputs = ws.random_inputs()
        args, results = ws.call_args(build, inputs, weights=step.weights)
        position = ws.timeline.index(step)
        isolated.call(build, args, ws.output_names(), constant=step.weights.keys(),
                      timeout=ws.run_timeout, cancel=cancel, step=_describe(step, position))
    finally:
        release(build)
    outputs = ws.outputs_of(results, {}) if ws.model.counts else {
        o.onnx_name: results[o.onnx_name].reshape(o.shape) for o in ws.outputs}
    report = compare_conditioned(ws.name, outputs, _reference(ws), lambda: _reference(ws, True),
                                 DEFAULT_RTOL, DEFAULT_ATOL,
                                 steps=quantization_steps(ws.model.reference_model))
    return verified_from(report)


def record(ws, step, verified: dict) -> None:
    """Into the step's entry, and the session folder when the step is still there."""
    step.entry["verified"] = verified
    if step in ws.timeline:
        ws.autosave()


class BackgroundChecks:
    """The default scheduler of ``Session.verify_steps``: one thread, steps in order."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="step-checks")
        self._pending = []

    def __call__(self, ws, step) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(check_now, ws, step, ws.lock))

    def wait(self, timeout: float = None) -> None:
        for future in list(self._pending):
            future.result(timeout)
        self._pending = []


class _Stoppable(Progress):
    """Silent, and stopped by ``cancel`` (rule 5): at the next phase, or in the compiler."""

    def __init__(self, cancel):
        super().__init__(None)
        self.cancel_event = cancel

    def phase(self, name: str, total: int = None):
        if self.cancel_event is not None and self.cancel_event.is_set():
            raise Cancelled(f"the check was cancelled before '{name}'")
        return super().phase(name, total)


def _reference(ws, moved: bool = False) -> dict:
    """The reference on the checks' inputs, or (``moved``) on them one ulp apart."""
    key = "_check_moved_reference" if moved else "_check_reference"
    cached = ws.__dict__.get(key)
    if cached is None:
        from workbench.runtime.reference import run_reference
        from workbench.runtime.verify import one_ulp_apart
        feeds = ws.reference_feeds(ws.random_inputs())
        cached, _ = run_reference(ws.model.reference_model,
                                  one_ulp_apart(feeds) if moved else feeds)
        ws.__dict__[key] = cached
    return cached


def _serial(ws):
    """One check at a time per session (rule 3: they share a build folder)."""
    return ws.__dict__.setdefault("_check_lock", threading.Lock())


def _describe(step, position) -> str:
    entry = step.entry or {}
    where = f"step {position}" if position is not None else "a step no longer in the history"
    return f"{where}: {entry.get('transformation')} ({entry.get('description', '')})"
