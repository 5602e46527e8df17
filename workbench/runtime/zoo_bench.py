"""``bench --zoo``: every bundled model and zoo export against onnxruntime, one table.

Each model is opened, given the recipe, built, and timed by ``benchmark.bench``
(interleaved with onnxruntime). One model failing becomes a failed row; the
others still run. A full-size model not generated yet is a skipped row naming
the command that writes it.

Every model is timed in ``runs`` interleaved measurements (default 3): one
ratio on this shared machine is not a result (MobileNetV2 gave 1.61, 1.08 and
1.13 minutes apart). A row reports the run with the median ratio (the lower
middle one for an even count), beside the lowest and highest ratio.

With ``busy`` every model is timed twice: quiet, then with one competing
process spinning on a core during its timed rounds, so the table shows how
much each runtime slows down when it does not have the machine to itself.
"""
from __future__ import annotations

import contextlib
import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field

from workbench.runtime.benchmark import BenchResult, bench

RUNTIMES = ("workbench", "onnxruntime")

# The competing process: spins, and ends by itself once its parent is gone, so even a
# bench killed by SIGKILL (no ``finally``) leaves no spinning process behind.
_SPIN = ("import os, sys\nparent = int(sys.argv[1])\n"
         "while os.getppid() == parent:\n    for _ in range(200000):\n        pass\n")


def pick(full: bool, wanted: str = None) -> list:
    """The zoo entries to run: the bundled models and the reduced exports, or with
    ``full`` the full-size ones; ``wanted`` (comma-separated names) picks among all
    zoo names, an export's name meaning its full-size version under ``full``."""
    from sdfg_models import zoo
    from workbench.errors import BadInputError
    default = [n for n in zoo.names(full=False) if zoo.get(n).kind == "bundled"]
    default += [n for n in zoo.names(full=full) if zoo.get(n).kind != "bundled"]
    if not wanted:
        return [zoo.get(n) for n in default]
    every = zoo.names()
    picked, unknown = [], []
    for name in (w.strip() for w in wanted.split(",")):
        if not name:
            continue
        name = name.removeprefix(zoo.PREFIX)
        name = f"{name}-full" if full and f"{name}-full" in every else name
        (picked if name in every else unknown).append(name)
    if unknown or not picked:
        raise BadInputError(f"--models: {', '.join(unknown) or 'no names'} not in the zoo; "
                            f"zoo models are {', '.join(every)}.")
    return [zoo.get(n) for n in dict.fromkeys(picked)]


@dataclass
class Timing:
    """One runtime's samples in one run, summarized."""
    median_ms: float
    min_ms: float

    @property
    def spread(self) -> float:
        """median / min: 1.0 is a perfectly steady runtime."""
        return self.median_ms / self.min_ms

    def to_dict(self) -> dict:
        return {"median_ms": round(self.median_ms, 4), "min_ms": round(self.min_ms, 4),
                "spread": round(self.spread, 4)}


@dataclass
class Run:
    """Both runtimes' timings from one interleaved ``bench`` call."""
    workbench: Timing
    onnxruntime: Timing

    @classmethod
    def of(cls, result: BenchResult) -> "Run":
        return cls(*(Timing(result.median(who), min(result.samples_ms[who])) for who in RUNTIMES))

    @property
    def ratio(self) -> float:
        """workbench median / onnxruntime median."""
        return self.workbench.median_ms / self.onnxruntime.median_ms

    def to_dict(self) -> dict:
        return {"workbench": self.workbench.to_dict(), "onnxruntime": self.onnxruntime.to_dict(),
                "ratio": round(self.ratio, 4)}


@dataclass
class Runs:
    """Several interleaved runs of one model; reads as the run with the median ratio."""
    each: list   # [Run]

    @property
    def median_run(self) -> Run:
        return sorted(self.each, key=lambda r: r.ratio)[(len(self.each) - 1) // 2]

    @property
    def workbench(self) -> Timing:
        return self.median_run.workbench

    @property
    def onnxruntime(self) -> Timing:
        return self.median_run.onnxruntime

    @property
    def ratio(self) -> float:
        return self.median_run.ratio

    @property
    def low(self) -> float:
        return min(r.ratio for r in self.each)

    @property
    def high(self) -> float:
        return max(r.ratio for r in self.each)

    def to_dict(self) -> dict:
        return {**self.median_run.to_dict(), "ratio_range": [round(self.low, 4), round(self.high, 4)],
                "runs": [r.to_dict() for r in self.each]}


@dataclass
class ZooRow:
    model: str
    kind: str                  # the zoo entry's: bundled, export, full
    status: str = "ok"         # ok, failed, skipped
    detail: str = ""           # the error (failed), the command to generate it (skipped)
    quiet: Runs = None
    busy: Runs = None          # with a competing process (--busy)
    busy_pid: int = None       # the competing process's pid, to check that it is gone

    @property
    def real(self) -> bool:
        """A real network's export, not a bundled block."""
        return self.kind != "bundled"

    def slowdown(self, who: str) -> float:
        """busy median / quiet median of one runtime."""
        return getattr(self.busy, who).median_ms / getattr(self.quiet, who).median_ms

    @property
    def slowdown_ratio(self) -> float:
        """The workbench's slowdown over onnxruntime's: above 1.0 it suffers more."""
        return self.slowdown("workbench") / self.slowdown("onnxruntime")

    def to_dict(self) -> dict:
        d = {"model": self.model, "kind": self.kind, "status": self.status}
        if self.detail:
            d["detail"] = self.detail
        if self.quiet:
            d["quiet"] = self.quiet.to_dict()
        if self.busy:
            d["busy"] = self.busy.to_dict()
            d["busy_pid"] = self.busy_pid
            d["slowdown"] = {who: round(self.slowdown(who), 4) for who in RUNTIMES}
            d["slowdown_ratio"] = round(self.slowdown_ratio, 4)
        return d


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


@dataclass
class ZooBench:
    recipe: str
    repeat: int
    threads: int
    busy: bool
    machine: dict
    runs: int
    rows: list = field(default_factory=list)
    load_after: float = None   # the load average when the last model was done

    @property
    def failed(self) -> list:
        return [r for r in self.rows if r.status == "failed"]

    def geomeans(self) -> dict:
        """Geometric means of the ratios: over the real exports and over the bundled
        blocks (None where a group has no measured row)."""
        ok = [r for r in self.rows if r.status == "ok"]
        out = {}
        for group, real in (("exports", True), ("bundled", False)):
            rows = [r for r in ok if r.real == real]
            out[group] = {"ratio": _round(geomean(r.quiet.ratio for r in rows)), "models": len(rows)}
            if self.busy:
                out[group]["busy_ratio"] = _round(geomean(r.busy.ratio for r in rows))
                out[group]["slowdown_ratio"] = _round(geomean(r.slowdown_ratio for r in rows))
        return out

    def to_dict(self) -> dict:
        return {"recipe": self.recipe, "repeat": self.repeat, "runs": self.runs,
                "threads": self.threads, "busy": self.busy, "machine": self.machine, "load_average_after": self.load_after,
                "rows": [r.to_dict() for r in self.rows], "geomean": self.geomeans(),
                "failed": len(self.failed)}

    def table(self) -> str:
        """The results; the machine line is printed before the run starts."""
        lines = [f"recipe {self.recipe}, {self.threads} threads, {self.repeat} rounds, "
                 f"{self.runs} run(s); ms: median (min, spread = median/min) of the run with "
                 f"the median ratio; range: the lowest and highest ratio of the runs",
                 f"{'model':<22}{'workbench ms':>28}{'onnxruntime ms':>28}{'ratio':>9}"
                 f"{'range':>15}"]
        for r in self.rows:
            lines.append(f"{r.model:<22}" + (_run_cells(r.quiet) if r.quiet else f"  {r.status}: "
                                             f"{_one_line(r.detail, 120)}"))
        if self.busy:
            lines += ["", "busy: one competing process spinning during the timed rounds; "
                          "slowdown = busy median / quiet median",
                      f"{'model':<22}{'workbench ms':>28}{'onnxruntime ms':>28}{'ratio':>9}"
                      f"{'range':>15}{'wb slow':>9}{'ort slow':>9}{'wb/ort':>8}"]
            for r in self.rows:
                if r.busy:
                    lines.append(f"{r.model:<22}{_run_cells(r.busy)}{r.slowdown('workbench'):>9.3g}"
                                 f"{r.slowdown('onnxruntime'):>9.3g}{r.slowdown_ratio:>8.3g}")
        lines.append("")
        for group, g in self.geomeans().items():
            what = "real exports" if group == "exports" else "bundled blocks"
            if g["ratio"] is None:
                lines.append(f"geomean ratio over the {what}: no measured model")
                continue
            text = f"geomean ratio over the {what} ({g['models']}): {g['ratio']:.3f}"
            if self.busy:
                text += f"; busy {g['busy_ratio']:.3f}, slowdown wb/ort {g['slowdown_ratio']:.3f}"
            lines.append(text)
        lines.append(f"load average (1 min, whole machine): {self.machine['load_average']} "
                     f"at the start, {self.load_after} at the end")
        if self.failed:
            lines.append(f"{len(self.failed)} model(s) failed: "
                         f"{', '.join(r.model for r in self.failed)}")
        return "\n".join(lines)


def _round(value, digits=4):
    return None if value is None else round(value, digits)


def _run_cells(runs: Runs) -> str:
    cells = "".join(f"{t.median_ms:>11.3f} ({t.min_ms:.3f}, {t.spread:.2f})".rjust(28)
                    for t in (runs.workbench, runs.onnxruntime))
    return f"{cells}{runs.ratio:>9.3f}{f'{runs.low:.3f}-{runs.high:.3f}':>15}"


def _one_line(text: str, limit: int) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[:limit - 4] + " ..."


def machine_info(threads: int) -> dict:
    """What the numbers depend on: the CPU (and its vector width), threads, onnxruntime."""
    import onnxruntime
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:  # the first processor's lines are enough
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
                if "model name" in info and "flags" in info:
                    break
    except OSError:
        pass  # not Linux: the flags stay unknown
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = set(info["flags"].split()) if "flags" in info else None
    return {"cpu": name, "avx2": None if flags is None else "avx2" in flags,
            "avx512f": None if flags is None else "avx512f" in flags, "cores": os.cpu_count(),
            "threads": threads, "onnxruntime": onnxruntime.__version__,
            "load_average": load_average()}


def load_average():
    """The 1-minute load average: on a shared machine, whether others were busy too."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_line(m: dict) -> str:
    def flag(name):
        return {True: "yes", False: "no", None: "unknown"}[m[name]]
    return (f"CPU: {m['cpu']} ({m['cores']} cores); avx2 {flag('avx2')}, "
            f"avx512f {flag('avx512f')}; onnxruntime {m['onnxruntime']}")


@contextlib.contextmanager
def busy_process():
    """One spinning process for the duration of the block; always killed and reaped."""
    proc = subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def run_zoo(entries, prepare, recipe: str, repeat: int, warmup: int, threads: int,
            busy: bool = False, progress=None, runs: int = 3) -> ZooBench:
    """Bench every entry ``runs`` times; ``prepare(entry)`` opens, optimizes and builds
    its session. Anything a model raises (but an interrupt) becomes its failed row."""
    import gc
    from workbench.progress import SILENT
    progress = progress or SILENT
    out = ZooBench(recipe, repeat, threads, busy, machine_info(threads), runs)
    for entry in entries:
        row = ZooRow(entry.name, entry.kind)
        out.rows.append(row)
        if not entry.available():
            from sdfg_models import zoo
            row.status, row.detail = "skipped", f"not generated yet: run {zoo.generate_command(entry)}"
            continue
        try:
            with progress.phase(f"{entry.name}: open, recipe {recipe}, build"):
                ws = prepare(entry)
            with progress.phase(f"{entry.name}: {runs} x {repeat} interleaved rounds"):
                row.quiet = Runs([Run.of(bench(ws, ("onnxruntime",), repeat, warmup, threads,
                                               recipe)) for _ in range(runs)])
            if busy:
                with progress.phase(f"{entry.name}: {runs} x {repeat} rounds, busy"), \
                        busy_process() as p:
                    row.busy_pid = p.pid
                    row.busy = Runs([Run.of(bench(ws, ("onnxruntime",), repeat, warmup, threads,
                                                  recipe)) for _ in range(runs)])
        except Exception as e:  # noqa: BLE001 (one model's failure is its row, not the run's)
            # the whole message in the JSON: a compiler's error sits deep in its first line
            row.status, row.detail = "failed", f"{type(e).__name__}: {str(e).strip()[:4000]}"
            row.quiet = row.busy = None
        ws = None
        gc.collect()
    out.load_after = load_average()
    return out


EXPORT_COLOR, BUNDLED_COLOR, BUSY_COLOR = "#70ad47", "#4472c4", "#ed7d31"


def plot(result: ZooBench, path) -> None:
    """Ratio of medians per model (log scale), busy beside quiet, a line at 1.0."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib import ticker
    from matplotlib.patches import Patch
    rows = [r for r in result.rows if r.status == "ok"]
    x = np.arange(len(rows))
    width = 0.4 if result.busy else 0.7
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows) + 2), 5))
    offset = width / 2 if result.busy else 0
    ax.bar(x - offset, [r.quiet.ratio for r in rows], width, yerr=_range_bars(r.quiet for r in rows),
           color=[EXPORT_COLOR if r.real else BUNDLED_COLOR for r in rows])
    handles = [Patch(color=EXPORT_COLOR, label="real exports"),
               Patch(color=BUNDLED_COLOR, label="bundled blocks")]
    if result.busy:
        ax.bar(x + offset, [r.busy.ratio for r in rows], width,
               yerr=_range_bars(r.busy for r in rows), color=BUSY_COLOR)
        handles.append(Patch(color=BUSY_COLOR, label="with one competing busy process"))
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    # ratios read as plain numbers at 1-2-5 steps, not as powers of ten
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xticks(x, [r.model for r in rows], rotation=45, ha="right")
    ax.set_ylabel("workbench median / onnxruntime median")
    m, left_out = result.machine, len(result.rows) - len(rows)
    ax.set_title(f"recipe {result.recipe}, {result.threads} threads, {result.repeat} rounds, "
                 f"median of {result.runs} run(s); "
                 f"avx2 {m['avx2']}, avx512f {m['avx512f']}"
                 + (f"; {left_out} failed or skipped, not shown" if left_out else ""), fontsize=9)
    ax.legend(handles=handles, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _range_bars(runs) -> list:
    """Error bars from each median ratio down to the lowest and up to the highest."""
    runs = list(runs)
    return [[r.ratio - r.low for r in runs], [r.high - r.ratio for r in runs]]
