"""Taking a step and moving through the history: ``apply``, ``undo``, ``redo``, ``goto``.

A mixin of ``Session``. A step that stays inside its region is spliced into
the live SDFG (``workbench.session.working_graph``): its region is copied,
changed, validated and measured, and the whole graph is not copied, validated
or measured again (the new data-movement figure is the old one plus the
region's change). Any other step (several states, a match naming a state or
a node inside a nested SDFG, a result that reaches outside its region, a
global-level transformation, whose choice rests on whole-program facts such
as every array's lifetime, which a region's cut edges do not show) is
applied to a copy of the whole graph, validated and measured whole, as
before. Either way a step that fails leaves the session exactly as it was.

``Session.full_checks`` (on when the environment sets WORKBENCH_FULL_CHECKS=1)
validates the whole SDFG after every step and compares the incremental
figure with a full analysis; a difference raises ``IncrementalCheckError``.
Inside ``Session.batch()`` (recipes and replays) steps are not autosaved or
verified in the background one by one, and spliced steps are validated on
their region only: the recipe runner validates and measures the whole
program once at the end.
"""
import contextlib
import copy
import json
import os
import time

import dace

from workbench.analysis.sizes import at_sizes
from workbench.errors import TransformationError, WorkbenchError
from workbench.session import shapes, working_graph
from workbench.session.history import Step
from workbench.session.runs import holding_lock


class ReplayError(WorkbenchError):
    """A step read from a session folder's journal did not replay to what it recorded."""

    def __init__(self, position: int, why: str):
        super().__init__(f"step {position} of the saved session could not be replayed: {why}")
        self.position = position


class IncrementalCheckError(WorkbenchError):
    """A step's incrementally kept figure or validity differs from the whole graph's
    (a bug in the working graph, found by ``full_checks``)."""


class SessionSteps:
    full_checks = os.environ.get("WORKBENCH_FULL_CHECKS", "") not in ("", "0")
    _batch = False

    @holding_lock
    def apply(self, match, verify: bool = False):
        """Apply one match; on any failure the SDFG stays exactly as it was.

        ``verify`` builds and verifies the new step before returning and records
        ``entry["verified"] = {"match", "max_abs_err", "output"}`` (with "error" when
        its program did not build or crashed); see also ``verify_steps``."""
        t, before, (sdfg, shape, weights, moved, index) = self._result_of(match)
        entry = {"transformation": match.transformation, "level": t.level, **match.to_json(),
                 "bytes_before": before.moved_bytes, "bytes_after": moved.moved_bytes,
                 "time": time.time()}
        if self.model.symbols:   # the sizes those bytes were taken at (a replay's check)
            entry["sizes"] = dict(self.model.symbols)
        step = Step(entry, weights=weights, sdfg=sdfg, movement=moved, shape=shape)
        self.timeline.push(step)
        self._enter(step, index)
        if self.full_checks:
            self.check_whole()
        if self._batch:
            return entry
        self.autosave()
        if verify:
            self._record_verification(self.timeline.current)
        else:
            self.after_step()
        return entry

    def _result_of(self, match):
        """(transformation, figure before, (sdfg, shape, weights, figure, index)) of
        ``match`` applied to the current step; the history is not changed, and on any
        failure neither is the SDFG."""
        from workbench import transformation_api as transform
        t = transform.get(match.transformation)
        before = self.data_movement()
        try:
            return t, before, self._apply_spliced(t, match, before) or self._apply_whole(t, match)
        except TransformationError:
            raise
        except Exception as e:
            text = str(e).strip()
            raise TransformationError(
                f"{match.transformation} failed on {match.description or match.nodes}: "
                f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"
                f". The session is unchanged.") from e

    def _enter(self, step, index=None) -> None:
        """Make the live SDFG, weights and figure those of ``step`` (the current one);
        ``index``: its region index, when the step derived it."""
        if step.shape is not None:
            shapes.install(step.sdfg, step.shape)
        self.sdfg, self.model.weights = step.sdfg, step.weights
        if step.movement is not None:
            self._movement = (self._figure_key(), step.movement)
        if index is not None:   # the next step's region index, derived from this one's
            self._this_step()["state index"] = index

    def _replay(self, position: int) -> None:
        """Give lazy step ``position`` (read from a journal) its SDFG: from the nearest
        earlier step that holds one, apply the recorded entries (history rule 1). Every
        replayed step must move the bytes it recorded, at the sizes it recorded them at
        (a symbolic program's, ``set_sizes``); the session ends where it was."""
        from workbench.transformation_api import Match
        start = position
        while self.timeline[start].lazy:
            start -= 1
        back, sizes = self.position, self.model.symbols
        switched = False   # some step recorded its bytes at other sizes than the session's
        try:
            with self.batch():
                first = self.timeline.move(start)
                self._hold_object(first)
                self._enter(first)
                for k in range(start + 1, position + 1):
                    step = self.timeline[k]
                    switched = self._replay_at(step.entry, sizes) or switched
                    try:
                        with at_sizes(self.model.symbols):
                            _, _, (sdfg, shape, _, moved, index) = self._result_of(
                                Match.from_json(step.entry))
                    except WorkbenchError as e:
                        raise ReplayError(k, str(e)) from e
                    if moved.moved_bytes != step.entry.get("bytes_after", moved.moved_bytes):
                        raise ReplayError(k, f"it moves {moved.moved_bytes} bytes, where "
                                             f"{step.entry['bytes_after']} were recorded")
                    step.fill(sdfg, shape, moved)   # the weights read back stay the step's
                    self.timeline.move(k)
                    self._enter(step, index)
        except ReplayError:
            self._sizes_back(sizes, self.timeline.steps[start:position + 1] if switched else ())
            self._go_back(back)
            raise
        finally:
            self._sizes_back(sizes, self.timeline.steps[start:position + 1] if switched else ())
        self._go_back(back)

    def _replay_at(self, entry, sizes: dict) -> bool:
        """Take the figures at the sizes ``entry`` recorded (None: at ``sizes``, the
        session's own); True when they changed."""
        want = {**sizes, **((entry or {}).get("sizes") or {})}
        if want == self.model.symbols:
            return False
        self.model.symbols = sizes if want == sizes else want   # a new object: _figure_key
        return True

    def _sizes_back(self, sizes: dict, replayed) -> None:
        """The figures at ``sizes`` again; the ``replayed`` steps forget theirs (taken at
        the sizes their entries recorded)."""
        self._replay_at(None, sizes)
        for step in replayed:
            step.movement = None

    def _go_back(self, position: int) -> None:
        if not self.timeline[position].lazy and position != self.position:
            target = self.timeline.move(position)
            self._hold_object(target)
            self._enter(target)

    def _hold_object(self, step) -> None:
        if step.sdfg is None:   # dropped from the live steps (history rule 1)
            step.sdfg = dace.SDFG.from_json(json.loads(step.sdfg_json))
            self.timeline.hold(step)

    def attach(self, progress=None, lock=None, verify_steps: bool = None,
               step_checks=None) -> None:
        """Hand the session to a front end (the window): its progress reporter, the lock
        its workers share with the session, whether every step is verified in the
        background, and what schedules those checks (``f(session, step)``)."""
        if progress is not None:
            self.progress = progress
        if lock is not None:
            self.lock = lock
        if verify_steps is not None:
            self.verify_steps = verify_steps
        if step_checks is not None:
            self.step_checks = step_checks

    def after_step(self) -> None:
        """Schedule the background check of the current step (``verify_steps``)."""
        if self.verify_steps:
            if self.step_checks is None:
                from workbench.session.step_checks import BackgroundChecks
                self.step_checks = BackgroundChecks()
            self.step_checks(self, self.timeline.current)

    def _apply_spliced(self, t, match, before):
        """(sdfg, shape, weights, figure) of ``match`` spliced into the live SDFG, or None
        when it cannot be (nothing changed then)."""
        from workbench.analysis.movement import compulsory_bytes, with_region_change
        current = self.timeline.current
        if current.sdfg is not self.sdfg or not working_graph.splice_able(self.sdfg) \
                or (t.level == "global" and not t.region_rewrite):
            return None   # decided from whole-program facts and rewriting beyond a region
        index = self._state_index()
        if current.shape is None:   # a whole step's object becomes a host (history rule 1)
            current.shape = shapes.capture(self.sdfg)
        spliced = working_graph.splice(self.sdfg, index, t, match,
                                       self.model.weights if t.needs_weights else None,
                                       self.operator_names())
        if spliced is None:
            return None
        weights = self.model.weights if spliced.weights is None else spliced.weights
        moved = with_region_change(before, spliced.region_before, spliced.region_after,
                                   compulsory_bytes(self.sdfg))
        return self.sdfg, spliced.after, weights, moved, spliced.index

    def _apply_whole(self, t, match):
        from workbench import transformation_api as transform
        trial = copy.deepcopy(self.sdfg)
        # A transformation that changes weights works on a copy of the dict.
        weights = dict(self.model.weights) if t.needs_weights else self.model.weights
        transform.apply_match(t, trial, match, weights, original=self.sdfg)
        # validated here even in a batch: a recipe skips a step that breaks the program
        # and goes on; the whole copy costs more than the validation anyway
        trial.validate()
        return trial, None, weights, self.data_movement(trial), None

    def check_whole(self) -> None:
        """Validate the whole SDFG and compare the kept figure with a full analysis
        (what ``full_checks`` runs after every step)."""
        from workbench.analysis.movement import data_movement, same_figure
        try:
            self.sdfg.validate()
        except Exception as e:
            raise IncrementalCheckError(
                f"step {self.position} ({self._step_text()}) left an SDFG that does not "
                f"validate: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e
        if "state index" in self._this_step():
            from workbench.analysis.state_index import StateIndex
            differs = self._this_step()["state index"].same_as(
                StateIndex(self.sdfg, self.sdfg.nodes()[0]))
            if differs:
                raise IncrementalCheckError(
                    f"step {self.position} ({self._step_text()}): the kept region index "
                    f"differs from a fresh one in {', '.join(differs)}")
        kept = self.data_movement()
        full = data_movement(self.sdfg, self.operator_names())
        if not same_figure(kept, full):
            raise IncrementalCheckError(
                f"step {self.position} ({self._step_text()}): the kept data-movement figure "
                f"({kept.moved_bytes} B) differs from a full analysis ({full.moved_bytes} B)")

    @contextlib.contextmanager
    def batch(self):
        """Steps inside are recorded without autosave, background checks or whole
        validation; the caller validates and measures once after (recipe runs)."""
        if self._batch:
            yield
            return
        self._batch = True
        try:
            yield
        finally:
            self._batch = False

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

    @holding_lock
    def goto(self, step: int) -> bool:
        """Restore the SDFG (and weights) exactly as they were after ``step``."""
        if 0 <= step < len(self.timeline) and self.timeline[step].lazy:
            self._replay(step)
        target = self.timeline.move(step)
        self._hold_object(target)
        self._enter(target)
        if not self._batch:
            self.autosave()
        return True

    def sdfg_at(self, position: int):
        """The SDFG of step ``position``, to be read only: the live one for the current
        step, an independent copy for another held by the live host."""
        step = self.timeline[position]
        if position == self.position and step.sdfg is self.sdfg:
            return self.sdfg
        if step.lazy:
            self._replay(position)
        return step.readable()

    def _figure_key(self) -> tuple:
        """What a figure or a match list of the live SDFG is valid for: the object and
        the Shape installed on it (a host holds one step at a time), the weights and the
        sizes a symbolic program's figures are taken at (``set_sizes`` replaces the dict)."""
        return self.sdfg, shapes.installed(self.sdfg), self.model.weights, self.model.symbols

    def _take_figures_at(self, sizes: dict) -> None:
        """Every figure from now on at ``sizes``: those kept for the live SDFG
        (``_figure_key``) and for each step (``Step.movement``) were taken at others."""
        self.model.symbols = dict(sizes)
        for step in self.timeline.steps:
            step.movement = None

    def _state_index(self):
        """The region index of the live SDFG's one state, built once per step."""
        from workbench.analysis.prediction import StateIndex
        known = self._this_step()
        if "state index" not in known:
            known["state index"] = StateIndex(self.sdfg, self.sdfg.nodes()[0])
        if "operator names" not in known:   # walked once per step, not per match
            known["operator names"] = dict(self.operator_names())
        return known["state index"]
