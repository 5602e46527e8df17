"""Exported programs run standalone and match onnxruntime."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import workbench

ROOT = Path(__file__).resolve().parents[1]


def test_export_folder_runs_standalone(tmp_path):
    ws = workbench.open("mlp")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ChooseImplementation"))
    result = ws.export(tmp_path / "out")
    assert result["check"]["match"]
    folder = tmp_path / "out"
    for name in ("program.sdfgz", "session.sdfgz", "recipe.json", "script.py", "weights.npz",
                 "program.json", "run.py", "README.txt", "expected.npz"):
        assert (folder / name).is_file(), name
    assert list((folder / "src").rglob("*.cpp")) and list((folder / "lib").glob("*.so"))
    assert len(json.loads((folder / "recipe.json").read_text())["steps"]) == 1
    # Run with numpy only: no workbench, no dace on the path.
    x = np.random.default_rng(5).standard_normal((64, 784)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-S", "-c",
                           "import sys; sys.path.append(%r); import runpy; "
                           "sys.argv=['run.py','--inputs',%r,'--out',%r]; "
                           "runpy.run_path('run.py', run_name='__main__')"
                           % (_numpy_path(), str(tmp_path / "in.npz"), str(tmp_path / "out.npz"))],
                          cwd=folder, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        got = out["output"]
    expected = ws.run({"input": x})["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_optimize_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "optimize", "resblock",
                           "-o", str(tmp_path / "rb"), "--json"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["check"]["match"] is True
    check = subprocess.run([sys.executable, "run.py", "--check"], cwd=tmp_path / "rb",
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "match" in check.stdout


def _numpy_path() -> str:
    return str(Path(np.__file__).resolve().parents[1])
