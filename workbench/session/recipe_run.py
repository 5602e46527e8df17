"""Applying recipes and replaying recorded steps on a Session.

Two ways to run a list of steps, for two purposes:

1. ``run_recipe`` (``ws.optimize``) is forgiving: a recipe is written to
   serve many models, so a step whose match no longer applies, or whose apply
   raises, is skipped and reported (which transformation, which nodes, why)
   and the rest goes on. Each applied step went through ``ws.apply``, so the
   session after the recipe is as valid as after any step.
2. ``replay`` (``ws.replay``, the scripts ``save_script`` writes) is exact:
   the steps were recorded on this very model, so the first one that fails
   stops the replay and the session goes back to where it was.

Both apply their steps in one pass (``ws.batch()``): each step is recorded
in the history (undoable one by one), but nothing is autosaved, checked in
the background or validated whole per step; the whole SDFG is validated and
measured once at the end (``_finish``). Should that validation fail, the
first failing step is found by going through the steps (a goto installs a
step's Shape, no replay) and the session ends before it, the step reported.

Both refuse, before changing anything, what cannot be the user's intent:
a transformation name that does not exist, and a step naming a node or
array that the model never had (a recipe or script recorded on another
model). Those are ``BadInputError`` (CLI exit 2) and leave the session
unchanged.
"""
import hashlib
from dataclasses import asdict, dataclass

from workbench.errors import BadInputError, TransformationError

# An "all" step applies matches until none is left; this bounds a transformation whose
# apply keeps creating new matches.
ALL_LIMIT = 1000


@dataclass
class SkippedStep:
    step: int               # 1-based position of the recipe step
    transformation: str
    where: str              # the nodes (or the match's description)
    reason: str

    def text(self) -> str:
        return f"skipped step {self.step} ({self.transformation} on {self.where}): {self.reason}"

    def to_json(self) -> dict:
        return asdict(self)


class RecipeResult(list):
    """The history entries a recipe added (a list, as before), with ``skipped``: the
    steps or matches that did not apply, in order."""

    def __init__(self, applied=(), skipped=()):
        super().__init__(applied)
        self.skipped = list(skipped)

    @property
    def applied(self) -> list:
        return list(self)

    def text(self) -> str:
        lines = [f"{len(self)} step(s) applied, {len(self.skipped)} skipped"]
        return "\n".join(lines + [s.text() for s in self.skipped])


def run_recipe(ws, recipe) -> RecipeResult:
    from workbench.recipe import load_recipe
    from workbench.transformation_api import Match
    data = load_recipe(recipe)
    steps = data["steps"]
    _check_names(steps, f"recipe '{data.get('name', 'steps')}'")
    start = ws.position
    result = RecipeResult()
    with ws.batch():
        for number, step in enumerate(steps, 1):
            name = step["transformation"]
            if step.get("all"):
                _apply_all(ws, number, name, step.get("limit", ALL_LIMIT), result)
                continue
            match = Match.from_json(step)
            try:
                result.append(ws.apply(match))
            except TransformationError as e:
                if not result.skipped and not _model_has(ws, match):
                    _rewind(ws, start)
                    raise BadInputError(
                        f"recipe '{data.get('name', 'steps')}' step {number} ({name}) names "
                        f"{', '.join(_missing(ws, match))}, which model '{ws.name}' does not "
                        f"have: the recipe was recorded on another model. The session is "
                        f"unchanged.") from None
                result.skipped.append(SkippedStep(number, name, _where(match), _reason(e)))
    bad = _finish(ws, start)
    if bad is not None:
        position, entry, reason = bad
        kept = position - 1 - start
        result.skipped.append(SkippedStep(0, entry["transformation"], _where(
            Match.from_json(entry)), f"the program after it does not validate ({reason}); the "
            f"session ends before it ({len(result) - kept - 1} later step(s) dropped)"))
        del result[kept:]
    return result


def replay(ws, matches, fingerprint: str = None) -> list:
    """Apply recorded ``matches`` exactly; the first failure raises, naming its step,
    and leaves the session as it was before the replay."""
    from workbench.transformation_api import Match
    matches = [m if isinstance(m, Match) else Match.from_json(m) for m in matches]
    _check_names([{"transformation": m.transformation} for m in matches], "replay")
    if fingerprint is not None and fingerprint != model_fingerprint(ws):
        missing = sorted({n for m in matches for n in _missing(ws, m)})
        raise BadInputError(
            f"these steps were recorded on another model (fingerprint {fingerprint}; "
            f"'{ws.name}' has {model_fingerprint(ws)})"
            + (f": it lacks {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")
               if missing else "")
            + ". Open the model the steps were recorded on. The session is unchanged.")
    start = ws.position
    added = []
    with ws.batch():
        for number, match in enumerate(matches, 1):
            try:
                added.append(ws.apply(match))
            except TransformationError as e:
                missing = _missing(ws, match)  # before rewinding: earlier steps make new nodes
                _rewind(ws, start)
                error = BadInputError if missing else TransformationError
                why = (f"names {', '.join(missing)}, which '{ws.name}' does not have"
                       if missing else _reason(e))
                raise error(f"replay step {number} ({match.transformation} on "
                            f"{_where(match)}): {why}. The session is back where it was "
                            f"before the replay.") from None
    bad = _finish(ws, start)
    if bad is not None:
        position, entry, reason = bad
        _rewind(ws, start)
        raise TransformationError(
            f"replay step {position - start} ({entry['transformation']})"
            f" leaves a program that does not validate: {reason}. The session is back where "
            f"it was before the replay.")
    return added


def _finish(ws, start: int):
    """After a batch of steps from ``start``: validate and measure the whole program
    once, save and check the last step. Returns None, or (the position and entry
    of the first step whose program does not validate, why) with the session moved
    to the step before it and the later steps dropped."""
    import logging
    from workbench.analysis.movement import data_movement, same_figure
    from workbench.analysis.sizes import at_sizes
    if ws.position == start:
        return None
    why = _invalid(ws.sdfg)
    if why is not None:
        end = ws.position
        first = next(p for p in range(start + 1, end + 1)
                     if ws.goto(p) and _invalid(ws.sdfg) is not None)
        why, entry = _invalid(ws.sdfg), ws.timeline[first].entry
        ws.goto(first - 1)
        ws.timeline.drop_after(first - 1)
        ws.autosave()
        return first, entry, why
    kept = ws.data_movement()
    with at_sizes(ws.model.symbols):
        full = data_movement(ws.sdfg, ws.operator_names())
    if not same_figure(kept, full):   # a bug in the working graph: the full figure wins
        logging.getLogger(__name__).warning(
            "the kept data-movement figure (%d B) differs from a full analysis (%d B) after "
            "step %d; using the full one", kept.moved_bytes, full.moved_bytes, ws.position)
        ws.timeline.current.movement = full
        ws._movement = (ws._figure_key(), full)
    ws.autosave()
    ws.after_step()
    return None


def _invalid(sdfg):
    """Why ``sdfg`` does not validate (None when it does)."""
    try:
        sdfg.validate()
    except Exception as e:  # noqa: BLE001 (any failure of validation is the finding)
        text = str(e).strip()
        return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"
    return None


def model_fingerprint(ws) -> str:
    """What a recorded step list depends on: the imported model's operators (names and
    types) and its inputs' shapes, not its weights."""
    text = repr((sorted(ws._imported_ops.items()),
                 [(i.onnx_name, list(i.shape)) for i in ws.inputs]))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _apply_all(ws, number, name, limit, result) -> None:
    """Apply ``name``'s matches until none is left, finding them once per pass, not
    once per step: the matches of one find are applied in order, and a whole find runs
    again only after the pass (it catches what the pass's steps created or made stale).

    Applying a match found before other steps changed the graph is safe: a
    transformation's ``apply`` decides again on the graph as it is and refuses a match
    that no longer applies (the ``Transformation.apply`` contract; recorded recipes rely
    on it too). Such a refusal after a step of the same pass is not reported: the match
    may only be stale, and if it is still found, the next pass tries it fresh. A
    refusal of a fresh match (no step since the find) is reported and never retried."""
    from workbench import transformation_api as transform
    t = transform.get(name)
    failed = set()
    applied = 0
    while applied < limit:
        try:
            found = [m for m in transform.find_matches(t, ws.sdfg, ws.model.weights)
                     if _key(m) not in failed]
        except Exception as e:  # noqa: BLE001 (a broken find skips its step, not the recipe)
            result.skipped.append(SkippedStep(number, name, "the whole model",
                                              f"finding matches failed: {_reason(e)}"))
            return
        if not found:
            return
        fresh = True   # nothing applied since the find
        for match in found:
            if applied >= limit:
                return
            try:
                result.append(ws.apply(match))
            except TransformationError as e:
                if fresh:
                    failed.add(_key(match))
                    result.skipped.append(SkippedStep(number, name, _where(match), _reason(e)))
                continue
            applied += 1
            fresh = False


def _check_names(steps, what) -> None:
    from workbench import transformation_api as transform
    transform.load_plugins()
    known = {t.name for t in transform.all_transformations()}
    for number, step in enumerate(steps, 1):
        if step["transformation"] not in known:
            raise BadInputError(f"{what} step {number} names transformation "
                                f"'{step['transformation']}', which does not exist; known: "
                                f"{', '.join(sorted(known))}. Nothing was applied.")


def _model_has(ws, match) -> bool:
    return not _missing(ws, match)


def _missing(ws, match) -> list:
    """The ONNX operators and arrays ``match`` names that neither the imported model nor
    the current SDFG has (nodes later steps create are in the SDFG once they exist)."""
    from workbench.analysis import onnx_nodes
    ops = set(ws._imported_ops) | {n.onnx_name for n, _ in onnx_nodes(ws.sdfg)}
    arrays = _imported_arrays(ws) | {name for sd in ws.sdfg.all_sdfgs_recursive()
                                     for name in sd.arrays}
    missing = []
    for _, ident in match.where:
        last = ident.split(">")[-1]
        parts = last.split(":", 2)
        if len(parts) < 3:
            continue
        kind, name = parts[1], parts[2].rpartition("#")[0]
        if (kind == "op" and name not in ops) or (kind == "data" and name not in arrays):
            missing.append(f"{'operator' if kind == 'op' else 'array'} '{name}'")
    return missing


def _imported_arrays(ws) -> set:
    import json
    return set(json.loads(ws.timeline.imported.sdfg_json)["attributes"].get("_arrays", {}))


def _rewind(ws, position: int) -> None:
    """Drop the steps added since ``position`` (they were never asked for on their own)."""
    if ws.position != position:
        ws.goto(position)
    ws.timeline.drop_after(position)
    ws.autosave()


def _key(match):
    return (match.where, match.options, match.expr_index)


def _where(match) -> str:
    if match.description:
        return match.description
    return ", ".join(ident.split(">")[-1] for _, ident in match.where) or "the whole model"


def _reason(e: BaseException) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    return first.replace(" The session is unchanged.", "")[:300]
