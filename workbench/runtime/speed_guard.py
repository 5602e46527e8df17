"""The speed guard: a ``bench --zoo`` run against a committed one (``--against FILE``).

Models are compared by their ratio to onnxruntime, not by milliseconds: both
runtimes ran on the same machine in the same run, so the ratio carries over
between machines and loads far better than a time does. A model whose ratio
grew by more than ``TOLERANCE`` is named; so is one that ran before and
failed now. Run it before a performance change lands; it is a command, not a
timed test (timings on a shared machine are no test).
"""
import json
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import BadInputError

TOLERANCE = 0.15


@dataclass
class Change:
    model: str
    before: float        # ratio to onnxruntime in the baseline
    after: float         # ratio now (None: failed now)
    note: str = ""

    @property
    def slower(self) -> float:
        """after / before; None when the model did not run now."""
        return None if self.after is None else self.after / self.before

    def regressed(self, tolerance: float = TOLERANCE) -> bool:
        return self.after is None or self.slower > 1 + tolerance


def read_baseline(path) -> dict:
    """A ``bench --zoo --json`` result: the file holds its JSON, or ends with it (the
    command's whole output saved)."""
    try:
        lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as e:
        raise BadInputError(f"--against: cannot read '{path}': {e.strerror}.") from None
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "rows" in data:
            return data
    try:
        data = json.loads("\n".join(lines))
        if isinstance(data, dict) and "rows" in data:
            return data
    except ValueError:
        pass
    raise BadInputError(f"--against: '{path}' holds no `bench --zoo --json` result (a JSON "
                        f"object with \"rows\"); write one with `python app.py bench --zoo "
                        f"--json > {path}`.")


def _ratios(result: dict) -> dict:
    return {r["model"]: r["quiet"]["ratio"] for r in result["rows"]
            if r.get("status") == "ok" and r.get("quiet")}


def compare(baseline: dict, now: dict) -> list:
    """A Change for every model measured in the baseline and tried now."""
    before, after = _ratios(baseline), _ratios(now)
    tried = {r["model"]: r for r in now["rows"]}
    changes = []
    for model, ratio in before.items():
        if model not in tried or tried[model].get("status") == "skipped":
            continue
        note = "" if model in after else f"failed now: {tried[model].get('detail', '')[:200]}"
        changes.append(Change(model, ratio, after.get(model), note))
    return changes


def table(changes: list, baseline_path, tolerance: float = TOLERANCE) -> str:
    lines = [f"against {baseline_path} (ratio to onnxruntime; slower = now / before; "
             f"more than {tolerance:.0%} slower is a regression)",
             f"{'model':<24}{'before':>9}{'now':>9}{'slower':>9}"]
    for c in changes:
        now = "failed" if c.after is None else f"{c.after:.3f}"
        slower = "" if c.slower is None else f"{c.slower:.3f}"
        flag = "  REGRESSED" if c.regressed(tolerance) else ""
        lines.append(f"{c.model:<24}{c.before:>9.3f}{now:>9}{slower:>9}{flag}"
                     + (f"  {c.note}" if c.note else ""))
    bad = [c.model for c in changes if c.regressed(tolerance)]
    lines.append(f"{len(bad)} model(s) more than {tolerance:.0%} slower: {', '.join(bad)}"
                 if bad else f"no model more than {tolerance:.0%} slower")
    return "\n".join(lines)
