"""The speed guard (``bench --zoo --against``): which models count as slower, and the
command's exit codes (no timing asserts: the baselines here are made up)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import BadInputError
from workbench.runtime import speed_guard

ROOT = Path(__file__).resolve().parents[1]


def result(**ratios) -> dict:
    rows = [{"model": m, "status": "ok", "quiet": {"ratio": r}} if r is not None
            else {"model": m, "status": "failed", "detail": "BuildError: boom"}
            for m, r in ratios.items()]
    return {"rows": rows}


def test_a_model_more_than_15_percent_slower_or_failing_is_named():
    base = result(resnet=1.0, bert=1.2, vit=0.9, gone=1.0)
    now = result(resnet=1.14, bert=1.5, vit=None, extra=3.0)
    changes = {c.model: c for c in speed_guard.compare(base, now)}
    assert set(changes) == {"resnet", "bert", "vit"}   # only models tried both times
    assert not changes["resnet"].regressed() and changes["resnet"].slower == pytest.approx(1.14)
    assert changes["bert"].regressed() and changes["vit"].regressed()
    text = speed_guard.table(list(changes.values()), "base.json")
    assert "2 model(s) more than 15% slower: bert, vit" in text and "failed now" in text
    assert "no model more than 15% slower" in speed_guard.table([changes["resnet"]], "b")


def test_the_baseline_is_the_last_json_line_of_a_saved_output(tmp_path):
    saved = tmp_path / "base.txt"
    saved.write_text("CPU: some cpu\nmodel table ...\n" + json.dumps(result(mlp=1.0)) + "\n")
    assert speed_guard.read_baseline(saved)["rows"][0]["model"] == "mlp"
    (tmp_path / "plain.json").write_text(json.dumps(result(mlp=1.0), indent=1))
    assert speed_guard.read_baseline(tmp_path / "plain.json")["rows"][0]["model"] == "mlp"
    (tmp_path / "no.json").write_text('{"model": "mlp"}\n')
    with pytest.raises(BadInputError, match="holds no `bench --zoo --json` result"):
        speed_guard.read_baseline(tmp_path / "no.json")
    with pytest.raises(BadInputError, match="cannot read"):
        speed_guard.read_baseline(tmp_path / "missing.json")


def app(*argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "bench", *argv],
                          capture_output=True, text=True, env=env, timeout=600)


def test_the_command_exits_1_naming_the_slower_model_and_2_on_a_bad_baseline(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(result(mlp=1e-6)))   # no real run is that fast
    proc = app("--zoo", "--models", "mlp", "--repeat", "2", "--warmup", "1", "--runs", "1",
               "--against", str(base), "--json")
    assert proc.returncode == 1, proc.stderr
    assert "REGRESSED" in proc.stdout and "1 model(s) more than 15% slower: mlp" in proc.stdout
    bad = app("--zoo", "--models", "mlp", "--against", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and "cannot read" in bad.stderr
    alone = app("mlp", "--against", str(base))
    assert alone.returncode == 2 and "only go with --zoo" in alone.stderr
