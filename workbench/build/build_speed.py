"""Build-time benchmark: first build and rebuild, with and without fast builds.

    PYTHONPATH=. .venv/bin/python -m workbench.build.build_speed [--repeats 3]

Cases: a tiny map SDFG (compiled with ``compile_sdfg``; the rebuild changes a
constant in its tasklet) and the bundled ``mlp`` model (through a Session;
the rebuild toggles one Gemm between its "blas" and "pure" expansions).
"first" is a new build folder (CMake configures), "rebuild" is the same
folder after a change. The two modes (``WORKBENCH_FAST_BUILD`` 1 and 0) run
interleaved so that machine noise hits both alike; the table shows medians.
The precompiled header is made before timing starts: it is a once-per-cache
cost, printed on its own.
"""
import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dace

from workbench.build import compile_sdfg, fast_build_enabled, release
from workbench.build.settings import apply_build_settings, cache_dir

MODES = {"fast": "1", "default": "0"}


def small_sdfg(factor: float, n: int = 1024) -> dace.SDFG:
    """y = x * factor + 1 as one map; ``factor`` is the trivial change."""
    sdfg = dace.SDFG("wb_bench_small")
    sdfg.add_array("x", [n], dace.float64)
    sdfg.add_array("y", [n], dace.float64)
    state = sdfg.add_state()
    state.add_mapped_tasklet("scale", {"i": f"0:{n}"}, {"a": dace.Memlet("x[i]")},
                             f"b = a * {factor!r} + 1.0", {"b": dace.Memlet("y[i]")},
                             external_edges=True)
    return sdfg


def bench_small(root: Path) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="small-", dir=root))
    t = time.perf_counter()
    first = compile_sdfg(small_sdfg(2.0), folder)
    t_first = time.perf_counter() - t
    release(first)
    del first
    t = time.perf_counter()
    again = compile_sdfg(small_sdfg(3.0), folder)
    t_again = time.perf_counter() - t
    release(again)
    return {"small first": t_first, "small rebuild": t_again,
            "small rebuild compile": again.timings.get("compile", 0.0)}


def bench_mlp() -> dict:
    import workbench
    from workbench.ops.node import OnnxOp
    ws = workbench.open("mlp")
    t = time.perf_counter()
    first = ws.build()
    t_first = time.perf_counter() - t
    del first
    ws.close()  # frees the build folder: the rebuild lands in the same one, configured
    gemm = next(n for n, _ in ws.sdfg.all_nodes_recursive()
                if isinstance(n, OnnxOp) and n.op_type == "Gemm" and n.implementation == "blas")
    gemm.implementation = "pure"
    t = time.perf_counter()
    again = ws.build()
    t_again = time.perf_counter() - t
    result = {"mlp first": t_first, "mlp rebuild": t_again,
              "mlp rebuild compile": again.timings.get("compile", 0.0)}
    del again
    ws.close()
    return result


def _set_mode(mode: str) -> None:
    os.environ["WORKBENCH_FAST_BUILD"] = MODES[mode]
    apply_build_settings()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="small,mlp", help="comma-separated: small, mlp")
    args = parser.parse_args(argv)
    cases = set(args.cases.split(","))
    saved = os.environ.get("WORKBENCH_FAST_BUILD")
    root = cache_dir() / "bench" / str(os.getpid())
    root.mkdir(parents=True, exist_ok=True)
    samples = {mode: {} for mode in MODES}
    try:
        _set_mode("fast")
        from workbench.build import pch
        t = time.perf_counter()
        header = pch.ensure_pch()
        print(f"precompiled header: {header or 'not available'} "
              f"({time.perf_counter() - t:.2f} s, once per cache)")
        for rep in range(args.repeats):
            for mode in (MODES if rep % 2 == 0 else reversed(list(MODES))):
                _set_mode(mode)
                got = {}
                if "small" in cases:
                    got.update(bench_small(root))
                if "mlp" in cases:
                    got.update(bench_mlp())
                gc.collect()
                for key, value in got.items():
                    samples[mode].setdefault(key, []).append(value)
                print(f"  run {rep + 1} {mode:8s}(fast={fast_build_enabled()}): " +
                      ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
    finally:
        if saved is None:
            os.environ.pop("WORKBENCH_FAST_BUILD", None)
        else:
            os.environ["WORKBENCH_FAST_BUILD"] = saved
        shutil.rmtree(root, ignore_errors=True)
    keys = list(samples["fast"])
    print(f"\nmedian seconds of {args.repeats} (wall clock of the build call)")
    print(f"{'case':24s}" + "".join(f"{m:>10s}" for m in MODES))
    for key in keys:
        print(f"{key:24s}" + "".join(f"{statistics.median(samples[m][key]):10.2f}"
                                     for m in MODES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
