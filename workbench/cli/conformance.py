"""``conformance``: the ONNX backend node suite through the workbench backend."""
import datetime
import json
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
    p.add_argument("--save-baseline", action="store_true",
                   help=f"write the result to {BASELINE.relative_to(BASELINE.parents[1])}")
    p.add_argument("--against-baseline", action="store_true",
                   help="exit 1 if a case that passed in the baseline fails now")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    from workbench.conformance import report, runner, suite
    with progress.phase("generate the ONNX node suite"):
        ops = suite.node_cases()
    names = _select(ops, args)
    with progress.phase(f"run {len(names)} cases", total=len(names)) as step:
        results = runner.run_suite(names, workers=max(1, args.workers), timeout=args.timeout,
                                   on_result=lambda n, r, done, total: step(done, n))
    for name, result in results.items():
        result["op"] = ops[name]
    summary = report.summarize(results, {n: ops[n] for n in names})
    summary["cases_total"] = len(ops) if not (args.ops or args.cases) else len(names)
    print(report.table(summary))
    failed = [(n, r["reason"]) for n, r in sorted(results.items()) if r["status"] == "failed"]
    for name, reason in failed[:60]:
        print(f"FAILED {name}: {reason}")
    code = 0
    if args.against_baseline:
        baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
        lost = report.regressions(results, baseline)
        for name in lost:
            print(f"REGRESSION {name} passed in the baseline: {results[name]['reason']}")
        code = 1 if lost else 0
    if args.save_baseline:
        meta = {"date": datetime.date.today().isoformat(), "machine": platform.machine(),
                "processor_count": __import__("os").cpu_count(),
                "command": "python app.py conformance --save-baseline"}
        report.write_baseline(BASELINE, results, summary, meta)
    if args.json:
        emit_json({k: v for k, v in summary.items() if k not in ("per_op", "passing_op_types")})
    return code


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
