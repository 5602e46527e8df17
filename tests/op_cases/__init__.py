"""Op test cases, one table per op family; ``CASES`` merges them all.

Each module here defines ``CASES = {op_type: [Case, ...]}``; an op type may
appear in one module only.
"""
import importlib
import pkgutil

from op_cases.base import Case  # noqa: F401


def _merge():
    merged, owner = {}, {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"op_cases.{info.name}")
        for op_type, cases in module.CASES.items():
            if op_type in merged:
                raise ValueError(f"op {op_type} has cases in both {owner[op_type]} and {info.name}")
            merged[op_type], owner[op_type] = cases, info.name
    return merged


CASES = _merge()
