"""A session's history: every step taken (undone ones too) and where the session stands.

Owned by ``Session`` (``ws.timeline``); written and read back by
``workbench.session.folder``; the recipe runner and the step checks use it through
the methods here. It knows nothing of sessions, folders or builds.

Rules:
1. Step 0 is the import; each applied transformation adds one. A step keeps
   the SDFG it produced, exactly, in one of two ways:
   - spliced (``shape`` set): the step was applied in place to the part of
     the graph it touches (``workbench.session.working_graph``); it shares
     its *host* SDFG object with the steps before and after it and keeps the
     ``Shape`` (node, edge and array lists) that makes the host hold it.
     Going to it installs that Shape: a pass over the lists, whatever the
     distance;
   - whole (``shape`` None): its own SDFG object, made by applying to a copy
     of the whole graph, kept while it is among the last ``LIVE`` steps
     visited, and its JSON once it is not (deepcopy would renew memlet GUIDs;
     a JSON round trip is exact). A whole step whose object later hosts
     spliced steps gets its Shape before the first splice.
   - replayed (``lazy``): a step read back from a session folder that saved
     only its entry (``workbench.session.folder``: a journal with
     checkpoints). It holds nothing until the session replays it from the
     nearest earlier step that holds its SDFG (``Session.goto``), and then
     it is spliced or whole like any other.
2. What a step holds is never changed after the step is recorded: a splice
   puts new objects in the live graph and changes none it replaces; whole
   steps apply to a copy; builds, analyses and predictions work on copies.
   (Changing ``ws.sdfg`` in place is not a step and is not recorded.) So a
   step's JSON can be written late, when the session folder asks for it, and
   still be exact.
3. A step's weights are replaced, never mutated: consecutive steps share
   one dict until a step changes the weights.
4. A step is found by identity, never by equality: two steps can hold the
   same entry and SDFG.
"""
import json
import re

from workbench.errors import BadInputError
from workbench.session import shapes

# SDFG objects kept (the steps visited last): undo, redo and a nearby goto cost nothing.
# A full-size ViT-tiny SDFG is tens of MB; older steps keep their JSON only.
LIVE = 8


def canonical_json(sdfg, guids: bool = False) -> str:
    """The one serialization of an SDFG: its JSON with sorted keys. With ``guids`` it is
    what history steps keep and undo restores; without, memlet GUIDs (random per copy)
    are blanked, for comparing a replayed SDFG with the original."""
    text = json.dumps(sdfg.to_json(), sort_keys=True)
    return text if guids else re.sub(r'"guid": "[^"]*"', '"guid": ""', text)


class Step:
    """One step: what was applied, the SDFG after it, the weights after it."""

    def __init__(self, entry, sdfg_json: str = None, weights: dict = None, saved: bool = False,
                 signature: str = None, sdfg=None, movement=None, shape=None, lazy: bool = False):
        if sdfg_json is None and sdfg is None and not lazy:
            raise ValueError("a step needs its SDFG or its JSON, or to be replayed (lazy)")
        self.entry = entry          # what was applied (None for the import)
        self._json = sdfg_json
        self.weights = weights      # the weights after the step (replaced, never mutated)
        self.saved = saved          # its SDFG is a checkpoint in the session folder
        self.weights_saved = saved  # its weights are in the folder (when they changed)
        # applied to a whole copy, or read from a checkpoint: a checkpoint whatever its
        # number (replaying one costs a whole-graph copy, validation and analysis;
        # writing it, its JSON, which a read one holds already)
        self.whole = shape is None and not lazy
        self.signature = signature  # this user's signature of sdfg_json (workbench.session.signing)
        self.sdfg = sdfg            # the SDFG object or host (rule 1), None once dropped
        self.movement = movement    # its data movement, when known
        self.shape = shape          # what makes the host hold this step (rule 1)

    @property
    def lazy(self) -> bool:
        """Read from a journal and not replayed yet (rule 1): it holds no SDFG."""
        return self.sdfg is None and self._json is None

    def fill(self, sdfg, shape, movement) -> None:
        """The replay of a lazy step produced ``sdfg`` (a host when ``shape`` is set)."""
        if not self.lazy:
            raise ValueError("only a lazy step is filled by its replay")
        self.sdfg, self.shape, self.movement = sdfg, shape, movement
        self.whole = shape is None

    @property
    def sdfg_json(self) -> str:
        """The SDFG after the step as canonical JSON (written on first use, rule 2)."""
        if self.lazy:
            raise ValueError("a lazy step has no SDFG until the session replays it "
                             "(Session.goto or Session.sdfg_at)")
        if self._json is None and self.sdfg is not None:
            # the step's own objects, not a copy (history rule 2: they never change)
            self._json = json.dumps(shapes.serialized(self.sdfg, self.shape),
                                    sort_keys=True)
        return self._json

    def forget_json(self) -> None:
        """Drop the JSON text of a step that holds its SDFG (written to a checkpoint: a
        full-size network's is tens of MB, and the SDFG gives it again)."""
        if self.sdfg is not None:
            self._json = None

    def holds_now(self) -> bool:
        """Whether ``sdfg`` shows this step as it is now (its host may hold another)."""
        return self.sdfg is not None and (
            self.shape is None or shapes.installed(self.sdfg) is self.shape)

    def readable(self):
        """An SDFG showing this step, only to be read at once: the object itself when it
        holds the step now, else an independent copy (a host holding another step)."""
        if self.holds_now():
            return self.sdfg
        if self.sdfg is None:
            import dace
            return dace.SDFG.from_json(json.loads(self._json))
        return shapes.copy_of(self.sdfg, self.shape)

    def drop_object(self) -> None:
        """Keep only the JSON (written now if it was not yet); a spliced step keeps its
        host and Shape (a few lists), which other steps share."""
        if self.sdfg is not None and self.shape is None:
            self.sdfg_json  # noqa: B018 (written before the object goes)
            self.sdfg, self.movement = None, None


class History:
    def __init__(self, imported: Step):
        self._steps = [imported]
        self._position = 0
        self._live = []   # steps holding their SDFG object, least recently visited first
        self.hold(imported)

    def hold(self, step: Step) -> None:
        """``step`` was just visited: keep its SDFG object, dropping the oldest beyond LIVE."""
        if step.sdfg is None:
            return
        if step in self._live:
            self._live.remove(step)
        self._live.append(step)
        while len(self._live) > LIVE:
            self._live.pop(0).drop_object()

    @property
    def position(self) -> int:
        """Index of the current step (0: as imported)."""
        return self._position

    @property
    def steps(self) -> tuple:
        """Every step, the import first, undone ones included."""
        return tuple(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def __getitem__(self, i: int) -> Step:
        return self._steps[i]

    @property
    def current(self) -> Step:
        return self._steps[self._position]

    @property
    def imported(self) -> Step:
        return self._steps[0]

    def applied(self) -> list:
        """Entries of the steps up to the current one, oldest first."""
        return [step.entry for step in self._steps[1:self._position + 1]]

    def entries(self) -> list:
        """Entries of every step after the import, undone ones included."""
        return [step.entry for step in self._steps[1:]]

    def index(self, step: Step):
        """Position of ``step`` (rule 3); None when it was dropped."""
        return next((i for i, s in enumerate(self._steps) if s is step), None)

    def __contains__(self, step) -> bool:
        return self.index(step) is not None

    def push(self, step: Step) -> None:
        """A new step after the current one; what could be redone is dropped."""
        self.drop_after(self._position)
        self._steps.append(step)
        self._position = len(self._steps) - 1
        self.hold(step)

    def drop_after(self, position: int) -> None:
        """Forget the steps after ``position`` (the current one must not be among them)."""
        if position < self._position:
            raise ValueError(f"step {self._position} is current; move before dropping it")
        dropped = self._steps[position + 1:]
        del self._steps[position + 1:]
        self._live = [s for s in self._live if all(s is not d for d in dropped)]

    def move(self, position: int) -> Step:
        """Make step ``position`` the current one and return it."""
        if not 0 <= position < len(self._steps):
            raise BadInputError(f"step {position} does not exist (0..{len(self._steps) - 1})")
        self._position = position
        self.hold(self._steps[position])
        return self._steps[position]

    def restore(self, steps: list) -> None:
        """Append ``steps`` read from a session folder after the fresh import (step 0);
        a step read without weights has those of the step before it (rule 2)."""
        for step in steps:
            if step.weights is None:
                step.weights = self._steps[-1].weights
            self._steps.append(step)
        self._steps[0].saved = self._steps[0].weights_saved = True

    def mark_unsaved(self) -> None:
        """Every step is to be written again (a new session folder)."""
        for step in self._steps:
            step.saved = step.weights_saved = False
