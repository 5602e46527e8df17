"""A Session owns one model's SDFG and everything built from it."""
import copy
import functools
import json
import threading
import time
import uuid

import dace
import numpy as np

from workbench import analysis
from workbench.errors import BadInputError, CheckFailed, TransformationError
from workbench.history import History, Step
from workbench.progress import SILENT
from workbench.reference import random_inputs, run_reference
from workbench.session_builds import SessionBuilds, to_json
from workbench.session_files import SessionFiles
from workbench.verify import DEFAULT_ATOL, DEFAULT_RTOL, compare_all


def _holding_lock(method):
    """Run ``method`` holding the session's lock (see ``Session.verify_steps``)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return locked


class Session(SessionBuilds, SessionFiles):
    """One imported model: ``.sdfg``, ``build``, ``run``, ``verify``, ``summary``;
    transformations with history; compiled programs are kept by ``SessionBuilds``,
    files it writes come from ``SessionFiles``."""

    def __init__(self, imported, progress=SILENT, build_slot: str = None):
        """``build_slot`` names the build folder; sessions used one after another
        in a process (the ONNX backend's cases) share one to skip CMake configure."""
        self.model = imported
        self.sdfg = imported.sdfg
        self.progress = progress
        self.id = uuid.uuid4().hex[:8]
        self.build_slot = build_slot or self.id
        # every step taken and the current one (workbench.history)
        self.timeline = History(Step(None, to_json(self.sdfg), self.model.weights))
        self._operator_names = {}
        self._movement = None   # (the SDFG, its data movement): see data_movement
        # FLOPs are the model's, whatever the schedule: counted once, at import.
        imported = analysis.onnx_nodes(imported.sdfg)
        self._imported_ops = {n.onnx_name: n.op_type for n, _ in imported}
        self._imported_flops = {n.onnx_name: analysis.node_flops(n, st) for n, st in imported}
        self._init_builds()
        self.profiles = []  # every profile taken, with its history position
        self.folder = None  # a session folder to autosave into (see workbench.persist)
        self.source = None  # what workbench.open was given (a bundled name or a path)
        self.recovery_note = ""
        self.lock = threading.RLock()   # held while a call works on the SDFG (verify_steps)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def inputs(self):
        return self.model.inputs

    @property
    def outputs(self):
        return self.model.outputs

    # -- building and running ------------------------------------------------
    @_holding_lock
    def run(self, inputs: dict, target: str = "cpu", arch: str = None) -> dict:
        """Run the built program; ``inputs`` and the result are keyed by ONNX names.

        ``target="gpu"`` compiles the CUDA program for ``arch`` (default: the
        device's) and runs it; without a CUDA device that is a NoCudaDeviceError."""
        build = self._runnable_build(target, arch)
        args, results = self._call_args(build, inputs)
        self._call(build, args)
        return {info.onnx_name: results[info.onnx_name].reshape(info.shape)
                for info in self.outputs}

    # Programs run in a worker process (workbench.isolated): a crash or a hang in
    # generated code is a ProgramCrashed, and the session lives on. False runs them in
    # this process (only to compare timings with the isolated run).
    isolated = True
    run_timeout = None   # seconds one call may take (None: isolated.DEFAULT_TIMEOUT_S)

    def _call(self, build, args: dict, repeat: int = 1, warmup: int = 0) -> list:
        """Call ``build``'s program ``warmup + repeat`` times on ``_call_args``' ``args``
        (outputs are filled in place); milliseconds of the ``repeat`` timed calls."""
        from workbench.profile import time_calls
        if not self.isolated:
            return time_calls(lambda: build.compiled(**args), repeat, warmup)
        from workbench import isolated
        return isolated.call(build, args, [o.sdfg_name for o in self.outputs],
                             constant=self.model.weights.keys(), repeat=repeat, warmup=warmup,
                             timeout=self.run_timeout,
                             cancel=getattr(self.progress, "cancel_event", None),
                             step=self._step_text())

    def _step_text(self, position: int = None) -> str:
        """The step at ``position`` (default: the current one) in words; "" for the import."""
        position = self.timeline.position if position is None else position
        entry = self.timeline[position].entry
        return (f"step {position}: {entry['transformation']} "
                f"({entry.get('description') or entry.get('where')})" if entry else "")

    def _call_args(self, build, inputs: dict, weights: dict = None):
        """Keyword arguments for ``build.compiled`` and the output arrays in them
        (``weights``: another step's, default the current ones)."""
        args = dict(self.model.weights if weights is None else weights)
        args.update({name: value.reshape(build.sdfg.arrays[name].shape)   # as ``build`` stores it
                     for name, value in self._input_arrays(inputs).items()})
        results = {}
        for info in self.outputs:
            results[info.onnx_name] = np.zeros(build.sdfg.arrays[info.sdfg_name].shape,
                                               dtype=info.dtype)
            args[info.sdfg_name] = results[info.onnx_name]
        return args, results

    @_holding_lock
    def profile(self, repeat: int = 20, warmup: int = 3, reference: bool = True,
                threads: int = None, inputs: dict = None):
        """Median runtimes of the current program, per ONNX operator too.

        Uses ``threads`` (default 2, or $WORKBENCH_THREADS) for OpenMP, BLAS
        and the onnxruntime reference alike. The result is also appended to
        ``profiles`` with the current history position.
        """
        from workbench import profile as prof
        threads = threads or prof.DEFAULT_THREADS
        prof.set_threads(threads)
        inputs = self.random_inputs() if inputs is None else inputs
        self._build_both()
        build = self.build()
        args, _ = self._call_args(build, inputs)
        with self.progress.phase(f"time {repeat} runs"):
            samples = self._call(build, args, repeat, warmup)
        timed = self._instrumented_build()
        timed.sdfg.clear_instrumentation_reports()
        args, _ = self._call_args(timed, inputs)
        with self.progress.phase("per-operator timers"):
            self._call(timed, args, repeat=max(3, min(repeat, 10)))  # a report per call
            per_op, per_kernel = prof.kernel_times(timed, self.operator_names())
        ref = None
        if reference:
            with self.progress.phase("time onnxruntime"):
                ref = prof.median(prof.reference_times(self.model.reference_model,
                                                       self._reference_feeds(inputs), repeat,
                                                       warmup, threads))
        result = prof.Profile(self.position, prof.median(samples), min(samples), max(samples),
                              samples, per_op, per_kernel, ref, threads, repeat, warmup)
        self.profiles.append(result)
        return result

    def random_inputs(self, seed: int = 0) -> dict:
        return random_inputs(self.inputs, seed)

    @_holding_lock
    def verify(self, inputs: dict = None, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
               expect: dict = None, target: str = "cpu", arch: str = None):
        """Run the program (built for ``target``; see ``run``) and onnxruntime (or
        ``expect``) on the same inputs; compare."""
        inputs = self.random_inputs() if inputs is None else inputs
        timings = {}
        build = self._runnable_build(target, arch)
        with self.progress.phase("run workbench program"):
            t = time.perf_counter()
            outputs = self.run(inputs, target, arch)
            timings["run_s"] = time.perf_counter() - t
        if expect is None:
            with self.progress.phase("run reference"):
                reference, ref_name = run_reference(self.model.reference_model,
                                                    self._reference_feeds(inputs))
        else:
            reference, ref_name = dict(expect), "expected outputs"
            unknown = sorted(set(reference) - {o.onnx_name for o in self.outputs})
            if unknown:
                raise BadInputError(f"expected outputs name {', '.join(unknown)}, which the model "
                                    f"does not produce; outputs are "
                                    f"{', '.join(o.onnx_name for o in self.outputs)}.")
        report = compare_all(self.name, outputs, reference, rtol, atol, ref_name)
        report.timings = {"build_s": build.seconds, **timings,
                          **{f"{k}_s": v for k, v in build.timings.items()}}
        return report

    # -- transformations -----------------------------------------------------
    def data_movement(self, sdfg=None):
        """Bytes moved, compulsory bytes and their ratio, per ONNX operator too.

        The figure of the session's own SDFG is kept until the SDFG is replaced
        (every step and every goto replaces it; nothing here changes it in place),
        so an apply, and a prediction per listed match, analyse only the new graph."""
        from workbench.analysis.movement import data_movement
        if sdfg is not None and sdfg is not self.sdfg:
            return data_movement(sdfg, self.operator_names())
        if self._movement is None or self._movement[0] is not self.sdfg:
            self._movement = (self.sdfg, data_movement(self.sdfg, self.operator_names()))
        return self._movement[1]

    def operator_names(self) -> dict:
        """SDFG node name -> ONNX operator name, for every operator seen so far
        (expanded operators keep their name as a label prefix)."""
        from workbench.analysis import onnx_nodes
        for node, _ in onnx_nodes(self.sdfg):
            self._operator_names.setdefault(node.name, node.onnx_name)
        return self._operator_names

    def transformations(self, level: str = None, nodes=None, predict: bool = True,
                        names=None) -> list:
        """Matches of the library in the current SDFG.

        ``nodes`` (identities, ONNX node names or SDFG nodes: a selection)
        keeps matches touching any of them; ``names`` keeps only those
        transformations. With ``predict``, each match's ``delta_bytes`` is
        the change in bytes moved, measured by applying it to a copy.
        """
        from workbench import transform
        from workbench.nodeid import selection
        wanted = selection(self.sdfg, nodes) if nodes is not None else None
        matches = []
        for t in transform.all_transformations(level):
            if names is not None and t.name not in names:
                continue
            try:
                found = transform.find_matches(t, self.sdfg, self.model.weights)
            except Exception:  # a broken plug-in must not hide the others
                continue
            for m in found:
                if wanted is None or wanted & set(m.nodes):
                    matches.append(self._predict(m) if predict else m)
        return matches

    # Verify every step after it is applied, in the background: the result lands in
    # the step's history entry as "verified" (see workbench.step_checks). While a check
    # generates code it holds ``lock``, which apply, run, verify and profile take too.
    verify_steps = False
    step_checks = None   # schedules a check: f(session, step); None: one background thread

    @_holding_lock
    def apply(self, match, verify: bool = False):
        """Apply one match; on any failure the SDFG stays exactly as it was.

        ``verify`` builds and verifies the new step before returning and records
        ``entry["verified"] = {"match", "max_abs_err", "output"}`` (with "error" when
        its program did not build or crashed); see also ``verify_steps``."""
        from workbench import transform
        t = transform.get(match.transformation)
        before = self.data_movement().moved_bytes
        trial = copy.deepcopy(self.sdfg)
        # A transformation that changes weights works on a copy of the dict.
        weights = dict(self.model.weights) if t.needs_weights else self.model.weights
        try:
            transform.apply_match(t, trial, match, weights)
            trial.validate()
            moved = self.data_movement(trial)  # measured before anything changes
            after = moved.moved_bytes
        except TransformationError:
            raise
        except Exception as e:
            raise TransformationError(
                f"{match.transformation} failed on {match.description or match.nodes}: "
                f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
                f". The session is unchanged.") from e
        self.sdfg = trial
        self._movement = (trial, moved)
        self.model.weights = weights
        entry = {"transformation": match.transformation, "level": t.level, **match.to_json(),
                 "bytes_before": before, "bytes_after": after, "time": time.time()}
        self.timeline.push(Step(entry, to_json(trial), self.model.weights))  # drops the redo tail
        self._autosave()
        if verify:
            self._record_verification(self.timeline.current)
        elif self.verify_steps:
            if self.step_checks is None:
                from workbench.step_checks import BackgroundChecks
                self.step_checks = BackgroundChecks()
            self.step_checks(self, self.timeline.current)
        return entry

    def check_step(self, position: int = None) -> dict:
        """Build and verify the program of step ``position`` (default: the current one)
        and record the result in its history entry; returns the record."""
        from workbench import step_checks
        position = self.timeline.position if position is None else position
        if position == self.timeline.position:
            return self._record_verification(self.timeline[position])
        return step_checks.check_now(self, self.timeline[position], self.lock)

    def wait_checks(self, timeout: float = None) -> None:
        """Wait for the background checks of ``verify_steps`` to finish."""
        if self.step_checks is not None and hasattr(self.step_checks, "wait"):
            self.step_checks.wait(timeout)

    @_holding_lock
    def _record_verification(self, step) -> dict:
        """Verify the current program (its build stays cached) as ``step``'s record."""
        from workbench import step_checks
        try:
            verified = step_checks.verified_from(self.verify())
        except CheckFailed as e:   # a failed build or a crash is what the check found
            verified = step_checks.failed(e)
        step_checks.record(self, step, verified)
        return verified

    # -- history -------------------------------------------------------------
    @property
    def history(self) -> list:
        """The applied steps, oldest first (undone steps are not included)."""
        return self.timeline.applied()

    @property
    def position(self) -> int:
        """Index of the current step (0: as imported)."""
        return self.timeline.position

    @property
    def steps(self) -> list:
        """Every step entry including undone ones that ``redo`` can bring back."""
        return self.timeline.entries()

    def undo(self) -> bool:
        """Go back one step; False when already at the import."""
        return self.position > 0 and self.goto(self.position - 1)

    def redo(self) -> bool:
        return self.position < len(self.timeline) - 1 and self.goto(self.position + 1)

    def goto(self, step: int) -> bool:
        """Restore the SDFG (and weights) exactly as they were after ``step``."""
        target = self.timeline.move(step)
        self.sdfg = dace.SDFG.from_json(json.loads(target.sdfg_json))
        self.model.weights = target.weights
        self._autosave()
        return True

    def optimize(self, recipe):
        """Apply a recipe (name, path or steps). Returns the history entries added (a
        list) with ``.skipped``: steps that no longer applied, each with its reason
        (see workbench.recipe_run)."""
        from workbench.recipe_run import run_recipe
        return run_recipe(self, recipe)

    def replay(self, matches, fingerprint: str = None) -> list:
        """Apply recorded steps exactly (as ``save_script`` scripts do); the first that
        fails raises, naming its step, and the session returns to where it was."""
        from workbench.recipe_run import replay
        return replay(self, matches, fingerprint)

    def predict(self, match):
        """``match`` with ``delta_bytes`` filled: the change in bytes moved if applied
        (measured on a copy; unchanged match when it cannot be applied)."""
        return self._predict(match)

    def _predict(self, match):
        from dataclasses import replace
        from workbench import transform
        from workbench.analysis.movement import data_movement
        try:
            trial = transform.apply_to_copy(self.sdfg, match, self.model.weights)
            after = data_movement(trial, self.operator_names(), scratch=True).moved_bytes
        except Exception:
            return match
        return replace(match, delta_bytes=after - self.data_movement().moved_bytes)

    # -- describing ----------------------------------------------------------
    def class_table(self, runtime: dict = None) -> list:
        """FLOP, byte and (given a profile) runtime shares per operator class."""
        from workbench.analysis.classes import class_table
        ops = dict(self._imported_ops)
        for node, _ in analysis.onnx_nodes(self.sdfg):  # fused nodes made by transformations
            ops.setdefault(node.onnx_name, node.op_type)
        return class_table(ops, self._imported_flops, self.data_movement().per_operator, runtime)

    def summary(self) -> dict:
        weights = self.model.weights
        return {
            "model": self.name,
            "ops": analysis.op_histogram(self.sdfg),
            "nodes": len(analysis.onnx_nodes(self.sdfg)),
            "tensors": len(self.sdfg.arrays),
            "parameters": int(sum(w.size for w in weights.values())),
            "parameter_bytes": int(sum(w.nbytes for w in weights.values())),
            "flops": int(sum(self._imported_flops.values())),
            "inputs": [{"name": i.onnx_name, "shape": list(i.shape), "dtype": i.dtype}
                       for i in self.inputs],
            "outputs": [{"name": o.onnx_name, "shape": list(o.shape), "dtype": o.dtype}
                        for o in self.outputs],
            "import": dict(self.model.stats),
            "data_movement": self.data_movement().to_dict(),
            "classes": self.class_table(),
        }

    # -- internals -----------------------------------------------------------
    def _input_arrays(self, inputs: dict) -> dict:
        known = {i.onnx_name: i for i in self.inputs}
        unknown = sorted(set(inputs) - set(known))
        missing = sorted(set(known) - set(inputs))
        if unknown or missing:
            raise BadInputError(
                "inputs do not match the model: " +
                (f"missing {', '.join(missing)}" if missing else "") +
                ("; " if missing and unknown else "") +
                (f"unknown {', '.join(unknown)}" if unknown else "") +
                f". The model's inputs are {', '.join(known)}.")
        out = {}
        for name, info in known.items():
            value = np.asarray(inputs[name])
            if tuple(value.shape) != tuple(info.shape):
                raise BadInputError(f"input '{name}' has shape {value.shape}; the model was "
                                    f"imported with shape {tuple(info.shape)}.")
            stored = self.sdfg.arrays[info.sdfg_name].shape
            out[info.sdfg_name] = np.ascontiguousarray(value.astype(info.dtype, copy=False)
                                                       ).reshape(stored)
        return out

    def _reference_feeds(self, inputs: dict) -> dict:
        return {i.onnx_name: np.asarray(inputs[i.onnx_name]).astype(i.dtype, copy=False)
                for i in self.inputs}
