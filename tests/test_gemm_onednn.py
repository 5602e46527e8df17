"""GEMMs with constant weights on oneDNN: GemmOnOneDNN takes exactly the products whose B
is a weight and whose shape oneDNN measured faster on (the measurement is cached per
machine and shape), the programs equal onnxruntime, and the shim's packed weights follow
a change of the weight."""
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench
from fusion_helpers import F32, graph_model, node, rand, verify
from onnx_helpers import onnx_ops
from workbench import transformation_api as transform
from workbench.build import gemm_timing, onednn


def gemm_model():
    """Every product kind GemmOnOneDNN meets: a 3-D MatMul whose batch folds into rows
    with a bias Add after it, a Gemm with transB and a bias row, a Gemm with a full C
    (the bias sweep after the library), a Gemm with alpha 2 (not the library's), and a
    MatMul of two activations (no weight to pack)."""
    nodes = [
        node("MatMul", ["x", "w1"], ["m1"]), node("Add", ["m1", "b1"], ["y1"]),
        node("Gemm", ["x2", "w2", "b2"], ["y2"], transB=1),
        node("Gemm", ["x2", "w3", "c3"], ["y3"]),
        node("Gemm", ["x2", "w3"], ["y4"], alpha=2.0),
        node("MatMul", ["x", "z"], ["y5"]),
    ]
    inits = {"w1": rand(16, 24, seed=1), "b1": rand(24, seed=2), "w2": rand(20, 16, seed=3),
             "b2": rand(20, seed=4), "w3": rand(16, 12, seed=5), "c3": rand(10, 12, seed=6)}
    return graph_model(nodes, {"x": ([2, 9, 16], F32), "x2": ([10, 16], F32),
                               "z": ([2, 16, 7], F32)}, ["y1", "y2", "y3", "y4", "y5"], inits)


def faster(times):
    """gemm_timing.gemm_times replaced by fixed times (the choice without the timing)."""
    return lambda m, k, n, b_transposed: dict(times)


def test_constant_weight_products_go_to_onednn_where_it_measured_faster(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", faster({"onednn": 1.0, "blas": 2.0}))
    ws = workbench.open(gemm_model())
    t = transform.get("GemmOnOneDNN")
    found = transform.find_matches(t, ws.sdfg, ws.model.weights)
    assert sorted(m.description.split(":")[0] for m in found) == [
        "/m1/MatMul", "/y2/Gemm", "/y3/Gemm"], [m.description for m in found]
    assert "1.000 ms, BLAS 2.000 ms" in found[0].description
    reasons = {r.node.split(":op:")[1].split("#")[0]: r.reason
               for r in transform.refusals(t, ws.sdfg, ws.model.weights)}
    assert "not a weight" in reasons["/y5/MatMul"]
    assert "alpha 1" in reasons["/y4/Gemm"]
    for match in found:
        ws.apply(match)
    on = {n.onnx_name: n.implementation for n in onnx_ops(ws.sdfg)}
    assert [on[n] for n in ("/m1/MatMul", "/y2/Gemm", "/y3/Gemm")] == ["onednn"] * 3
    verify(ws)


def test_an_epilogue_keeps_its_sweep_and_its_core_goes_to_onednn(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", faster({"onednn": 1.0, "blas": 2.0}))
    ws = workbench.open(gemm_model())
    ws.optimize("auto")
    fused = [n for n in onnx_ops(ws.sdfg) if n.op_type == "GemmEpilogue"]
    assert fused and all(n.implementation == "onednn" for n in fused), \
        [(n.onnx_name, n.implementation) for n in fused]
    assert "GemmOnOneDNN" in [s["transformation"] for s in ws.history]
    verify(ws)


def test_where_the_blas_measured_faster_nothing_changes(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", faster({"onednn": 1.97, "blas": 2.0}))
    ws = workbench.open(gemm_model())
    t = transform.get("GemmOnOneDNN")
    assert transform.find_matches(t, ws.sdfg, ws.model.weights) == []
    reasons = [r.reason for r in transform.refusals(t, ws.sdfg, ws.model.weights)]
    assert any("oneDNN measured 1.970 ms against the BLAS's 2.000 ms" in r for r in reasons)


def test_choose_implementation_never_offers_packed_weights():
    """It runs without the session's weights, so it cannot tell B is a constant."""
    ws = workbench.open(gemm_model())
    t = transform.get("ChooseImplementation")
    offered = [m.description for m in t.find(ws.sdfg)
               if dict(m.options).get("implementation") == "onednn"]
    assert not offered, offered


def test_a_measurement_is_made_once_per_machine_and_shape(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    real = gemm_timing._measure
    calls = []

    def counted(*args):
        calls.append(args[:4])
        return real(*args)

    monkeypatch.setattr(gemm_timing, "_measure", counted)
    first = gemm_timing.gemm_times(32, 48, 40, False)
    again = gemm_timing.gemm_times(32, 48, 40, False)
    other = gemm_timing.gemm_times(32, 48, 40, True)
    assert first == again and calls == [(32, 48, 40, False), (32, 48, 40, True)]
    # both times, and the load per core they were taken under (`kernels` lists it)
    assert set(first) == {"onednn", "blas", "load"}
    assert first["onednn"] > 0 and first["blas"] > 0 and first["load"] >= 0
    (cache,) = (tmp_path / "kernel-choices").glob("*.json")
    assert json.loads(cache.read_text()) == {"gemm 32x48x40": first, "gemm 32x48x40 bT": other}


def test_two_processes_asking_at_once_measure_once():
    """A session's worker and its window (or two suites) asking for a new shape at the
    same time get one timing: the cache is held across processes while one measures, so
    both choose alike (two measurements differ in their last digits)."""
    code = ("import json; from workbench.build import gemm_timing as g; "
            "print(json.dumps(g.gemm_times(23, 57, 41, False)))")
    root = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=root, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0] == outs[1] and outs[0]["onednn"] > 0


def test_packed_weights_follow_a_new_weight():
    """Weights are packed per call site; another array, or other values at the same
    address, are packed again."""
    lib = onednn._lib()
    ctx = lib.wb_dnnl_context_new()
    m, k, n = 12, 16, 20
    d = onednn.MatMulDesc(m, k, n, k, n, (ctypes.c_long * 2)(n, 1), 1)
    a, bias = rand(m, k, seed=1), rand(n, seed=2)
    y = np.zeros((m, n), np.float32)
    try:
        for seed in (3, 4):
            b = rand(k, n, seed=seed)
            for _ in range(2):
                assert lib.wb_dnnl_matmul(ctx, ctypes.byref(d), a.ctypes.data, b.ctypes.data,
                                          bias.ctypes.data, y.ctypes.data) == 0
                np.testing.assert_allclose(y, a @ b + bias, rtol=1e-4, atol=1e-4)
            b[:] = rand(k, n, seed=seed + 10)
            assert lib.wb_dnnl_matmul(ctx, ctypes.byref(d), a.ctypes.data, b.ctypes.data,
                                      bias.ctypes.data, y.ctypes.data) == 0
            np.testing.assert_allclose(y, a @ b + bias, rtol=1e-4, atol=1e-4)
    finally:
        lib.wb_dnnl_context_free(ctx)


@pytest.mark.parametrize("strides", [(1, 16), (20, 1)])
def test_the_shim_reads_b_as_stored_or_transposed(strides):
    lib = onednn._lib()
    ctx = lib.wb_dnnl_context_new()
    m, k, n = 8, 16, 20
    d = onednn.MatMulDesc(m, k, n, k, n, (ctypes.c_long * 2)(*strides), 0)
    a = rand(m, k, seed=1)
    stored = rand(n, k, seed=2) if strides == (1, 16) else rand(k, n, seed=2)
    b = stored.T if strides == (1, 16) else stored
    y = np.zeros((m, n), np.float32)
    try:
        assert lib.wb_dnnl_matmul(ctx, ctypes.byref(d), a.ctypes.data, stored.ctypes.data,
                                  None, y.ctypes.data) == 0
        np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-4)
    finally:
        lib.wb_dnnl_context_free(ctx)


def test_one_call_site_serves_every_size_it_is_called_with():
    """A program whose sizes are symbols calls one site with a descriptor per size: each
    size gets its primitive, the sizes may come back in any order, and the weights of the
    site stay right (packed once per layout)."""
    lib = onednn._lib()
    lib.wb_dnnl_matmul_at.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.POINTER(onednn.MatMulDesc)] + [ctypes.c_void_p] * 4
    ctx = lib.wb_dnnl_context_new()
    site = ctypes.create_string_buffer(1)   # any address unique to the site
    k, n = 16, 24
    b, bias = rand(k, n, seed=2), rand(n, seed=3)
    try:
        for m in (5, 64, 1, 5, 64, 300):
            d = onednn.MatMulDesc(m, k, n, k, n, (ctypes.c_long * 2)(n, 1), 1)
            a, y = rand(m, k, seed=m), np.zeros((m, n), np.float32)
            assert lib.wb_dnnl_matmul_at(ctx, ctypes.addressof(site), ctypes.byref(d),
                                         a.ctypes.data, b.ctypes.data, bias.ctypes.data,
                                         y.ctypes.data) == 0
            np.testing.assert_allclose(y, a @ b + bias, rtol=1e-4, atol=1e-4)
    finally:
        lib.wb_dnnl_context_free(ctx)
