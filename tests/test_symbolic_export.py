"""An exported symbolic program runs at every size (issue 30, item 6).

The export of a program whose sequence length is a symbol reads the sizes from
the inputs' shapes; one loaded instance serves several sizes in turn (oneDNN's
primitives made per size inside it), each equal to onnxruntime on the model.
"""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import workbench
from workbench.runtime.reference import run_reference


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert_symbolic")
    ws = workbench.open("zoo:bert", symbolic=["sequence"],
                        input_shapes={"batch": 1, "sequence": 16})
    ws.optimize("auto")
    result = ws.export(folder)
    assert result["check"]["match"]   # run.py --check at the default size, in a fresh process
    return ws, folder


def _program(folder):
    spec = importlib.util.spec_from_file_location("exported_run", folder / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_export_records_its_symbolic_sizes(exported):
    _, folder = exported
    spec = json.loads((folder / "program.json").read_text())
    assert spec["symbols"] == {"sequence": 16}
    assert [a["name"] for a in spec["arguments"] if a["role"] == "symbol"] == ["sequence"]
    ids = next(a for a in spec["inputs"] if a["onnx_name"] == "input_ids")
    assert ids["onnx_shape"] == [1, "sequence"]
    assert "sequence" in (folder / "README.txt").read_text()


def test_one_loaded_export_serves_every_size_equal_to_onnxruntime(exported):
    ws, folder = exported
    run = _program(folder)
    program = run.Program(folder)
    try:
        for size in (5, 37, 5, 64):   # back to a size seen before: its primitives are kept
            inputs = program.random_inputs(seed=size, sizes={"sequence": size})
            assert inputs["input_ids"].shape == (1, size)
            got = program(inputs)
            want, _ = run_reference(ws.model.reference_model, ws.reference_feeds(inputs))
            for name, value in want.items():
                assert got[name].shape == value.shape
                np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
    finally:
        program.close()


def test_run_py_takes_sizes_and_refuses_bad_ones(exported):
    _, folder = exported
    done = subprocess.run([sys.executable, "run.py", "--sizes", "sequence=9"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1000:]
    assert "last_hidden_state (1, 9, 64)" in done.stdout
    for bad, why in (("seq=9", "not a symbolic size"), ("sequence=0", "at least 1")):
        done = subprocess.run([sys.executable, "run.py", "--sizes", bad], cwd=folder,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and why in done.stderr, done.stderr[-1000:]
