"""A GEMM whose row count is a symbol takes oneDNN or the BLAS per call (issue 30): the
libraries are timed at several row counts, the node keeps the row ranges where oneDNN won,
and one build runs the library below the crossover and the BLAS above it, equal to
onnxruntime on both sides. The plan is the same at every size the session is checked at."""
import workbench
from fusion_helpers import F32, graph_model, node, rand
from onnx_helpers import onnx_ops
from workbench import transformation_api as transform
from workbench.analysis.sizes import at_sizes
from workbench.build import gemm_timing
from workbench.ops.matmul_onednn import library_condition


def rows_model():
    """A MatMul with a bias Add after it (a GemmEpilogue under ``auto``) and a Gemm with
    a full C, both on ``seq`` rows."""
    nodes = [node("MatMul", ["x", "w1"], ["m1"]), node("Add", ["m1", "b1"], ["y1"]),
             node("Gemm", ["x", "w2", "c2"], ["y2"], transB=1)]
    inits = {"w1": rand(16, 24, seed=1), "b1": rand(24, seed=2), "w2": rand(12, 16, seed=3),
             "c2": rand(12, seed=4)}
    return graph_model(nodes, {"x": (["seq", 16], F32)}, ["y1", "y2"], inits)


def small_rows_faster(m, k, n, b_transposed):
    """oneDNN faster up to 16 rows, slower from 64 on (the crossover measured here)."""
    return {"onednn": 1.0, "blas": 2.0} if m <= 16 else {"onednn": 2.0, "blas": 1.0}


def test_the_ranges_follow_the_probes(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", small_rows_faster)
    ranges, times = gemm_timing.rows_where_faster(16, 24, False)
    assert ranges == [(0, 32)] and sorted(times) == list(gemm_timing.PROBE_ROWS)
    monkeypatch.setattr(gemm_timing, "gemm_times",
                        lambda m, k, n, t: {"onednn": 1.0 if m in (4, 1024) else 3.0,
                                            "blas": 2.0})
    assert gemm_timing.rows_where_faster(16, 24, False)[0] == [(2, 8), (512, None)]
    cond = library_condition("seq", [2, 8, 512, 0])
    assert cond == "((seq) >= 2 and (seq) < 8) or ((seq) >= 512)"
    assert [eval(cond, {"seq": s}) for s in (1, 2, 7, 8, 511, 512, 4096)] == [
        False, True, True, False, False, True, True]


def test_one_build_runs_the_library_below_the_crossover_and_the_blas_above(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", small_rows_faster)
    ws = workbench.open(rows_model(), symbolic=["seq"], input_shapes={"seq": 128})
    t = transform.get("GemmOnOneDNN")
    plans = []
    for seq in (128, 3):   # the session's size does not change the plan
        with at_sizes({"seq": seq}):
            plans.append(sorted(m.description for m in
                                transform.find_matches(t, ws.sdfg, ws.model.weights)))
    assert plans[0] == plans[1] and len(plans[0]) == 2, plans
    assert all("where seq < 32" in d and "1024 rows 2.000 ms, BLAS 1.000 ms" in d
               for d in plans[0]), plans[0]
    ws.optimize("auto")
    gemms = [n for n in onnx_ops(ws.sdfg) if n.implementation == "onednn"]
    assert len(gemms) == 2 and all(n.library_rows == [0, 32] for n in gemms), \
        [(n.onnx_name, n.implementation, n.library_rows) for n in onnx_ops(ws.sdfg)]
    code = ws.sdfg.generate_code()[0].clean_code
    assert "wb_dnnl_matmul_at" in code and "cblas_sgemm" in code and "(seq < 32)" in code
    builds = set()
    for seq in (1, 31, 32, 100):
        report = ws.verify(sizes={"seq": seq})
        assert report.match, report.text()
        builds.add(report.timings["build_s"])
    assert len(builds) == 1


def test_no_row_count_faster_is_refused_with_the_times(monkeypatch):
    monkeypatch.setattr(gemm_timing, "gemm_times", lambda m, k, n, t: {"onednn": 2.0,
                                                                       "blas": 1.0})
    ws = workbench.open(rows_model(), symbolic=["seq"], input_shapes={"seq": 8})
    t = transform.get("GemmOnOneDNN")
    assert transform.find_matches(t, ws.sdfg, ws.model.weights) == []
    reasons = [r.reason for r in transform.refusals(t, ws.sdfg, ws.model.weights)]
    assert any("faster at none of the row counts" in r and "1 rows 2.000 ms" in r
               for r in reasons), reasons
