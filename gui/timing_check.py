"""Whether a profile's times can be trusted: the machine's load and the runs' spread.

With one other busy process, mbconv measured 168 ms where it runs in
18.8 ms alone, and the chart looked as confident as ever. The window
therefore records the load average just before and just after profiling
(``Controller.profile``) and says so when the machine was busy or the runs
disagree. The numbers are what ``os.getloadavg`` says (the 1-minute
average of runnable processes, ours included: a compile in the minute
before raises it too) against the cores this process may use.
"""
import os
from dataclasses import dataclass

# The median run this many times the fastest one: the runs were disturbed.
WIDE_SPREAD = 1.5


def load_average() -> float:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass
class TimingConditions:
    """What the machine was like around one profile."""
    threads: int
    cores: int
    load_before: float = None
    load_after: float = None

    @property
    def busy(self) -> bool:
        return any(load is not None and load > self.cores
                   for load in (self.load_before, self.load_after))

    def describe(self) -> str:
        def show(load):
            return "?" if load is None else f"{load:.2f}"
        return (f"{self.threads} thread{'s' if self.threads != 1 else ''}; load "
                f"{show(self.load_before)} → {show(self.load_after)} on {self.cores} "
                f"core{'s' if self.cores != 1 else ''}")


def warnings(conditions: TimingConditions, profile) -> list:
    """Sentences saying why ``profile``'s times may be too long or unstable."""
    out = []
    if conditions is not None and conditions.busy:
        worst = max(v for v in (conditions.load_before, conditions.load_after) if v is not None)
        out.append(f"The machine was busy (load {worst:.1f} above its {conditions.cores} "
                   f"cores): other programs took CPU time, so these times may be several "
                   f"times too long. Profile again when it is quiet (the load is a 1-minute "
                   f"average: a build just before counts too, so a second profile tells).")
    if profile is not None and profile.min_ms and profile.total_ms / profile.min_ms > WIDE_SPREAD:
        out.append(f"Wide spread: the median run ({profile.total_ms:.2f} ms) took "
                   f"{profile.total_ms / profile.min_ms:.1f}× the fastest "
                   f"({profile.min_ms:.2f} ms); the runs were disturbed.")
    return out
