"""Per-op table and totals of a suite run; comparison with a baseline."""
import json
from collections import defaultdict


def summarize(results: dict, ops: dict) -> dict:
    """Totals (the JSON the CLI prints last) plus the per-op table."""
    per_op = defaultdict(lambda: {"cases": 0, "passed": 0, "failed": 0, "skipped": 0})
    for name, result in results.items():
        row = per_op[ops.get(name, "?")]
        row["cases"] += 1
        row[result["status"]] += 1
    passed = sum(r["passed"] for r in per_op.values())
    failed = sum(r["failed"] for r in per_op.values())
    skipped = sum(r["skipped"] for r in per_op.values())
    passing = sorted(op for op, r in per_op.items() if r["passed"] and not r["failed"])
    return {
        "cases_total": len(ops), "cases_run": passed + failed, "passed": passed,
        "failed": failed, "skipped": skipped, "op_types_passing": len(passing),
        "pass_rate": round(passed / (passed + failed), 4) if passed + failed else 0.0,
        "per_op": dict(sorted(per_op.items())),
        "passing_op_types": passing,
    }


def table(summary: dict) -> str:
    lines = [f"{'op type':<28}{'cases':>6}{'passed':>8}{'failed':>8}{'skipped':>9}"]
    for op, r in summary["per_op"].items():
        lines.append(f"{op:<28}{r['cases']:>6}{r['passed']:>8}{r['failed']:>8}{r['skipped']:>9}")
    lines.append(f"{'total':<28}{summary['passed'] + summary['failed'] + summary['skipped']:>6}"
                 f"{summary['passed']:>8}{summary['failed']:>8}{summary['skipped']:>9}")
    lines.append(f"pass rate {summary['pass_rate']:.4f} (passed / (passed + failed)); "
                 f"{summary['op_types_passing']} op types pass all their runnable cases")
    return "\n".join(lines)


def regressions(results: dict, baseline: dict) -> list:
    """Cases that passed in the baseline and do not pass now."""
    before = baseline.get("results", {})
    return sorted(n for n, r in results.items()
                  if before.get(n, {}).get("status") == "passed" and r["status"] != "passed")


def write_baseline(path, results: dict, summary: dict, meta: dict) -> None:
    data = {**meta, "summary": {k: v for k, v in summary.items() if k != "per_op"},
            "per_op": summary["per_op"], "results": dict(sorted(results.items()))}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    import os
    os.replace(tmp, path)
