"""What a session writes: recipes, scripts, exported programs, session folders.

A mixin of ``Session``: every method reads the session's history, model and
build; none changes them.
"""


class SessionFiles:
    def recipe_steps(self) -> list:
        """The applied steps as recipe steps (see workbench.recipe)."""
        keys = ("transformation", "where", "options", "expr_index", "description")
        return [{k: entry[k] for k in keys if k in entry} for entry in self.history]

    def save_recipe(self, path) -> None:
        """Write the applied steps as a recipe JSON that ``optimize`` replays."""
        from workbench.recipe import save_recipe
        save_recipe(path, f"{self.name}-steps", self.recipe_steps())

    def save_script(self, path) -> None:
        """Write the applied steps as a Python script using the public API."""
        from workbench.persist import atomic_write
        lines = [f'"""Replays {len(self.history)} workbench step(s) on {self.name}."""',
                 "import workbench", "from workbench.transform import Match", "",
                 f"ws = workbench.open({self.source or self.name!r}, "
                 f"input_shapes={ {i.onnx_name: list(i.shape) for i in self.inputs}!r})"]
        for step in self.recipe_steps():
            where = tuple(tuple(w) for w in step["where"])
            options = tuple(tuple(o) for o in step.get("options", ()))
            lines.append(f"ws.apply(Match({step['transformation']!r}, {where!r}, "
                         f"{step.get('description', '')!r}, {options!r}, "
                         f"{step.get('expr_index', 0)!r}))")
        lines += ["", 'if __name__ == "__main__":', "    print(ws.verify().text())", ""]
        atomic_write(path, "\n".join(lines).encode())

    def export(self, folder, target: str = "cpu") -> dict:
        """Write a standalone program (see workbench.export); CPU exports are checked
        against onnxruntime in a fresh process before this returns."""
        from workbench.export import export_session
        return export_session(self, folder, target)

    def save(self, folder) -> None:
        """Save to a session folder and keep autosaving there after every step."""
        from pathlib import Path
        from workbench.persist import save_session
        if self.folder is None or Path(folder).resolve() != Path(self.folder).resolve():
            for step in self._steps:   # "saved" meant: in the previous folder
                step.saved = False
        self.folder = folder
        save_session(self, folder)

    def _autosave(self):
        if self.folder is not None:
            from workbench.persist import save_session
            save_session(self, self.folder)
