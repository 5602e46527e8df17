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
    """Why ``profile``'s times may be too long or unstable: each a short first
    sentence (what the panel shows) followed by the details (its tooltip)."""
    out = []
    if conditions is not None and conditions.busy:
        worst = max(v for v in (conditions.load_before, conditions.load_after) if v is not None)
        out.append(f"Machine busy: load {worst:.1f} above its {conditions.cores} cores. Other "
                   f"programs took CPU time, so these times may be several times too long. "
                   f"Profile again when it is quiet (the load is a 1-minute average: a build "
                   f"just before counts too, so a second profile tells).")
    if profile is not None and profile.min_ms and profile.total_ms / profile.min_ms > WIDE_SPREAD:
        out.append(f"Wide spread: the median run took {profile.total_ms / profile.min_ms:.1f}× "
                   f"the fastest. The median ({profile.total_ms:.2f} ms) and the fastest run "
                   f"({profile.min_ms:.2f} ms) disagree: the runs were disturbed.")
    return out


def headline(warning: str) -> str:
    """The first sentence of a warning."""
    return warning.split(". ", 1)[0].rstrip(".") + "."
