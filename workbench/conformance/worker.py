"""Runs node cases named on stdin, one JSON line per event on stdout.

``{"start": name}`` before a case and ``{"name", "status", "reason",
"seconds"}`` after it, so the parent knows which case hung or crashed.
Status is passed, failed or skipped, as the official runner decides.
"""
import json
import os
import sys
import time
import unittest
import warnings


class _Result(unittest.TestResult):
    def __init__(self, out):
        super().__init__()
        self.out = out
        self.t0 = 0.0

    def _emit(self, test, status, reason=""):
        name = test._testMethodName
        line = {"name": name, "status": status, "reason": _first_line(reason),
                "seconds": round(time.perf_counter() - self.t0, 3)}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    def startTest(self, test):
        super().startTest(test)
        self.out.write(json.dumps({"start": test._testMethodName}) + "\n")
        self.out.flush()
        self.t0 = time.perf_counter()

    def addSuccess(self, test):
        self._emit(test, "passed")

    def addFailure(self, test, err):
        self._emit(test, "failed", self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addError(self, test, err):
        self._emit(test, "failed", f"{err[0].__name__}: {err[1]}")

    def addSkip(self, test, reason):
        self._emit(test, "skipped", reason)


def _first_line(text) -> str:
    text = str(text).strip()
    return text.splitlines()[0][:300] if text else ""


def main() -> int:
    names = [line.strip() for line in sys.stdin if line.strip()]
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not corrupt the protocol
    warnings.simplefilter("ignore")
    from workbench.conformance.suite import backend_test
    bt = backend_test()
    cls = bt.test_cases["OnnxBackendNodeModelTest"]
    result = _Result(real_stdout)
    for name in names:
        cls(name).run(result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
