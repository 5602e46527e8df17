"""A Session owns one model's SDFG and everything built from it."""
import logging
import threading
import uuid

from workbench import analysis
from workbench.analysis.sizes import at_sizes
from workbench.importer.symbolic import shape_json
from workbench.errors import BadInputError, CheckFailed, TransformationError
from workbench.session.history import History, Step
from workbench.progress import SILENT
from workbench.session.builds import SessionBuilds
from workbench.session.files import SessionFiles
from workbench.session.runs import SessionRuns, holding_lock
from workbench.session.stepping import SessionSteps

log = logging.getLogger(__name__)


class Session(SessionSteps, SessionBuilds, SessionRuns, SessionFiles):
    """One imported model: ``.sdfg``, ``build``, ``run``, ``verify``, ``summary``;
    transformations with history (taking steps and moving through them is
    ``SessionSteps``); compiled programs are kept by ``SessionBuilds``, running
    them is ``SessionRuns``, files it writes come from ``SessionFiles``."""

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
        self._movement = None   # (_figure_key(), its data movement): see data_movement
        self._found_in = None   # (_figure_key(), {transformation: matches}): _found
        # FLOPs are the model's, whatever the schedule: counted at import (and again
        # when a symbolic program's figures are taken at other sizes: ``set_sizes``).
        self._imported_ops = {n.onnx_name: n.op_type
                              for n, _ in analysis.onnx_nodes(imported.sdfg)}
        self._imported_flops = self._flops_of(imported.sdfg)
        self._init_builds()
        self.profiles = []  # every profile taken, with its history position
        self.folder = None  # a session folder to autosave into (see workbench.session.folder)
        from workbench.session.folder import checkpoint_every   # fixed for the session
        self.checkpoint_every = checkpoint_every(self.sdfg)
        self.source = None  # what workbench.open was given (a bundled name or a path)
        self.recovery_note = ""
        self.lock = threading.RLock()   # held while a call works on the SDFG (verify_steps)

    def training(self, loss: str = "output", labels=None, params=None, optimizer: str = None,
                 lr: float = 0.01, **options):
        """A training session over this model (as imported): its SDFG holds the forward
        pass, the ``loss`` ("mse", "cross_entropy" or "output"), the backward pass and
        the ``optimizer``'s update ("sgd", "adamw"; None: the gradients are outputs).
        ``params``: names, a name pattern, or None for every float initializer a
        gradient reaches. ``labels``: the name of the labels input (mse and cross
        entropy; default "labels"). See ``workbench.session.training``."""
        from workbench.session.training import open_training
        if self.model.symbols:
            raise BadInputError(f"a training program is built at one size; open the model "
                                f"with {', '.join(self.model.symbols)} fixed (--shape "
                                f"NAME=SIZE, without --symbolic) to train it.")
        return open_training(self, loss=loss, labels=labels, params=params,
                             optimizer=optimizer, lr=lr, progress=self.progress, **options)

    def _flops_of(self, imported_sdfg) -> dict:
        """FLOPs per ONNX operator of the imported SDFG, a symbolic program's at the sizes
        its figures are taken at (``symbols``)."""
        with at_sizes(self.model.symbols):
            return {n.onnx_name: analysis.node_flops(n, st)
                    for n, st in analysis.onnx_nodes(imported_sdfg)}

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

        The figure of the session's own SDFG is kept per step (a spliced step's is
        the step before's plus its region's change, ``workbench.session.stepping``),
        so an apply, and a prediction per listed match, analyse only what changed."""
        from workbench.analysis.movement import data_movement
        if sdfg is not None and sdfg is not self.sdfg:
            with at_sizes(self.model.symbols):
                return data_movement(sdfg, self.operator_names())
        key = self._figure_key()
        if self._movement is None or any(a is not b for a, b in zip(self._movement[0], key)):
            with at_sizes(self.model.symbols):
                moved = data_movement(self.sdfg, self.operator_names())
            self._movement = (key, moved)
            if self.timeline.current.holds_now() and self.timeline.current.sdfg is self.sdfg:
                self.timeline.current.movement = moved
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
            except Exception as e:  # a broken plug-in must not hide the others
                log.warning("%s: finding matches failed, left out of the list: %s: %s",
                            t.name, type(e).__name__, e)
                continue
            for m in found:
                if wanted is None or wanted & set(m.nodes):
                    matches.append(self.predict(m) if predict else m)
        return matches

    def _found(self, t) -> list:
        """``t``'s matches in the current SDFG, found once per step: what a step holds
        is never changed (workbench.session.history, rule 2), so a selection's list is
        the whole graph's, filtered."""
        from workbench import transformation_api as transform
        cache = self._this_step()
        if t not in cache:
            cache[t] = transform.find_matches(t, self.sdfg, self.model.weights)
        return cache[t]

    def _this_step(self) -> dict:
        """What was found or predicted on the current SDFG, weights and sizes."""
        key = self._figure_key()
        if self._found_in is None or any(a is not b for a, b in zip(self._found_in[0], key)):
            self._found_in = (key, {})
        return self._found_in[1]

    # Verify every step after it is applied, in the background: the result lands in
    # the step's history entry as "verified" (see workbench.session.step_checks). While a check
    # generates code it holds ``lock``, which apply, run, verify and profile take too.
    verify_steps = False
    step_checks = None   # schedules a check: f(session, step); None: one background thread

    def check_step(self, position: int = None) -> dict:
        """Build and verify the program of step ``position`` (default: the current one)
        and record the result in its history entry; returns the record."""
        from workbench.session import step_checks
        position = self.timeline.position if position is None else position
        if self.timeline[position].lazy:
            with self.lock:
                self._replay(position)
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
        with at_sizes(self.model.symbols):
            return self._predict(match)

    def _predict(self, match):
        """Measured once per step and match (kept beside the step's matches, see _found):
        on the match's region when it can stand for the whole graph
        (``workbench.analysis.prediction``), else on a copy of the whole SDFG."""
        from dataclasses import replace
        known = self._this_step()
        key = _prediction_key(match)
        if key not in known and _same_bytes(match):
            known[key] = self._same_bytes_checked(match) if self.full_checks else 0
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

    def _same_bytes_checked(self, match):
        """A ``same_bytes`` transformation's prediction measured (full checks)."""
        try:
            delta = self._predict_whole(match)
        except Exception:
            return None
        if delta != 0:
            raise AssertionError(f"{match.transformation} declares the bytes moved unchanged; "
                                 f"on {match.description} they change by {delta}")
        return delta

    def remember_prediction(self, match, delta) -> None:
        """Keep ``delta`` as ``match``'s prediction at the current step: measured by a
        copy of this session in another process (``workbench.session.replica``)."""
        self._this_step()[_prediction_key(match)] = delta

    def _predict_local(self, match):
        from workbench import transformation_api as transform
        from workbench.analysis.prediction import local_delta
        if self.sdfg.number_of_nodes() != 1:
            return None
        index = self._state_index()
        known = self._this_step()
        return local_delta(self.sdfg, index, transform.get(match.transformation),
                           match, self.model.weights, known["operator names"],
                           transform.apply_match, check=self.full_checks)

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

    def memory(self, sdfg=None):
        """Resident, allocated and peak-live bytes of the current step
        (``workbench.analysis.memory``)."""
        from workbench.analysis.memory import memory_figure
        with at_sizes(self.model.symbols):
            return memory_figure(sdfg if sdfg is not None else self.sdfg)

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
            "inputs": [{"name": i.onnx_name, "shape": shape_json(i.shape), "dtype": i.dtype}
                       for i in self.inputs],
            "outputs": [{"name": o.onnx_name, "shape": shape_json(o.shape), "dtype": o.dtype}
                        for o in self.outputs],
            "import": dict(self.model.stats),
            # a symbolic program's figures are taken at these sizes
            **({"symbols": dict(self.model.symbols)} if self.model.symbols else {}),
            "data_movement": self.data_movement().to_dict(),
            "memory": self.memory().to_dict(),
            "classes": self.class_table(),
        }


def _same_bytes(match) -> bool:
    """Whether ``match``'s transformation declares the bytes moved unchanged (False for
    one no longer registered: its prediction then fails where it is measured)."""
    from workbench import transformation_api as transform
    try:
        return transform.get(match.transformation).same_bytes
    except TransformationError:
        return False


def _prediction_key(match) -> tuple:
    return ("predicted", match.transformation, match.where, match.options, match.expr_index)
