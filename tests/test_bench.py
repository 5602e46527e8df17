"""Profiling and the bench command run and report sane fields (no timing asserts)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import workbench

ROOT = Path(__file__).resolve().parents[1]


def test_profile_per_operator_and_history_position():
    ws = workbench.open("mlp")
    p = ws.profile(repeat=3, warmup=1)
    assert p.total_ms > 0 and p.min_ms <= p.total_ms <= p.max_ms and len(p.samples_ms) == 3
    assert set(p.per_operator) == {"/fc1/Gemm", "/fc2/Gemm", "/fc3/Gemm", "/Relu", "/Relu_1"}
    assert all(v > 0 for v in p.per_operator.values())
    assert p.reference_ms > 0 and p.threads == 2 and p.step == 0
    assert ws.profiles == [p]


def test_bench_command_json_and_plot(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plot = tmp_path / "bench.png"
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "bench", "mlp",
                           "--repeat", "3", "--warmup", "1", "--runs", "3", "--plot", str(plot),
                           "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    assert d["model"] == "mlp" and d["repeat"] == 3 and d["threads"] == 2
    assert d["workbench_ms"] > 0 and d["baselines"]["onnxruntime"] > 0
    assert abs(d["ratio_vs_onnxruntime"] - d["workbench_ms"] / d["baselines"]["onnxruntime"]) < 1e-2
    ratios = sorted(r["ratio_vs_onnxruntime"] for r in d["runs"])
    assert len(ratios) == 3 and d["ratio_vs_onnxruntime"] == ratios[1]   # the median run's
    assert d["ratio_range"] == [ratios[0], ratios[2]]
    assert f"median of 3 run(s); range {ratios[0]:.3f}-{ratios[2]:.3f}" in proc.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_bench_bad_baseline_exits_2():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "bench", "mlp",
                           "--repeat", "1", "--baseline", "tensorflow"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 2 and "unknown baseline" in proc.stderr
