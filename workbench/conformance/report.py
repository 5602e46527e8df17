"""Per-op table and totals of a suite run; comparison with a baseline.

A result is ``{status, reason, seconds, op}`` per case name. The per-op
table names each op type's main reason (the most frequent one among its
cases that did not pass); ``diff`` says per op type which cases changed
status against the baseline; ``merge`` lays a partial run over the
baseline so it can be refreshed op by op.
"""
import json
import os
import re
from collections import Counter, defaultdict

STATUSES = ("passed", "failed", "skipped")


def summarize(results: dict, ops: dict) -> dict:
    """Totals (the JSON the CLI prints last) plus the per-op table."""
    per_op = defaultdict(lambda: {"cases": 0, "passed": 0, "failed": 0, "skipped": 0})
    reasons = defaultdict(Counter)
    for name, result in results.items():
        op = ops.get(name, "?")
        row = per_op[op]
        row["cases"] += 1
        row[result["status"]] += 1
        if result["status"] != "passed":
            reasons[op][(result["status"], reason_key(result.get("reason", "")))] += 1
    for op, counts in reasons.items():
        (status, reason), n = counts.most_common(1)[0]
        per_op[op]["reason"] = f"{n} {status}: {reason}"
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


# Where a reason goes on to name one case's tensor, node or state: cut there, so the
# cases of one op type that fail for one cause count as one reason.
_CASE_DETAIL = re.compile(r"(, e\.g\. |: e\.g\. | \(at state | at node |; first mismatch).*$")


def reason_key(reason: str, width: int = 90) -> str:
    """``reason`` without what names one case, at most ``width`` characters."""
    key = _CASE_DETAIL.sub("", reason or "").strip() or "(no reason given)"
    return key if len(key) <= width else key[:width - 3] + "..."


def table(summary: dict) -> str:
    """The per-op table: counts, and the main reason where a case did not pass."""
    lines = [f"{'op type':<28}{'cases':>6}{'passed':>8}{'failed':>8}{'skipped':>9}  main reason"]
    for op, r in summary["per_op"].items():
        lines.append(f"{op:<28}{r['cases']:>6}{r['passed']:>8}{r['failed']:>8}{r['skipped']:>9}"
                     f"  {r.get('reason', '')}".rstrip())
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


def diff(results: dict, baseline: dict, ops: dict) -> dict:
    """Per op type with a case whose status changed: counts before and after
    (over the cases run) and the changed cases.

    ``{op: {"before": {status: n}, "after": {status: n}, "changed": [{"case",
    "before", "after", "reason"}]}}``; a case the baseline lacks counts as
    ``new`` before.
    """
    before_all = baseline.get("results", {})
    out = {}
    for name in sorted(results):
        op = ops.get(name, results[name].get("op", "?"))
        row = out.setdefault(op, {"before": Counter(), "after": Counter(), "changed": []})
        old = before_all.get(name, {}).get("status", "new")
        new = results[name]["status"]
        row["before"][old] += 1
        row["after"][new] += 1
        if old != new:
            row["changed"].append({"case": name, "before": old, "after": new,
                                   "reason": results[name].get("reason", "")})
    return {op: {"before": dict(r["before"]), "after": dict(r["after"]), "changed": r["changed"]}
            for op, r in sorted(out.items()) if r["changed"]}


def diff_text(changes: dict) -> str:
    """``diff`` for people: per op type, counts before -> after, then the newly
    passing and the newly failing cases (with the reason) and other changes."""
    if not changes:
        return "no case changed status against the baseline"

    def counts(c):
        return "/".join(str(c.get(s, 0)) for s in STATUSES)

    lines = ["changes against the baseline (passed/failed/skipped over the cases run):"]
    for op, r in changes.items():
        lines.append(f"{op}: {counts(r['before'])} -> {counts(r['after'])}")
        groups = (("newly passing", lambda c: c["after"] == "passed"),
                  ("newly failing", lambda c: c["after"] == "failed"),
                  ("now skipped", lambda c: c["after"] == "skipped"))
        for title, test in groups:
            cases = [c for c in r["changed"] if test(c)]
            if cases:
                lines.append(f"  {title} ({len(cases)}):")
                lines.extend(f"    {c['case']} (was {c['before']})"
                             + (f": {c['reason']}" if c["reason"] else "") for c in cases)
    return "\n".join(lines)


def merge(baseline: dict, results: dict, ops: dict) -> dict:
    """The baseline's results with the cases in ``results`` replaced, kept to the
    cases the suite has now (``ops``: every case name -> its op type)."""
    merged = {n: r for n, r in baseline.get("results", {}).items() if n in ops}
    merged.update(results)
    return {n: {**r, "op": ops[n]} for n, r in sorted(merged.items())}


def write_baseline(path, results: dict, summary: dict, meta: dict) -> None:
    data = {**meta, "summary": {k: v for k, v in summary.items() if k != "per_op"},
            "per_op": summary["per_op"], "results": dict(sorted(results.items()))}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
