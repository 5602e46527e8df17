"""What a session writes: recipes, scripts, exported programs, session folders.

A mixin of ``Session``: every method reads the session's history, model and
build; none changes them (``open_folder`` makes a new session from a folder).
"""
from workbench.session.runs import holding_lock


class SessionFiles:
    def recipe_steps(self) -> list:
        """The applied steps as recipe steps (see workbench.recipe)."""
        from workbench.transformation_api import Match
        return [Match.from_json(entry).to_json() for entry in self.history]

    def input_shapes(self) -> dict:
        """What opens this model again as this session did (``workbench.open``'s
        ``input_shapes``): each input's shape, or a symbolic program's size of each
        symbol, as ``set_sizes`` left it (its other dims are fixed in the model it keeps)."""
        if self.model.symbols:
            return {n: [v] for n, v in self.model.symbols.items()}
        return {i.onnx_name: list(i.shape) for i in self.inputs}

    def save_recipe(self, path) -> None:
        """Write the applied steps as a recipe JSON that ``optimize`` replays."""
        from workbench.recipe import save_recipe
        save_recipe(path, f"{self.name}-steps", self.recipe_steps())

    def save_script(self, path) -> None:
        """Write the applied steps as a Python script using the public API: it opens the
        model and replays the steps exactly (``Session.replay``); run on another model it
        stops before changing anything (exit 2)."""
        from workbench.session.folder import atomic_write
        from workbench.session.recipe_run import model_fingerprint
        from workbench.transformation_api import Match
        shapes = self.input_shapes()
        lines = [f'"""Replays {len(self.history)} workbench step(s) on {self.name}.',
                 "", "    python script.py [MODEL]    replay on MODEL (default: the one below), "
                 "then verify", "", "Exit 2 when a step names what the model does not have, "
                 '1 when the result does not match onnxruntime."""',
                 "import sys", "", "import workbench", "from workbench.transformation_api import Match",
                 "", f"MODEL = {self.source or self.name!r}", f"INPUT_SHAPES = {shapes!r}",
                 f"SYMBOLIC = {list(self.model.symbols)!r}  # sizes kept symbols",
                 f"FINGERPRINT = {model_fingerprint(self)!r}  # the model the steps were "
                 f"recorded on", "STEPS = ["]
        for match in map(Match.from_json, self.history):
            lines.append(f"    Match({match.transformation!r}, {match.where!r}, "
                         f"{match.description!r}, {match.options!r}, {match.expr_index!r}),")
        lines += ["]", "", "", "def replay(model=MODEL):",
                  '    """Open ``model`` and apply STEPS; the first step that fails raises."""',
                  "    ws = workbench.open(model, input_shapes=INPUT_SHAPES if model == MODEL "
                  "else None,", "                        symbolic=SYMBOLIC)",
                  "    ws.replay(STEPS, fingerprint=FINGERPRINT)",
                  "    return ws", "", "",
                  'if __name__ == "__main__":',
                  "    from workbench.cli.script import run_script",
                  "    sys.exit(run_script(replay, sys.argv[1:]))", ""]
        atomic_write(path, "\n".join(lines).encode())

    def export(self, folder, target: str = "cpu") -> dict:
        """Write a standalone program (see workbench.export); CPU exports are checked
        against onnxruntime in a fresh process before this returns."""
        from workbench.export import export_session
        return export_session(self, folder, target)

    @holding_lock
    def save(self, folder) -> None:
        """Save to a session folder and keep autosaving there after every step."""
        from pathlib import Path
        if self.folder is None or Path(folder).resolve() != Path(self.folder).resolve():
            self.timeline.mark_unsaved()   # "saved" meant: in the previous folder
        self.folder = folder
        self._write_folder()

    def autosave(self):
        """Write what changed to the session folder, when the session has one."""
        if self.folder is not None:
            self._write_folder()

    def _write_folder(self):
        from workbench.session.folder import due_checkpoints, save_history
        due = due_checkpoints(self.timeline, self.checkpoint_every)
        for position in due:
            if self.timeline[position].lazy:   # a new folder: replayed to be written
                self._replay(position)
        save_history(self.folder, self.timeline, self.model.reference_model, self.name,
                     self.input_shapes(), due, self.checkpoint_every, list(self.model.symbols))

    @classmethod
    def open_folder(cls, folder, progress=None, trust: bool = False, autosave: bool = True):
        """Reopen a session folder (see workbench.session.folder) at its current step.

        ``trust`` accepts SDFGs this workbench did not write and, with
        ``autosave``, signs them so the folder is not asked about again. Without
        ``autosave`` the session does not write into the folder.
        """
        from pathlib import Path
        from workbench.importer import import_model
        from workbench.session.folder import read_session
        from workbench.session.stepping import ReplayError
        from workbench.progress import SILENT
        saved = read_session(folder, trust)
        imported = import_model(saved.model_path, input_shapes=saved.input_shapes,
                                name=saved.model_name, progress=progress or SILENT,
                                symbolic=saved.symbolic)
        ws = cls(imported, progress or SILENT)   # no folder yet: nothing autosaves here
        ws.timeline.restore(saved.steps)
        ws.checkpoint_every = saved.checkpoint_every or ws.checkpoint_every
        note = saved.note
        try:
            ws.goto(min(saved.position, len(ws.timeline) - 1))
        except ReplayError as e:   # the history ends before the step that did not replay
            ws.timeline.move(0)
            ws.timeline.drop_after(e.position - 1)
            ws.goto(min(saved.position, e.position - 1))
            note = f"{e} The session was restored up to step {e.position - 1}."
        ws.recovery_note = note
        if autosave:
            ws.folder = Path(folder)
            if note or saved.unsigned:  # the folder as restored (and trusted)
                ws._write_folder()
        return ws
