"""``bench --by-op``: both runtimes' per-node times mapped onto the model's ONNX nodes
(no timing asserts: which side is faster is for the benchmark commands)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.runtime.by_op import by_op, expand_fused

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name, members", [
    ("/fc1/Gemm", ["/fc1/Gemm"]),
    ("/act1/{Sigmoid,Mul}", ["/act1/Sigmoid", "/act1/Mul"]),
    ("/{conv_pw/Conv,act1/{Sigmoid,Mul}}", ["/conv_pw/Conv", "/act1/Sigmoid", "/act1/Mul"]),
    ("/{a/{b,c},d}", ["/a/b", "/a/c", "/d"]),
    ("/odd{name", ["/odd{name"]),
])
def test_fused_names_expand_to_their_members(name, members):
    assert expand_fused(name) == members


def test_every_node_of_both_runtimes_lands_in_one_row_over_the_models_nodes():
    ws = workbench.open("zoo:mbconv")
    ws.optimize("auto")
    result = by_op(ws, repeat=3, warmup=1)
    model_nodes = {n.name: n.op_type for n in ws.model.reference_model.graph.node}
    profile = ws.profiles[-1]
    wb = [name for row in result.rows for name in row.workbench_names]
    ort = [name for row in result.rows for name in row.onnxruntime_names]
    assert sorted(wb) == sorted(profile.per_operator)   # each operator in exactly one row
    assert len(ort) == len(set(ort)) and ort            # onnxruntime's nodes too
    covered = [n for row in result.rows for n in row.nodes]
    assert len(covered) == len(set(covered)) and set(covered) <= set(model_nodes)
    fused = [name for name in wb if "{" in name]
    assert fused, "auto fuses on mbconv: a fused operator's members are its row's nodes"
    for row in result.rows:
        assert all(set(expand_fused(name)) <= set(row.nodes) for name in row.workbench_names
                   if set(expand_fused(name)) <= set(model_nodes))
        assert sum(row.op_types.values()) == len(row.nodes)
        assert all(model_nodes[n] in row.op_types for n in row.nodes)
    losses = [row.lost_ms for row in result.rows]
    assert losses == sorted(losses, reverse=True)
    d = result.to_dict()
    assert d["workbench_kernels_ms"] == pytest.approx(sum(profile.per_operator.values()), abs=1e-3)
    assert d["workbench_total_ms"] == pytest.approx(profile.total_ms, abs=1e-3)
    assert d["onnxruntime_total_ms"] > 0
    assert "sorted by time lost" in result.table() and "wall-clock" in result.table()


def app(*argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", "bench", *argv],
                          capture_output=True, text=True, env=env, timeout=600)


def test_bench_by_op_command_json_and_bad_combinations():
    proc = app("mlp", "--recipe", "auto", "--by-op", "--repeat", "3", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    assert d["model"] == "mlp" and d["repeat"] == 3 and d["rows"]
    assert {"/fc1/Gemm", "/fc2/Gemm", "/fc3/Gemm"} <= {n for r in d["rows"] for n in r["nodes"]}
    assert all(r["lost_ms"] == pytest.approx(r["workbench_ms"] - r["onnxruntime_ms"], abs=1e-3)
               for r in d["rows"])
    for argv, says in ((("--zoo", "--by-op"), "leave out"),
                       (("mlp", "--by-op", "--interactive"), "leave out --interactive")):
        bad = app(*argv)
        assert bad.returncode == 2 and says in bad.stderr, bad.stderr
