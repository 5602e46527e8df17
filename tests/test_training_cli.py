"""Training from the command line and the gradient check against the model
file: ``verify --train``, ``train``, their exit codes; a wrong gradient rule
is caught."""
import numpy as np
import pytest

import workbench
from tests.test_cli import app, assert_clean_error, last_json
from workbench.runtime.gradient_check import check_gradients
from workbench.training import rules


def test_verify_train_checks_the_program_and_its_gradient():
    proc = app("verify", "resblock", "--train", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = last_json(proc)
    assert report["match"] and report["program_match"]
    grad = report["gradient"]
    # 4 directions over all parameters, then one per parameter tensor
    alongs = [d["along"] for d in grad["directions"]]
    assert grad["loss"] == "mse" and grad["params"] == 4
    assert alongs == ["all parameters"] * 4 + ["conv1.weight", "conv1.bias", "conv2.weight",
                                                "conv2.bias"]
    assert grad["worst_rel_err"] < grad["rtol"]
    assert "central differences" in proc.stdout


def test_train_prints_a_falling_loss_and_saves_the_parameters(tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "batch.npz"
    np.savez(data, input=rng.standard_normal((64, 784)).astype(np.float32),
             labels=rng.integers(0, 10, 64))
    saved = tmp_path / "params.npz"
    proc = app("train", "mlp", "--loss", "cross_entropy", "--steps", "4", "--lr", "0.05",
               "--data", str(data), "--save", str(saved), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    losses = last_json(proc)["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert proc.stdout.count("step ") == 4
    with np.load(saved) as params:
        assert set(params.files) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                     "fc3.weight", "fc3.bias"}


def test_bad_training_input_is_exit_2(tmp_path):
    assert_clean_error(app("train", "mlp", "--steps", "0"), 2, "--steps")
    bad = tmp_path / "bad.npz"
    np.savez(bad, nonsense=np.zeros(3))
    assert_clean_error(app("train", "mlp", "--data", str(bad), "--steps", "1"), 2,
                       "unknown nonsense")
    assert_clean_error(app("train", "resblock", "--loss", "output"), 2, "one element")
    assert_clean_error(app("train", "mlp", "--params", "nothing_like_this"), 2,
                       "no parameter matches")


def test_the_directional_check_catches_a_wrong_rule(monkeypatch):
    right = rules.RULES["Relu"]

    def leaky(c):   # passes 10 % of the gradient where Relu blocks it
        e, x = c.e, c.x(0)
        from workbench.training.rules.elementwise import _bool, where
        return [where(e, _bool(e, "Greater", x, e.scalar(0, x)), c.dy(),
                      e.mul(c.dy(), e.scalar(0.1, x)))]
    monkeypatch.setitem(rules.RULES, "Relu", leaky)
    tr = workbench.open("resblock").training(loss="mse")
    report = check_gradients(tr, tr.random_batch())
    assert not report.match and report.worst > 3 * report.rtol
    worst = max(report.directions, key=lambda d: d.rel_err)
    assert worst.along.startswith("conv1"), worst   # the first conv is below the leaking Relu
    monkeypatch.setitem(rules.RULES, "Relu", right)


def test_an_exported_training_program_takes_the_sessions_steps(tmp_path):
    """optimize --train exports a program whose run.py takes training steps from the
    exported state: the same losses as the session's own steps on the same batch."""
    import subprocess
    import sys
    rng = np.random.default_rng(1)
    batch = {"input": rng.standard_normal((64, 784)).astype(np.float32),
             "labels": rng.integers(0, 10, 64)}
    np.savez(tmp_path / "batch.npz", **batch)
    folder = tmp_path / "export"
    proc = app("optimize", "mlp", "--train", "--loss", "cross_entropy", "--optimizer", "adamw",
               "-o", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (folder / "state.npz").is_file()
    run = subprocess.run([sys.executable, "run.py", "--steps", "3", "--data",
                          str(tmp_path / "batch.npz"), "--save", str(tmp_path / "p.npz")],
                         cwd=folder, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    exported = [float(line.split()[-1]) for line in run.stdout.splitlines()
                if line.startswith("step")]
    tr = workbench.open("mlp").training(loss="cross_entropy", optimizer="adamw", lr=1e-3)
    ours = [tr.step(tr.batch_from(batch)) for _ in range(3)]
    np.testing.assert_allclose(exported, ours, rtol=1e-4)
    with np.load(tmp_path / "p.npz") as params:
        np.testing.assert_allclose(params["fc3.weight"], tr.parameters["fc3.weight"], rtol=1e-4,
                                   atol=1e-6)


def test_the_labels_input_takes_the_name_given():
    tr = workbench.open("mlp").training(loss="cross_entropy", labels="targets")
    assert tr.program.labels[0] == "targets"
    batch = tr.random_batch(seed=0)
    assert "targets" in batch
    assert np.isfinite(tr.gradients(batch)["loss"])
    with pytest.raises(workbench.BadInputError, match="labels names"):
        workbench.open("mlp").training(loss="mse", labels="no such name")
