"""A fixed sample of the ONNX node suite: no case that passed in the baseline may fail.

The full suite is ``python app.py conformance`` (about 30 minutes); this
runs one baseline-passing case per op type, chosen deterministically.
"""
import json
from pathlib import Path

from workbench.conformance import runner

BASELINE = Path(__file__).with_name("conformance_baseline.json")
PER_OP = 1


def sample(baseline: dict) -> list:
    by_op = {}
    for name, result in sorted(baseline["results"].items()):
        op = result.get("op")
        if result["status"] == "passed" and len(by_op.setdefault(op, [])) < PER_OP:
            by_op[op].append(name)
    return sorted(n for names in by_op.values() for n in names)


def test_baseline_is_committed_and_meets_the_bar():
    baseline = json.loads(BASELINE.read_text())
    summary = baseline["summary"]
    assert summary["cases_total"] >= 1800  # a full run, not a partial one
    assert summary["pass_rate"] == round(summary["passed"] / (summary["passed"] + summary["failed"]), 4)


def test_sample_has_no_regressions():
    baseline = json.loads(BASELINE.read_text())
    names = sample(baseline)
    # one worker: the suite shares the cores with the other test process already
    results = runner.run_suite(names, workers=1, timeout=300)
    lost = {n: results[n]["reason"] for n in names if results[n]["status"] != "passed"}
    assert not lost, f"cases that passed in the baseline now fail: {lost}"
