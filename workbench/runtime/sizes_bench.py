"""``bench MODEL --sizes seq=16,64``: one symbolic program at every size.

At each size three contenders run the same seeded inputs, interleaved
(``benchmark.interleave``): the program built once with the sizes as symbols,
the same model built for that one size (opened with the size fixed, the same
recipe applied), and onnxruntime. Each size is measured ``runs`` times; a ratio
is the median of the runs' ratios, with their range.
"""
from dataclasses import dataclass, field

from workbench.runtime.benchmark import _ort_runner, _program_runner, interleave
from workbench.runtime.reference import ort_session
from workbench.runtime.threads import set_threads


@dataclass
class SizeRow:
    sizes: dict
    median_ms: dict = field(default_factory=dict)     # contender -> median of its runs
    ratios: dict = field(default_factory=dict)        # "symbolic/fixed" -> [median, lo, hi]

    def to_dict(self) -> dict:
        return {"sizes": self.sizes, "median_ms": {k: round(v, 4) for k, v in
                                                   self.median_ms.items()},
                "ratios": {k: [round(x, 4) for x in v] for k, v in self.ratios.items()}}


def bench_sizes(symbolic_ws, open_fixed, recipe, sizes_list, repeat: int = 30,
                warmup: int = 5, threads: int = 2, runs: int = 3, progress=None) -> list:
    """A ``SizeRow`` per entry of ``sizes_list``; ``open_fixed(sizes)`` opens the model at
    those sizes and ``recipe(ws)`` applies the recipe both programs share."""
    set_threads(threads)
    symbolic_build = symbolic_ws.build()
    rows = []
    for sizes in sizes_list:
        fixed = open_fixed(sizes)
        recipe(fixed)
        inputs = symbolic_ws.random_inputs(sizes=sizes)
        runners = {
            "symbolic": _program_runner(symbolic_ws, symbolic_build, inputs),
            "fixed": _program_runner(fixed, fixed.build(), inputs),
            "onnxruntime": _ort_runner(ort_session(fixed.model.reference_model, threads),
                                       fixed.reference_feeds(inputs)),
        }
        medians = []
        for _ in range(runs):
            samples = interleave(runners, repeat, warmup)
            medians.append({k: sorted(v)[len(v) // 2] for k, v in samples.items()})
        row = SizeRow(sizes)
        for who in runners:
            times = sorted(m[who] for m in medians)
            row.median_ms[who] = times[len(times) // 2]
        for top, bottom in (("symbolic", "fixed"), ("symbolic", "onnxruntime")):
            ratios = sorted(m[top] / m[bottom] for m in medians)
            row.ratios[f"{top}/{bottom}"] = [ratios[len(ratios) // 2], ratios[0], ratios[-1]]
        rows.append(row)
    return rows
