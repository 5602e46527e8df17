"""The model zoo (``zoo:NAME``) and a sample of the path matrix.

The whole matrix is ``python -m tests.zoo`` (every zoo model through import,
recipes, script replay, export and reopen; ``--full`` at full size); here two
small models go through its cheapest paths, in the child processes the full
run uses.
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench
from sdfg_models import zoo
from tests.zoo.__main__ import ModelRun, main as zoo_main, table
from workbench.errors import ModelLoadError, UnknownModelError

ROOT = Path(__file__).resolve().parents[1]


# -- names -------------------------------------------------------------------------------
def test_every_small_zoo_model_has_its_file_and_names_are_unique():
    assert len(set(zoo.names())) == len(zoo.names())
    assert set(zoo.names(full=False)) >= {"mlp", "bert-layer", "mbconv", "resblock", "bert",
                                          "gpt2", "unet", "densenet"}
    assert all(n.endswith("-full") for n in zoo.names(full=True))
    for name in zoo.names(full=False):
        path = workbench.resolve_model(f"zoo:{name}")
        assert path.is_file() and path.suffix == ".onnx", name


def test_zoo_exports_resolve_to_the_committed_files():
    assert workbench.resolve_model("zoo:gpt2") == ROOT / "tests" / "exports" / "gpt2.onnx"
    assert workbench.resolve_model("zoo:unet") == ROOT / "tests" / "exports" / "unet.onnx"


def _dict_keys(script: str, name: str) -> set:
    """The keys of the dict ``name`` that ``script`` (in tests/exports) assigns, read from
    its source: importing the generators would import torch and onnxruntime's quantizer."""
    tree = ast.parse((ROOT / "tests" / "exports" / script).read_text())
    table = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == name for t in node.targets))
    return {key.value for key in table.keys}


def test_full_size_names_are_the_ones_the_generators_write():
    """make_exports.py --full writes the float models, quantized_models.py --full the
    quantized ones made from them."""
    written = _dict_keys("make_exports.py", "FULL") | _dict_keys("quantized_models.py",
                                                                 "FIXTURES")
    assert written == {zoo.get(n).file for n in zoo.names(full=True)}


def test_unknown_zoo_name_lists_the_zoo():
    with pytest.raises(UnknownModelError) as err:
        workbench.open("zoo:resnet50")
    assert "zoo:resnet50" in str(err.value)
    assert all(f"zoo:{n}" in str(err.value) for n in zoo.names())
    with pytest.raises(UnknownModelError) as err:   # a plain unknown name mentions the zoo
        workbench.resolve_model("gpt2")
    assert "zoo:NAME" in str(err.value) and "gpt2" in str(err.value)


def test_full_size_model_not_generated_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    assert not zoo.get("gpt2-full").available()
    with pytest.raises(ModelLoadError) as err:
        workbench.open("zoo:gpt2-full")
    assert "python tests/exports/make_exports.py --full gpt2" in str(err.value)
    assert str(tmp_path / "zoo-full" / "gpt2.onnx") in str(err.value)


def test_cli_unknown_zoo_name_exits_2():
    proc = subprocess.run([sys.executable, "app.py", "info", "zoo:nope"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "zoo:gpt2" in proc.stderr


# -- shapes and references ----------------------------------------------------------------
def test_zoo_shapes_apply_and_given_shapes_win():
    ws = workbench.open("zoo:bert")
    assert ws.name == "bert" and ws.source == "zoo:bert"
    assert {i.onnx_name: tuple(i.shape) for i in ws.inputs} == {
        "input_ids": (1, 16), "attention_mask": (1, 16)}
    ws2 = workbench.open("zoo:bert", input_shapes={"batch": 2})
    assert [tuple(i.shape) for i in ws2.inputs] == [(2, 16), (2, 16)]


def test_reference_is_the_sessions_seeded_inputs_and_onnxruntime_cached():
    entry = zoo.get("gpt2")
    inputs, outputs = zoo.reference(entry)
    ws = workbench.open("zoo:gpt2")
    seeded = ws.random_inputs(0)
    assert list(seeded) == list(inputs)
    assert all(np.array_equal(seeded[k], inputs[k]) and seeded[k].dtype == inputs[k].dtype
               for k in inputs)
    assert list(outputs) == [o.onnx_name for o in ws.outputs]
    cached = list((zoo.cache_root() / "zoo-reference").glob("gpt2-*.npz"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    again_in, again_out = zoo.reference(entry)
    assert cached[0].stat().st_mtime_ns == stamp   # read back, not recomputed
    assert all(np.array_equal(again_out[k], outputs[k]) for k in outputs)


# -- the matrix ---------------------------------------------------------------------------
def test_table_marks_failures_and_skips():
    results = {("mlp", "import"): {"ok": True, "text": "", "skipped": 0, "seconds": 1.0},
               ("mlp", "auto"): {"ok": True, "text": "", "skipped": 2, "seconds": 2.0},
               ("gpt2", "import"): {"ok": False, "text": "mismatch: logits", "skipped": 0,
                                    "seconds": 3.0}}
    text = table(["mlp", "gpt2"], ["import", "auto"], results)
    assert "ok (2 skipped)" in text and "FAIL [1]" in text
    assert "[1] gpt2 / import: mismatch: logits" in text
    assert text.splitlines()[3].split()[:4] == ["gpt2", "FAIL", "[1]", "-"]  # auto not run


class _Crashing(ModelRun):
    """Children that pass the first cell they get, then die (a segfault, as generated
    code can), or hang in it."""

    def __init__(self, how, *args):
        super().__init__(*args)
        self.how = how

    def command(self, paths):
        first = json.dumps({"model": self.name, "path": paths[0], "ok": True, "text": "",
                            "skipped": 0, "seconds": 0.0})
        end = ("time.sleep(60)" if self.how == "hang"
               else "os.kill(os.getpid(), signal.SIGSEGV)")
        return [sys.executable, "-c", f"import os, signal, sys, time; print({first!r}, "
                f"flush=True); print('last words', file=sys.stderr, flush=True); {end}"]


@pytest.mark.parametrize("how, why", [("crash", "process died (signal 11): last words"),
                                      ("hang", "timed out after 2 s")])
def test_a_dying_cell_fails_alone_and_the_others_run(how, why, tmp_path):
    logged = []
    run = _Crashing(how, "mlp", ["import", "default", "auto", "script"], tmp_path, None, 2,
                    logged.append)
    results = run.run()
    assert [results[p]["ok"] for p in ("import", "default", "auto", "script")] == [
        True, False, True, False]   # each new child passes one cell, then dies in the next
    assert results["default"]["text"] == why and len(logged) == 4


# gpt2's import cell builds what test_real_exports[gpt2] builds: in `make test-slow`
@pytest.mark.parametrize("model, paths", [("mlp", "import,export"),
                                          pytest.param("gpt2", "import", marks=pytest.mark.slow)])
def test_matrix_sample(model, paths, capsys):
    """Import -> verify (and for mlp the auto recipe -> export -> run.py --check in a
    fresh process), each model in its child process as the full run has it; the last
    line is the matrix's JSON."""
    code = zoo_main(["--models", model, "--paths", paths, "--json", "--quiet"])
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and summary["failed"] == 0, out
    assert summary["cells"] == summary["passed"] == len(paths.split(","))
    assert [(r["model"], r["path"]) for r in summary["results"]] == [
        (model, p) for p in paths.split(",")]


def test_matrix_refuses_unknown_models_and_paths():
    for args in (["--models", "nope"], ["--paths", "import,compile"]):
        proc = subprocess.run([sys.executable, "-m", "tests.zoo", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
