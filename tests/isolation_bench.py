"""What running programs in the worker process costs: the same calls, in-process and isolated.

    python -m tests.isolation_bench [--threads N] [--rounds R] [MODEL ...]   (default bert-layer mbconv)

Per model, in rounds that alternate the two modes (3 untimed hand-over calls
start each block: the other mode's OpenMP threads may still be spinning):
``run`` is ``ws.run(inputs)`` as a user calls it (argument checks, build
lookup, copies), ``call`` one call of the built program from the session
(``Session._call``: for the worker, inputs into shared memory, a round trip,
outputs back), ``timed`` the program alone as ``profile`` times it (in the
worker: around the C call there). Medians and minima in ms. A measurement,
not a test.
"""
import argparse
import json
import statistics
import time


def measure(model: str, rounds: int) -> dict:
    import workbench
    ws = workbench.open(model)
    inputs = ws.random_inputs()
    build = ws.build()
    args, _ = ws.call_args(build, inputs)
    samples = {f"{what}_{mode}": [] for what in ("run", "call", "timed")
               for mode in ("in_process", "worker")}
    for mode in ("worker", "in_process"):   # load both before timing
        ws.isolated = mode == "worker"
        ws.run(inputs)
    for _ in range(rounds):
        for mode in ("worker", "in_process"):
            ws.isolated = mode == "worker"
            for _ in range(3):
                ws._call(build, args)
            for _ in range(10):
                t = time.perf_counter()
                ws._call(build, args)
                samples[f"call_{mode}"].append((time.perf_counter() - t) * 1e3)
            for _ in range(3):
                t = time.perf_counter()
                ws.run(inputs)
                samples[f"run_{mode}"].append((time.perf_counter() - t) * 1e3)
            samples[f"timed_{mode}"] += ws._call(build, args, repeat=10, warmup=3)
    ws.isolated = True
    return {"model": model,
            "median_ms": {k: round(statistics.median(v), 3) for k, v in samples.items()},
            "min_ms": {k: round(min(v), 3) for k, v in samples.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["bert-layer", "mbconv"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    from workbench.runtime.threads import set_threads
    set_threads(args.threads)
    for model in args.models:
        print(json.dumps({**measure(model, args.rounds), "threads": args.threads}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
