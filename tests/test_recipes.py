"""The shipped recipes verify on every bundled model and cut data movement."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench import transformation_api as transform
from workbench.recipe import recipe_names

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_recipes_and_library_size():
    assert {"default", "auto"} <= set(recipe_names())
    library = transform.by_level()
    assert all(len(entries) >= 6 for entries in library.values()), \
        {k: len(v) for k, v in library.items()}


@pytest.mark.parametrize("recipe", ["default", "auto"])
@pytest.mark.parametrize("model", ["mlp", "bert-layer", "mbconv", "resblock"])
def test_recipe_verifies(model, recipe):
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    steps = ws.optimize(recipe)
    assert steps, f"{recipe} applied nothing to {model}"
    assert ws.data_movement().moved_bytes <= before
    report = ws.verify()
    assert report.match, report.text()


def test_info_auto_ratio_on_bert():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "info", "bert-layer",
                           "--recipe", "auto", "--json"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["recipe"]["before"]["ratio"] > 2.0
    assert info["data_movement"]["ratio"] <= 2.0
    assert [row["class"] for row in info["classes"]] == ["tensor contraction", "normalization",
                                                         "element-wise", "data layout"]
