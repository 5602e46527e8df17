"""The op types of issue 17 on the node suite's own cases (losses, BitShift, CumProd,
CenterCropPad, DFT, AffineGrid, GridSample, Col2Im, BitCast, DeformConv), and the
conformance report: per-op reasons, ``--diff`` and ``--update-baseline``.

The ops are also checked against onnxruntime by ``test_ops.py`` (their rows
are in ``op_cases/losses_bits.py``); here the node suite's expected outputs
judge the cases onnxruntime does not cover the same way (shift amounts out
of range, labels equal to a negative ``ignore_index``, the log_prob output).
"""
import json

from test_cli import app, assert_clean_error, last_json
from workbench.conformance import report, runner

# Each checks something the others do not: an edge of the spec or a layout.
NODE_CASES = [
    "test_nllloss_NCd1_mean_weight_negative_ii_cpu",
    "test_nllloss_NCd1d2_with_weight_reduction_sum_ii_cpu",
    "test_nllloss_NCd1d2d3_sum_weight_high_ii_cpu",
    "test_nllloss_NCd1d2d3d4d5_none_no_weight_cpu",
    "test_sce_NCd1d2d3_none_no_weight_negative_ii_log_prob_cpu",
    "test_sce_mean_weight_ii_4d_cpu",
    "test_sce_mean_no_weight_ii_log_prob_expanded_cpu",
    "test_bitshift_left_int8_overflow_cpu",
    "test_bitshift_right_int8_negative_input_cpu",
    "test_bitshift_right_int32_shift_ge_width_cpu",
    "test_bitshift_left_int32_negative_shift_cpu",
    "test_bitshift_right_uint64_cpu",
    "test_cumprod_1d_reverse_exclusive_cpu",
    "test_cumprod_2d_int32_cpu",
    "test_cumprod_2d_negative_axis_cpu",
    "test_center_crop_pad_crop_and_pad_cpu",
    "test_center_crop_pad_crop_negative_axes_hwc_cpu",
    "test_dft_irfft_cpu",
    "test_dft_inverse_opset19_cpu",
    "test_dft_rfft_cpu",
    "test_affine_grid_3d_cpu",
    "test_affine_grid_2d_align_corners_cpu",
    "test_gridsample_bicubic_align_corners_1_additional_1_cpu",
    "test_gridsample_reflection_padding_cpu",
    "test_gridsample_volumetric_bilinear_align_corners_0_cpu",
    "test_col2im_5d_cpu",
    "test_col2im_pads_cpu",
    "test_bitcast_bool_to_uint8_cpu",
    "test_bitcast_scalar_float32_to_int32_cpu",
    "test_deform_conv_with_mask_bias_cpu",
    "test_deform_conv_with_multiple_offset_groups_cpu",
]


def test_node_suite_cases_pass():
    results = runner.run_suite(NODE_CASES, workers=1, timeout=300)
    bad = {n: (r["status"], r["reason"]) for n, r in results.items() if r["status"] != "passed"}
    assert not bad, bad


def _result(status, reason="", op="Relu"):
    return {"status": status, "reason": reason, "seconds": 0.1, "op": op}


def test_reason_key_groups_the_cases_of_one_cause():
    a = "unsupported: 1 tensor(s) have no static shape after inference and folding, e.g. t_pad"
    b = "unsupported: 1 tensor(s) have no static shape after inference and folding, e.g. u_pad"
    assert report.reason_key(a) == report.reason_key(b) == a.split(", e.g.")[0]
    view = "InvalidSDFGNodeError: Ambiguous or invalid edge to/from a View access node"
    assert report.reason_key(f"{view} (at state main, node data_1)") == view
    assert len(report.reason_key("x" * 500)) == 90
    assert report.reason_key("") == "(no reason given)"


def test_summary_names_the_main_reason_per_op():
    results = {"a": _result("skipped", "unsupported op types: Foo", "Foo"),
               "b": _result("skipped", "unsupported op types: Foo", "Foo"),
               "c": _result("failed", "AssertionError: mismatch", "Foo"),
               "d": _result("passed", op="Bar")}
    summary = report.summarize(results, {n: r["op"] for n, r in results.items()})
    assert summary["per_op"]["Foo"]["reason"] == "2 skipped: unsupported op types: Foo"
    assert "reason" not in summary["per_op"]["Bar"]
    text = report.table(summary)
    assert "main reason" in text.splitlines()[0]
    assert any(line.startswith("Foo") and line.endswith("2 skipped: unsupported op types: Foo")
               for line in text.splitlines())
    json.dumps(summary)


def test_diff_and_merge_against_a_baseline():
    ops = {"a": "Foo", "b": "Foo", "c": "Bar", "d": "Bar", "e": "Baz"}
    baseline = {"results": {"a": _result("skipped", "unsupported op types: Foo", "Foo"),
                            "b": _result("passed", op="Foo"),
                            "c": _result("passed", op="Bar"),
                            "d": _result("failed", "old", "Bar"),
                            "gone": _result("passed", op="Old")}}
    now = {"a": _result("passed", op="Foo"), "b": _result("failed", "AssertionError: x", "Foo"),
           "c": _result("passed", op="Bar"), "e": _result("skipped", "why", "Baz")}
    changes = report.diff(now, baseline, ops)
    assert set(changes) == {"Foo", "Baz"}  # Bar's case ran and did not change
    assert changes["Foo"]["before"] == {"skipped": 1, "passed": 1}
    assert changes["Foo"]["after"] == {"passed": 1, "failed": 1}
    assert {(c["case"], c["before"], c["after"]) for c in changes["Foo"]["changed"]} == \
        {("a", "skipped", "passed"), ("b", "passed", "failed")}
    assert changes["Baz"]["changed"][0]["before"] == "new"
    text = report.diff_text(changes)
    assert "Foo: 1/0/1 -> 1/1/0" in text
    assert "newly passing (1):\n    a (was skipped)" in text
    assert "newly failing (1):\n    b (was passed): AssertionError: x" in text
    assert report.diff_text({}) == "no case changed status against the baseline"

    merged = report.merge(baseline, now, ops)
    assert sorted(merged) == ["a", "b", "c", "d", "e"]  # 'gone' left the suite
    assert merged["d"]["status"] == "failed" and merged["d"]["reason"] == "old"  # not run: kept
    assert merged["b"]["status"] == "failed"
    summary = report.summarize(merged, ops)
    assert (summary["passed"], summary["failed"], summary["skipped"]) == (2, 2, 1)


def _fake_baseline(path, statuses: dict):
    """A baseline of the real suite's shape: every case 'skipped' except ``statuses``."""
    from workbench.conformance import suite
    ops = suite.node_cases()
    results = {n: {**_result("skipped", "unsupported op types: X", ops[n]),
                   **({"status": statuses[n], "reason": ""} if n in statuses else {})}
               for n in ops}
    summary = report.summarize(results, ops)
    report.write_baseline(path, results, summary, {"date": "2000-01-01", "command": "test"})
    return ops


def test_cli_diff_and_update_baseline(tmp_path):
    base = tmp_path / "baseline.json"
    ran = ["test_cumprod_1d_cpu", "test_bitshift_right_uint8_cpu"]
    _fake_baseline(base, {"test_abs_cpu": "passed", "test_cumprod_1d_cpu": "failed"})
    before = json.loads(base.read_text())

    proc = app("conformance", "--cases", "|".join(f"^{n}$" for n in ran), "--workers", "1",
               "--diff", "--update-baseline", "--against-baseline", "--baseline", str(base),
               "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = last_json(proc)
    assert out["passed"] == 2
    assert {c["case"]: (c["before"], c["after"]) for r in out["changes"].values()
            for c in r["changed"]} == {"test_cumprod_1d_cpu": ("failed", "passed"),
                                       "test_bitshift_right_uint8_cpu": ("skipped", "passed")}
    assert "newly passing (1):\n    test_cumprod_1d_cpu (was failed)" in proc.stdout

    after = json.loads(base.read_text())
    changed = {n for n in after["results"] if after["results"][n] != before["results"][n]}
    assert changed == set(ran)
    assert after["summary"]["passed"] == before["summary"]["passed"] + 2
    assert after["summary"]["failed"] == before["summary"]["failed"] - 1
    assert after["summary"]["cases_total"] == before["summary"]["cases_total"]
    assert after["per_op"]["CumProd"]["passed"] == 1
    assert after["date"] == "2000-01-01" and after["updates"][0]["cases"] == 2


def test_cli_refuses_a_partial_save_and_a_missing_baseline(tmp_path):
    proc = app("conformance", "--ops", "Relu", "--save-baseline",
               "--baseline", str(tmp_path / "b.json"))
    assert_clean_error(proc, 2, "--update-baseline")
    assert not (tmp_path / "b.json").exists()
    proc = app("conformance", "--ops", "Relu", "--update-baseline",
               "--baseline", str(tmp_path / "missing.json"))
    assert_clean_error(proc, 2, "no baseline")
    (tmp_path / "bad.json").write_text("[1, 2]")
    proc = app("conformance", "--ops", "Relu", "--diff", "--baseline", str(tmp_path / "bad.json"))
    assert_clean_error(proc, 2, "is not a baseline")
