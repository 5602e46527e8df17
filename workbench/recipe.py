"""Recipes: ordered transformation steps, as JSON.

A step is ``{"transformation": NAME, "where": [[role, identity], ...]}`` (one
match, as a session records it) or ``{"transformation": NAME, "all": true}``
(every match, repeatedly, until none is left: how the shipped, model-
independent recipes are written). Optional ``"level"`` filters nothing; it
is for people reading the file. A recipe name is looked up in the folders
registered with ``workbench.transformation_api.register_recipes`` (the bundled
library's ``transforms/recipes/``, a plug-in's own).
"""
import json
from pathlib import Path

from workbench.errors import BadInputError


def load_recipe(recipe) -> dict:
    """A recipe from a name, a path, or an already-loaded dict/list."""
    if isinstance(recipe, dict):
        return _checked(recipe, "recipe")
    if isinstance(recipe, list):
        return _checked({"name": "steps", "steps": recipe}, "recipe")
    from workbench.transformation_api import recipe_dirs
    text = str(recipe)
    path = Path(text)
    if not path.suffix:
        for folder in recipe_dirs():
            if (Path(folder) / f"{text}.json").is_file():
                path = Path(folder) / f"{text}.json"
                break
        else:
            raise BadInputError(f"unknown recipe '{text}'; shipped recipes are "
                                f"{', '.join(recipe_names()) or 'none'}, or give a .json file.")
    if not path.is_file():
        raise BadInputError(f"recipe file '{path}' does not exist.")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInputError(f"recipe file '{path}' is not valid JSON: {e}") from None
    data.setdefault("name", path.stem)
    return _checked(data, str(path))


def recipe_names() -> list:
    from workbench.transformation_api import recipe_dirs
    return sorted({p.stem for folder in recipe_dirs() for p in Path(folder).glob("*.json")})


def _checked(data, where) -> dict:
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "transformation" in s
                                              for s in steps):
        raise BadInputError(f"{where}: a recipe is {{\"steps\": [{{\"transformation\": NAME, "
                            f"\"where\": [...] | \"all\": true}}, ...]}}.")
    return data


def save_recipe(path, name: str, steps: list) -> None:
    import os
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"name": name, "steps": steps}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
