"""The bundled transformation library, one sub-package per level.

Importing this package registers every transformation with
``workbench.transform`` and adds the shipped recipes (``recipes/``).
"""
from pathlib import Path

from transforms import fusion, global_, layout, local  # noqa: F401 (registration)
from workbench.recipe import RECIPE_DIRS

_RECIPES = str(Path(__file__).with_name("recipes"))
if _RECIPES not in RECIPE_DIRS:
    RECIPE_DIRS.append(_RECIPES)
