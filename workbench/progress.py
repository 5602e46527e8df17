"""Progress reports for long phases (import, shape inference, build, verify).

The library is silent by default; the CLI passes a ``Progress`` that writes
one line per phase to stderr, with elapsed seconds, and a bar when the
amount of work is known.
"""
import sys
import time
from contextlib import contextmanager


class Progress:
    """Writes ``[   1.2s] phase ...`` lines; ``None`` stream means silent."""

    def __init__(self, stream=None):
        self.stream = stream
        self.start = time.perf_counter()
        self.timings = {}

    def _write(self, text, end="\n"):
        if self.stream is not None:
            self.stream.write(f"[{time.perf_counter() - self.start:7.1f}s] {text}{end}")
            self.stream.flush()

    @contextmanager
    def phase(self, name: str, total: int = None):
        """Time a phase; yields ``step(done)`` to advance a bar of ``total``."""
        t0 = time.perf_counter()
        self._write(f"{name} ...")
        tty = self.stream is not None and getattr(self.stream, "isatty", lambda: False)()

        def step(done: int, label: str = ""):
            if total and self.stream is not None:
                width = 24
                filled = int(width * done / total)
                bar = "#" * filled + "." * (width - filled)
                line = f"{name} [{bar}] {done}/{total} {label}"
                if tty:
                    self.stream.write("\r" + line[:100].ljust(100))
                    self.stream.flush()
                elif done == total:
                    self._write(line)

        try:
            yield step
        finally:
            dt = time.perf_counter() - t0
            self.timings[name] = self.timings.get(name, 0.0) + dt
            if tty and total:
                self.stream.write("\n")
            self._write(f"{name} done in {dt:.2f}s")


def stderr_progress() -> Progress:
    return Progress(sys.stderr)


SILENT = Progress(None)
