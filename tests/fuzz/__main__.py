"""``python -m tests.fuzz --count 500 --seed 0 [--jobs N] [--timeout S] [--json]``
``python -m tests.fuzz --steps [--models A,B] [--count N] [--seed S] [--json]`` (steps.py)

Exits 1 when any mutant made the CLI crash, print a traceback, hang, blow
past its memory limit or print more than one error paragraph.
"""
import argparse
import json
import sys
import time

from tests.fuzz.mutations import MUTATIONS
from tests.fuzz.runner import (BAD, Settings, failures, format_table, run_all, tally,
                               to_json)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=(
        "Write broken versions of the bundled models and run app.py info (and verify) on "
        "each; exit 1 if any run crashes, prints a traceback, hangs or blows up."))
    p.add_argument("--count", type=int, help="number of mutants (500) or step sequences (20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="mutants run at the same time")
    p.add_argument("--timeout", type=float, help="seconds per command before it counts as a "
                   "hang (120; --steps: 600 without progress)")
    p.add_argument("--address-space", type=float, default=4.0,
                   help="RLIMIT_AS of each command, GiB")
    p.add_argument("--budget", default="1G", help="WORKBENCH_MEMORY_BUDGET given to the CLI")
    p.add_argument("--verify-fraction", type=float, default=1.0,
                   help="share of the mutants info accepted that verify also runs on")
    p.add_argument("--kinds", help="comma-separated mutation kinds (default: all of "
                                   + ", ".join(MUTATIONS) + ")")
    p.add_argument("--keep-failures", metavar="DIR", help="copy failing mutants here")
    p.add_argument("--json", action="store_true", help="one JSON object as the last line")
    p.add_argument("--verbose", action="store_true", help="a line per mutant on stderr")
    p.add_argument("--steps", action="store_true", help="fuzz random sequences of listed "
                   "transformation steps instead (tests/fuzz/steps.py)")
    p.add_argument("--models", help="--steps: comma-separated models (default: the zoo's)")
    p.add_argument("--train", action="store_true", help="--steps: on each model's training "
                   "program (default loss, SGD) instead of the model")
    p.add_argument("--out", help="--steps: folder for journals and failing recipes")
    p.add_argument("--no-bisect", action="store_true",
                   help="--steps: do not look for the shortest failing prefix")
    args = p.parse_args(argv)
    if args.steps:
        from tests.fuzz import steps
        args.count, args.timeout = args.count or 20, args.timeout or 600.0
        return steps.main(args)
    args.count, args.timeout = args.count or 500, args.timeout or 120.0
    kinds = args.kinds.split(",") if args.kinds else None
    unknown = [k for k in kinds or () if k not in MUTATIONS]
    if unknown:
        p.error(f"unknown mutation kind(s) {', '.join(unknown)}")
    settings = Settings(timeout_s=args.timeout, address_space=int(args.address_space * (1 << 30)),
                        memory_budget=args.budget, verify_fraction=args.verify_fraction,
                        keep_failures=args.keep_failures)
    t0 = time.perf_counter()
    done = [0]

    def report(result):
        done[0] += 1
        if args.verbose:
            for run in result.runs:
                print(f"#{result.index} {result.kind} on {result.base} ({result.note}): "
                      f"{run.command} {run.outcome} exit {run.code} {run.seconds}s "
                      f"{run.message[-200:]!r}", file=sys.stderr, flush=True)
        if result.outcome in BAD or done[0] % 25 == 0:
            line = f"[{time.perf_counter() - t0:7.1f}s] {done[0]}/{args.count}"
            if result.outcome in BAD:
                run = next(r for r in result.runs if r.outcome in BAD)
                line += (f" #{result.index} {result.kind} on {result.base} ({result.note}): "
                         f"{run.command} {run.outcome}, exit {run.code}: "
                         f"{run.message[-300:]!r}")
            print(line, file=sys.stderr, flush=True)

    results = run_all(args.count, args.seed, settings, jobs=args.jobs, kinds=kinds,
                      on_result=report)
    wall = time.perf_counter() - t0
    bad = failures(results)
    print(format_table(results))
    runs = sum(len(r.runs) for r in results)
    print(f"{len(results)} mutants, {runs} commands, {len(bad)} failing, "
          f"wall {wall:.0f}s (seed {args.seed}, jobs {args.jobs})")
    for r in bad:
        run = next(x for x in r.runs if x.outcome in BAD)
        print(f"  #{r.index} {r.kind} on {r.base} ({r.note}): {run.command} {run.outcome} "
              f"exit {run.code}\n    {run.message[-500:]}")
    if args.json:
        print(json.dumps({"count": len(results), "failing": len(bad), "wall_s": round(wall, 1),
                          "table": tally(results), "results": to_json(results)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
