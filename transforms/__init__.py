"""The bundled transformation library, one sub-package per level.

Loaded through the ``dace_workbench.transformations`` entry point (see
pyproject.toml), as users' plug-ins are: importing this package registers
every transformation with ``workbench.transformation_api`` and the shipped recipes
(``recipes/``).
"""
from pathlib import Path

from transforms import fusion, global_, layout, local  # noqa: F401 (registration)
from transforms.global_ import buffer_order
from workbench.transformation_api import register_check, register_recipes

register_recipes(Path(__file__).with_name("recipes"))
register_check(buffer_order.conflicts)
