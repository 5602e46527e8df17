"""``bench --zoo``: rows, ratios and geomeans that agree with each other, failed and
skipped rows, the busy process always gone afterwards, bad arguments exit 2
(no timing asserts: speed is for the benchmark commands)."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.runtime.zoo_bench import busy_process

ROOT = Path(__file__).resolve().parents[1]


def app(*argv, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "bench", *argv],
                          capture_output=True, text=True, env=env, timeout=600)


def gone(pid: int) -> bool:
    """Not running: no such process, or one that has exited (a zombie not reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_zoo_bench_rows_ratios_geomean_busy_and_a_failed_model(tmp_path):
    # 16 MiB admits mlp and resblock but not bert-layer (27 MiB): a real failure to open
    plot = tmp_path / "zoo.png"
    proc = app("--zoo", "--models", "mlp,zoo:resblock,bert-layer", "--repeat", "3",
               "--warmup", "1", "--runs", "1", "--busy", "--json", "--plot", str(plot),
               env={"WORKBENCH_MEMORY_BUDGET": "16M"})
    assert proc.returncode == 1, proc.stderr  # one model failed
    text, last = proc.stdout, proc.stdout.strip().splitlines()[-1]
    d = json.loads(last)
    assert text.splitlines()[0].startswith("CPU: ") and "avx2" in text.splitlines()[0]
    assert d["recipe"] == "auto" and d["repeat"] == 3 and d["threads"] == 2 and d["busy"]
    assert d["runs"] == 1
    assert isinstance(d["machine"]["avx2"], bool) and isinstance(d["machine"]["avx512f"], bool)
    assert d["machine"]["onnxruntime"] and d["machine"]["cpu"]
    assert d["machine"]["load_average"] >= 0 and d["load_average_after"] >= 0
    rows = {r["model"]: r for r in d["rows"]}
    assert list(rows) == ["mlp", "resblock", "bert-layer"]
    failed = rows["bert-layer"]
    assert failed["status"] == "failed" and "MemoryBudgetError" in failed["detail"]
    assert "quiet" not in failed and d["failed"] == 1
    assert "bert-layer" in text and "failed: MemoryBudgetError" in text
    for name in ("mlp", "resblock"):
        r = rows[name]
        assert r["status"] == "ok" and r["kind"] == "bundled"
        for run in ("quiet", "busy"):
            wb, ort = r[run]["workbench"], r[run]["onnxruntime"]
            for t in (wb, ort):
                assert 0 < t["min_ms"] <= t["median_ms"]
                assert t["spread"] == pytest.approx(t["median_ms"] / t["min_ms"], rel=1e-3)
            assert r[run]["ratio"] == pytest.approx(wb["median_ms"] / ort["median_ms"], rel=1e-3)
            assert r[run]["ratio_range"] == [r[run]["ratio"]] * 2 and len(r[run]["runs"]) == 1
        for who in ("workbench", "onnxruntime"):
            assert r["slowdown"][who] == pytest.approx(
                r["busy"][who]["median_ms"] / r["quiet"][who]["median_ms"], rel=1e-3)
        assert r["slowdown_ratio"] == pytest.approx(
            r["slowdown"]["workbench"] / r["slowdown"]["onnxruntime"], rel=1e-3)
        assert gone(r["busy_pid"]), f"busy process {r['busy_pid']} still running"
    assert rows["mlp"]["busy_pid"] != rows["resblock"]["busy_pid"]  # one per model's rounds
    bundled = d["geomean"]["bundled"]
    ratios = [rows[n]["quiet"]["ratio"] for n in ("mlp", "resblock")]
    assert bundled["models"] == 2
    assert bundled["ratio"] == pytest.approx(math.sqrt(ratios[0] * ratios[1]), rel=1e-3)
    busy = [rows[n]["busy"]["ratio"] for n in ("mlp", "resblock")]
    assert bundled["busy_ratio"] == pytest.approx(math.sqrt(busy[0] * busy[1]), rel=1e-3)
    assert d["geomean"]["exports"] == {"ratio": None, "models": 0, "busy_ratio": None,
                                       "slowdown_ratio": None}
    assert f"{bundled['ratio']:.3f}" in text and "busy" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_missing_full_size_model_is_skipped_with_its_command(tmp_path):
    # an empty cache: no full-size model has been generated there
    proc = app("--zoo", "--full", "--models", "resnet", "--repeat", "1", "--runs", "1", "--json",
               env={"WORKBENCH_CACHE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout.strip().splitlines()[-1])["rows"]
    assert row["model"] == "resnet-full" and row["status"] == "skipped"
    assert "python tests/exports/make_exports.py --full resnet" in row["detail"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_busy_process_stops_on_error_and_interrupt(error):
    with pytest.raises(error):
        with busy_process() as proc:
            pid = proc.pid
            assert not gone(pid)
            raise error("stop")
    assert gone(pid)


def test_busy_process_ends_when_its_parent_is_killed():
    # SIGKILL runs no ``finally``: the spinner notices that its parent is gone
    parent = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom workbench.runtime.zoo_bench import "
         "busy_process\nwith busy_process() as p:\n    print(p.pid, flush=True)\n"
         "    time.sleep(60)\n"], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    pid = int(parent.stdout.readline())
    assert not gone(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)


@pytest.mark.parametrize("argv, says", [
    (("--zoo", "mlp"), "leave out MODEL"),
    (("--zoo", "--baseline", "torch"), "leave out --baseline"),
    (("--zoo", "--models", "nosuch"), "not in the zoo"),
    (("--zoo", "--recipe", "nosuch"), "unknown recipe"),
    (("mlp", "--busy"), "only go with --zoo"),
    (("mlp", "--runs", "0"), "at least 1"),
    ((), "needs a MODEL"),
])
def test_bad_arguments_exit_2(argv, says):
    proc = app(*argv)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
