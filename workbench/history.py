"""A session's history: every step taken (undone ones too) and where the session stands.

Owned by ``Session`` (``ws.timeline``); written and read back by
``workbench.persist``; the recipe runner and the step checks use it through
the methods here. It knows nothing of sessions, folders or builds.

Rules:
1. Step 0 is the import; each applied transformation adds one. A step keeps
   the SDFG's JSON (deepcopy would renew memlet GUIDs; a JSON round trip is
   exact), so going back restores the very same SDFG.
2. A step's weights are replaced, never mutated: consecutive steps share
   one dict until a step changes the weights.
3. A step is found by identity, never by equality: two steps can hold the
   same entry and SDFG.
"""
from dataclasses import dataclass

from workbench.errors import BadInputError


@dataclass(eq=False)
class Step:
    entry: dict       # what was applied (None for the import)
    sdfg_json: str    # the SDFG after the step
    weights: dict     # the weights after the step (replaced, never mutated)
    saved: bool = False  # written to the session folder
    signature: str = None  # this user's signature of sdfg_json (see workbench.provenance)


class History:
    def __init__(self, imported: Step):
        self._steps = [imported]
        self._position = 0

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

    def drop_after(self, position: int) -> None:
        """Forget the steps after ``position`` (the current one must not be among them)."""
        if position < self._position:
            raise ValueError(f"step {self._position} is current; move before dropping it")
        del self._steps[position + 1:]

    def move(self, position: int) -> Step:
        """Make step ``position`` the current one and return it."""
        if not 0 <= position < len(self._steps):
            raise BadInputError(f"step {position} does not exist (0..{len(self._steps) - 1})")
        self._position = position
        return self._steps[position]

    def restore(self, steps: list) -> None:
        """Append ``steps`` read from a session folder after the fresh import (step 0);
        a step read without weights has those of the step before it (rule 2)."""
        for step in steps:
            if step.weights is None:
                step.weights = self._steps[-1].weights
            self._steps.append(step)
        self._steps[0].saved = True

    def mark_unsaved(self) -> None:
        """Every step is to be written again (a new session folder)."""
        for step in self._steps:
            step.saved = False
