"""Run time of a program built by units against the same SDFG built as one program.

    python -m tests.units_vs_whole_bench [--rounds 3] [--repeat 20] [--json OUT] [MODEL ...]
        (default: every small zoo model; zoo:NAME-full for a full-size export)

Per model: open, the ``auto`` recipe, both builds, then ``rounds`` interleaved
``bench`` calls (``--baseline whole``: blocks of calls alternating between the
two programs). Printed: each program's median of the round medians, and the
ratio units / whole as the median of the rounds with its range. A
measurement, not a test.
"""
import argparse
import json
import statistics
import time


def measure(model: str, rounds: int, repeat: int, threads: int) -> dict:
    import workbench
    from sdfg_models import zoo
    from workbench.runtime.benchmark import bench
    entry = zoo.get(model)
    ws = workbench.open(str(entry.path()), input_shapes=entry.shapes or None, name=entry.name)
    ws.optimize("auto")
    runs = [bench(ws, ("whole",), repeat, 3, threads, "auto") for _ in range(rounds)]
    units = [r.median("workbench") for r in runs]
    whole = [r.median("whole") for r in runs]
    ratios = [u / w for u, w in zip(units, whole)]
    build = ws.build()
    ws.close()
    return {"model": model, "units": build.units, "units_ms": statistics.median(units),
            "whole_ms": statistics.median(whole), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main(argv=None) -> int:
    from sdfg_models import zoo
    from workbench.runtime.zoo_bench import load_average, machine_info, machine_line
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    models = [m.removeprefix(zoo.PREFIX) for m in args.models] or zoo.names(full=False)
    print(machine_line(machine_info(args.threads)))
    print(f"{'model':22s} {'units ms':>10s} {'whole ms':>10s} {'units/whole':>12s}  range")
    rows = []
    for model in models:
        t = time.perf_counter()
        try:
            row = measure(model, args.rounds, args.repeat, args.threads)
        except Exception as e:   # one model's failure is its row
            print(f"{model:22s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append({"model": model, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(row)
        print(f"{model:22s} {row['units_ms']:10.3f} {row['whole_ms']:10.3f} {row['ratio']:12.3f}"
              f"  {row['ratio_min']:.3f}-{row['ratio_max']:.3f}  ({time.perf_counter() - t:.0f} s,"
              f" load {load_average()})", flush=True)
    good = [r["ratio"] for r in rows if "ratio" in r]
    if good:
        print(f"geometric mean units/whole over {len(good)} models: "
              f"{statistics.geometric_mean(good):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
