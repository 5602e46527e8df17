"""``conformance``: the ONNX backend node suite through the workbench backend."""
import datetime
import json
import os
import platform
import re
from pathlib import Path

from workbench.cli.common import emit_json
from workbench.errors import BadInputError

BASELINE = Path(__file__).resolve().parents[2] / "tests" / "conformance_baseline.json"


def register(sub):
    p = sub.add_parser("conformance", help="run the ONNX node test suite through the backend")
    p.add_argument("--ops", help="only these op types, comma-separated (e.g. Conv,Relu)")
    p.add_argument("--cases", help="only case names matching this regular expression")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    where = BASELINE.relative_to(BASELINE.parents[1])
    p.add_argument("--save-baseline", action="store_true",
                   help=f"write the result of a full run to {where}")
    p.add_argument("--update-baseline", action="store_true",
                   help=f"merge the cases run into {where}: they replace theirs, the others "
                        "stay, the totals and the per-op table are recomputed")
    p.add_argument("--against-baseline", action="store_true",
                   help="exit 1 if a case that passed in the baseline fails now")
    p.add_argument("--diff", action="store_true",
                   help="per op type, the cases whose status changed against the baseline: "
                        "newly passing, newly failing, with the reasons")
    p.add_argument("--baseline", type=Path, default=BASELINE,
                   help=f"the baseline file the options above read and write (default {where})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    from workbench.conformance import report, runner, suite
    partial = bool(args.ops or args.cases)
    if args.save_baseline and (partial or args.update_baseline):
        raise BadInputError("--save-baseline writes a full run only (no --ops, --cases or "
                            "--update-baseline); use --update-baseline to merge a partial run")
    baseline = None
    if args.against_baseline or args.diff or args.update_baseline:
        baseline = _read_baseline(args.baseline, required=args.update_baseline)
    with progress.phase("generate the ONNX node suite"):
        ops = suite.node_cases()
    names = _select(ops, args)
    with progress.phase(f"run {len(names)} cases", total=len(names)) as step:
        results = runner.run_suite(names, workers=max(1, args.workers), timeout=args.timeout,
                                   on_result=lambda n, r, done, total: step(done, n))
    for name, result in results.items():
        result["op"] = ops[name]
    summary = report.summarize(results, {n: ops[n] for n in names})
    summary["cases_total"] = len(ops) if not partial else len(names)
    print(report.table(summary))
    failed = [(n, r["reason"]) for n, r in sorted(results.items()) if r["status"] == "failed"]
    for name, reason in failed[:60]:
        print(f"FAILED {name}: {reason}")
    code = 0
    changes = None
    if args.diff:
        changes = report.diff(results, baseline, ops)
        print(report.diff_text(changes))
    if args.against_baseline:
        lost = report.regressions(results, baseline)
        for name in lost:
            print(f"REGRESSION {name} passed in the baseline: {results[name]['reason']}")
        code = 1 if lost else 0
    if args.save_baseline:
        meta = {"date": _today(), "machine": platform.machine(),
                "processor_count": os.cpu_count(),
                "command": "python app.py conformance --save-baseline"}
        report.write_baseline(args.baseline, results, summary, meta)
    if args.update_baseline:
        _update_baseline(baseline, results, ops, args)
    if args.json:
        out = {k: v for k, v in summary.items() if k not in ("per_op", "passing_op_types")}
        if changes is not None:
            out["changes"] = changes
        emit_json(out)
    return code


def _today() -> str:
    return datetime.date.today().isoformat()


def _read_baseline(path: Path, required: bool) -> dict:
    if not path.exists():
        if required:
            raise BadInputError(f"no baseline at {path} to update: write one with "
                                "--save-baseline (a full run)")
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInputError(f"{path} is not a baseline (not JSON: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
        raise BadInputError(f"{path} is not a baseline (no 'results' object)")
    return data


def _update_baseline(baseline: dict, results: dict, ops: dict, args) -> None:
    """Lay the cases run over the baseline and write it with recomputed totals;
    the baseline's header keeps its full run and lists each update after it."""
    from workbench.conformance import report
    merged = report.merge(baseline, results, ops)
    summary = report.summarize(merged, ops)
    meta = {k: v for k, v in baseline.items() if k not in ("summary", "per_op", "results")}
    selection = ", ".join(f"--{k} {v}" for k, v in (("ops", args.ops), ("cases", args.cases))
                          if v) or "all cases"
    meta["updates"] = list(meta.get("updates", [])) + [
        {"date": _today(), "selection": selection, "cases": len(results),
         "command": "python app.py conformance --update-baseline"}]
    report.write_baseline(args.baseline, merged, summary, meta)
    print(f"updated {len(results)} case(s) of {args.baseline}: {summary['passed']} passed, "
          f"{summary['failed']} failed, {summary['skipped']} skipped of {len(merged)}")


def _select(ops: dict, args) -> list:
    names = list(ops)
    if args.ops:
        wanted = {o.strip() for o in args.ops.split(",") if o.strip()}
        unknown = sorted(wanted - set(ops.values()))
        if unknown:
            raise BadInputError(f"--ops names op types the suite does not test: "
                                f"{', '.join(unknown)}")
        names = [n for n in names if ops[n] in wanted]
    if args.cases:
        try:
            pattern = re.compile(args.cases)
        except re.error as e:
            raise BadInputError(f"--cases is not a valid regular expression: {e}") from None
        names = [n for n in names if pattern.search(n)]
    return names
