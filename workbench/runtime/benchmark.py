"""Benchmarks: the workbench's program against onnxruntime (and PyTorch), interleaved.

Each round runs every contender in turn (A B C A B C ...), so drift on a
shared machine hits all of them alike; all use the same thread count.
Medians decide; min and max show the spread.

A contender's turn is a short block of back-to-back calls after an untimed
hand-over. Both runtimes keep their worker threads spinning for a while
after a call, so a call made right after the other runtime's competes with
its spinning threads for the two cores: timed that way, every 2-thread
result measured mostly the other runtime (MLP: workbench 1.49 ms interleaved
call by call, 0.85 ms on its own). onnxruntime's pool spins for ~40 ms after
its last call: on ResBlock a block of ten workbench calls right after ten
onnxruntime calls had a median of 6.9 ms against 2.8 ms after its own calls,
and two untimed calls were not enough at 2.6 ms each. So the hand-over is
measured in time (``HANDOVER_MS`` of untimed calls, at least ``HANDOVER``
calls): after 50 ms the medians matched. The timed calls are what a program
calling one runtime sees.
"""
import os
import time
from dataclasses import dataclass, field

import numpy as np

from workbench.errors import BadInputError
from workbench.runtime.in_process import initialized_for
from workbench.runtime.reference import ort_session
from workbench.runtime.threads import set_threads

BASELINES = ("onnxruntime", "torch", "whole")   # whole: the program built as one, not by units


@dataclass
class BenchResult:
    model: str
    recipe: str
    repeat: int
    threads: int
    samples_ms: dict = field(default_factory=dict)   # contender -> list of ms

    def median(self, who) -> float:
        return float(np.median(self.samples_ms[who]))

    def to_dict(self) -> dict:
        baselines = {k: round(self.median(k), 4) for k in self.samples_ms if k != "workbench"}
        ort = baselines.get("onnxruntime")
        return {"model": self.model, "recipe": self.recipe,
                "workbench_ms": round(self.median("workbench"), 4), "baselines": baselines,
                "ratio_vs_onnxruntime": round(self.median("workbench") / ort, 4) if ort else None,
                "repeat": self.repeat, "threads": self.threads,
                "min_ms": {k: round(min(v), 4) for k, v in self.samples_ms.items()},
                "max_ms": {k: round(max(v), 4) for k, v in self.samples_ms.items()}}


def contenders(ws, baselines, threads: int, inputs: dict) -> dict:
    """name -> zero-argument callable running one inference."""
    runners = {"workbench": _program_runner(ws, ws.build(), inputs)}
    feeds = ws.reference_feeds(inputs)
    for name in baselines:
        if name == "whole":   # the same SDFG built as one program, not by units
            runners[name] = _program_runner(ws, ws.build(whole=True), inputs)
        elif name == "onnxruntime":
            runners[name] = _ort_runner(ort_session(ws.model.reference_model, threads), feeds)
        elif name == "torch":
            runners[name] = _torch_runner(ws, feeds, threads)
        else:
            raise BadInputError(f"unknown baseline '{name}'; choose from {', '.join(BASELINES)}.")
    return runners


def _program_runner(ws, build, inputs):
    # DaCe's __call__ checks and converts every argument on each call (~0.1 ms, a third
    # of a small model's run); a program called again and again converts them once.
    # onnxruntime's run() likewise reuses its session and only binds the feeds.
    # The converted arguments are raw pointers: ``args`` must outlive the runner.
    args, _ = ws.call_args(build, inputs)
    compiled = build.compiled
    initialized_for(build, args)
    if hasattr(compiled, "construct_arguments"):   # DaCe 2.0 made it public, keyword arguments
        call_args = compiled.construct_arguments(**args)
    else:                                            # DaCe 1.0.2
        call_args = compiled._construct_args(args)
    return lambda held=args: compiled.fast_call(*call_args)


def _ort_runner(sess, feeds):
    """onnxruntime's steady-state call, as the workbench's: inputs and outputs bound once
    (IOBinding), so neither side pays per-call conversion or output allocation."""
    import onnxruntime as ort
    binding = sess.io_binding()
    # OrtValues made from numpy arrays borrow their memory: the closure keeps them alive
    held = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
    for name, value in held.items():
        binding.bind_cpu_input(name, value)
    arrays = sess.run(None, feeds)
    outputs = [ort.OrtValue.ortvalue_from_numpy(value) for value in arrays]
    for out, value in zip(sess.get_outputs(), outputs):
        binding.bind_ortvalue_output(out.name, value)

    def run():
        sess.run_with_iobinding(binding)
    run.held = (held, arrays, outputs)
    return run


def _torch_runner(ws, feeds, threads):
    try:
        import torch
        from onnx2torch import convert
    except ImportError:
        raise BadInputError("the torch baseline needs torch and onnx2torch "
                            "(pip install torch==2.13.0 onnx2torch).") from None
    torch.set_num_threads(threads)
    module = convert(ws.model.reference_model).eval()
    tensors = [torch.from_numpy(np.ascontiguousarray(feeds[i.onnx_name])) for i in ws.inputs]

    def run():
        with torch.no_grad():
            module(*tensors)
    return run


BLOCK = int(os.environ.get("WORKBENCH_BENCH_BLOCK", "10"))  # timed calls per turn
HANDOVER = int(os.environ.get("WORKBENCH_BENCH_HANDOVER", "2"))  # untimed calls first,
# and this long: onnxruntime's spinning threads slowed the runner after it by 13-15 %
# through a 100 ms hand-over, 2-4 % through 300 ms (BERT-tiny, 16 tokens, BENCHMARKS.md)
HANDOVER_MS = float(os.environ.get("WORKBENCH_BENCH_HANDOVER_MS", "300"))


def handover(run) -> None:
    """Untimed calls until the other runtime's threads have stopped spinning."""
    start, calls = time.perf_counter(), 0
    while calls < HANDOVER or (time.perf_counter() - start) * 1e3 < HANDOVER_MS:
        run()
        calls += 1


def bench(ws, baselines=("onnxruntime",), repeat: int = 30, warmup: int = 5, threads: int = 2,
          recipe: str = "", progress=None) -> BenchResult:
    """``repeat`` timed calls per contender, in turns of ``BLOCK``, interleaved."""
    set_threads(threads)
    runners = contenders(ws, baselines, threads, ws.random_inputs())
    result = BenchResult(ws.name, recipe or "none", repeat, threads)
    result.samples_ms = interleave(runners, repeat, warmup)
    return result


def interleave(runners: dict, repeat: int, warmup: int) -> dict:
    """name -> ``repeat`` call times (ms), every runner's turns of ``BLOCK`` calls in
    rounds, each turn after a hand-over. The order turns by one each round, so each
    runner follows each other one equally often: what a runtime leaves behind (spinning
    threads, a cold cache) falls on all of them, not on the one after it."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    samples = {k: [] for k in runners}
    order = list(runners)
    while len(samples[order[0]]) < repeat:
        calls = min(BLOCK, repeat - len(samples[order[0]]))
        for name in order:
            run = runners[name]
            handover(run)
            for _ in range(calls):
                t = time.perf_counter()
                run()
                samples[name].append((time.perf_counter() - t) * 1e3)
        order = order[1:] + order[:1]
    return samples


def plot(result: BenchResult, per_operator: dict, path) -> None:
    """Per-operator workbench times and the totals of every contender, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ops = sorted(per_operator.items(), key=lambda kv: -kv[1])[:25]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [3, 1]})
    left.barh([k for k, _ in ops][::-1], [v for _, v in ops][::-1], color="#4472c4")
    left.set_xlabel("median ms (instrumented build)")
    left.set_title(f"{result.model}: time per operator (top {len(ops)})")
    left.tick_params(axis="y", labelsize=7)
    names = list(result.samples_ms)
    right.bar(names, [result.median(n) for n in names],
              yerr=[[result.median(n) - min(result.samples_ms[n]) for n in names],
                    [max(result.samples_ms[n]) - result.median(n) for n in names]],
              color=["#4472c4", "#ed7d31", "#70ad47"][:len(names)], capsize=4)
    right.set_ylabel("median ms per inference (min-max)")
    right.set_title(f"total, {result.threads} threads, recipe {result.recipe}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
