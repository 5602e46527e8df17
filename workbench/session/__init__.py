"""A Session owns one model's SDFG and everything built from it."""
import copy
import json
import threading
import time
import uuid

import dace

from workbench import analysis
from workbench.errors import CheckFailed, TransformationError
from workbench.session.history import History, Step
from workbench.progress import SILENT
from workbench.session.builds import SessionBuilds
from workbench.session.files import SessionFiles
from workbench.session.runs import SessionRuns, holding_lock


class Session(SessionBuilds, SessionRuns, SessionFiles):
    """One imported model: ``.sdfg``, ``build``, ``run``, ``verify``, ``summary``;
    transformations with history; compiled programs are kept by ``SessionBuilds``,
    running them is ``SessionRuns``, files it writes come from ``SessionFiles``."""

    def __init__(self, imported, progress=SILENT, build_slot: str = None):
        """``build_slot`` names the build folder; sessions used one after another
        in a process (the ONNX backend's cases) share one to skip CMake configure."""
        self.model = imported
        self.sdfg = imported.sdfg
        self.progress = progress
        self.id = uuid.uuid4().hex[:8]
        self.build_slot = build_slot or self.id
        # every step taken and the current one (workbench.session.history)
        self.timeline = History(Step(None, weights=self.model.weights, sdfg=self.sdfg))
        self._operator_names = {}
        self._movement = None   # (the SDFG, its data movement): see data_movement
        self._found_in = None   # (the SDFG, the weights, {transformation: matches}): _found
        # FLOPs are the model's, whatever the schedule: counted once, at import.
        imported = analysis.onnx_nodes(imported.sdfg)
        self._imported_ops = {n.onnx_name: n.op_type for n, _ in imported}
        self._imported_flops = {n.onnx_name: analysis.node_flops(n, st) for n, st in imported}
        self._init_builds()
        self.profiles = []  # every profile taken, with its history position
        self.folder = None  # a session folder to autosave into (see workbench.session.folder)
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
        from workbench import transformation_api as transform
        from workbench.nodeid import selection
        wanted = selection(self.sdfg, nodes) if nodes is not None else None
        matches = []
        for t in transform.all_transformations(level):
            if names is not None and t.name not in names:
                continue
            try:
                found = self._found(t)
            except Exception:  # a broken plug-in must not hide the others
                continue
            for m in found:
                if wanted is None or wanted & set(m.nodes):
                    matches.append(self._predict(m) if predict else m)
        return matches

    def _found(self, t) -> list:
        """``t``'s matches in the current SDFG, found once per step: a step's SDFG and
        weights are never changed in place (workbench.session.history, rule 2), so a selection's
        list is the whole graph's, filtered."""
        from workbench import transformation_api as transform
        cache = self._this_step()
        if t not in cache:
            cache[t] = transform.find_matches(t, self.sdfg, self.model.weights)
        return cache[t]

    def _this_step(self) -> dict:
        """What was found or predicted on the current SDFG and weights."""
        if self._found_in is None or self._found_in[0] is not self.sdfg \
                or self._found_in[1] is not self.model.weights:
            self._found_in = (self.sdfg, self.model.weights, {})
        return self._found_in[2]

    # Verify every step after it is applied, in the background: the result lands in
    # the step's history entry as "verified" (see workbench.session.step_checks). While a check
    # generates code it holds ``lock``, which apply, run, verify and profile take too.
    verify_steps = False
    step_checks = None   # schedules a check: f(session, step); None: one background thread

    @holding_lock
    def apply(self, match, verify: bool = False):
        """Apply one match; on any failure the SDFG stays exactly as it was.

        ``verify`` builds and verifies the new step before returning and records
        ``entry["verified"] = {"match", "max_abs_err", "output"}`` (with "error" when
        its program did not build or crashed); see also ``verify_steps``."""
        from workbench import transformation_api as transform
        t = transform.get(match.transformation)
        before = self.data_movement().moved_bytes
        trial = copy.deepcopy(self.sdfg)
        # A transformation that changes weights works on a copy of the dict.
        weights = dict(self.model.weights) if t.needs_weights else self.model.weights
        try:
            transform.apply_match(t, trial, match, weights, original=self.sdfg)
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
        self.timeline.push(Step(entry, weights=self.model.weights, sdfg=trial, movement=moved))
        self._autosave()
        if verify:
            self._record_verification(self.timeline.current)
        elif self.verify_steps:
            if self.step_checks is None:
                from workbench.session.step_checks import BackgroundChecks
                self.step_checks = BackgroundChecks()
            self.step_checks(self, self.timeline.current)
        return entry

    def check_step(self, position: int = None) -> dict:
        """Build and verify the program of step ``position`` (default: the current one)
        and record the result in its history entry; returns the record."""
        from workbench.session import step_checks
        position = self.timeline.position if position is None else position
        if position == self.timeline.position:
            return self._record_verification(self.timeline[position])
        return step_checks.check_now(self, self.timeline[position], self.lock)

    def wait_checks(self, timeout: float = None) -> None:
        """Wait for the background checks of ``verify_steps`` to finish."""
        if self.step_checks is not None and hasattr(self.step_checks, "wait"):
            self.step_checks.wait(timeout)

    @holding_lock
    def _record_verification(self, step) -> dict:
        """Verify the current program (its build stays cached) as ``step``'s record."""
        from workbench.session import step_checks
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
        if target.sdfg is None:   # dropped from the live steps (workbench.session.history, rule 1)
            target.sdfg = dace.SDFG.from_json(json.loads(target.sdfg_json))
            self.timeline.hold(target)
        self.sdfg = target.sdfg
        if target.movement is not None:
            self._movement = (target.sdfg, target.movement)
        self.model.weights = target.weights
        self._autosave()
        return True

    def optimize(self, recipe):
        """Apply a recipe (name, path or steps). Returns the history entries added (a
        list) with ``.skipped``: steps that no longer applied, each with its reason
        (see workbench.session.recipe_run)."""
        from workbench.session.recipe_run import run_recipe
        return run_recipe(self, recipe)

    def replay(self, matches, fingerprint: str = None) -> list:
        """Apply recorded steps exactly (as ``save_script`` scripts do); the first that
        fails raises, naming its step, and the session returns to where it was."""
        from workbench.session.recipe_run import replay
        return replay(self, matches, fingerprint)

    def predict(self, match):
        """``match`` with ``delta_bytes`` filled: the change in bytes moved if applied
        (measured on a copy; unchanged match when it cannot be applied)."""
        return self._predict(match)

    def _predict(self, match):
        """Measured once per step and match (kept beside the step's matches, see _found):
        on the match's region when it can stand for the whole graph
        (``workbench.analysis.prediction``), else on a copy of the whole SDFG."""
        from dataclasses import replace
        known = self._this_step()
        key = _prediction_key(match)
        if key not in known:
            try:
                delta = self._predict_local(match)
            except Exception:   # the whole graph decides whether it applies
                delta = None
            try:
                known[key] = delta if delta is not None else self._predict_whole(match)
            except Exception:
                known[key] = None
        return match if known[key] is None else replace(match, delta_bytes=known[key])

    def remember_prediction(self, match, delta) -> None:
        """Keep ``delta`` as ``match``'s prediction at the current step: measured by a
        copy of this session in another process (``workbench.session.replica``)."""
        self._this_step()[_prediction_key(match)] = delta

    def _predict_local(self, match):
        from workbench import transformation_api as transform
        from workbench.analysis.prediction import StateIndex, local_delta
        if self.sdfg.number_of_nodes() != 1:
            return None
        known = self._this_step()
        if "state index" not in known:   # and the names, walked once per step, not per match
            known["state index"] = StateIndex(self.sdfg, self.sdfg.nodes()[0])
            known["operator names"] = dict(self.operator_names())
        return local_delta(self.sdfg, known["state index"], transform.get(match.transformation),
                           match, self.model.weights, known["operator names"],
                           transform.apply_match)

    def _predict_whole(self, match) -> int:
        """After - before on a copy of the whole SDFG (the reference the local figure
        must equal); raises when the match does not apply."""
        from workbench import transformation_api as transform
        from workbench.analysis.movement import data_movement
        trial = transform.apply_to_copy(self.sdfg, match, self.model.weights)
        after = data_movement(trial, self.operator_names(), scratch=True).moved_bytes
        return after - self.data_movement().moved_bytes

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


def _prediction_key(match) -> tuple:
    return ("predicted", match.transformation, match.where, match.options, match.expr_index)
