"""The sizes a symbolic program's figures are taken at.

A program imported with symbolic dims (``workbench.importer.symbolic``) has
array sizes such as ``batch*784``. Its bytes moved, memory and FLOPs are
numbers at a size: inside ``at_sizes({"batch": 4})`` the analyses read every
expression of those symbols as its value there. Outside one, a symbolic size
is not a number (a ``TypeError``, as before), so no figure is ever taken at a
size nobody chose. A count symbol (a size the run-time data decide,
``importer/counted.py``) that the sizes do not give is read at its bound, the
largest it can be: its figures are the worst case.
"""
import contextvars
from contextlib import contextmanager

_SIZES = contextvars.ContextVar("workbench_sizes", default=None)
# count symbol -> its bound, as the last import that made it found it
COUNT_BOUNDS = {}


@contextmanager
def at_sizes(sizes: dict):
    token = _SIZES.set(dict(sizes) if sizes else None)
    try:
        yield
    finally:
        _SIZES.reset(token)


def current_sizes() -> tuple:
    """The sizes set now, as a key: ``((name, value), ...)``, empty when none."""
    return tuple(sorted((_SIZES.get() or {}).items()))


def number(value) -> int:
    """``int(value)``, with the symbols of ``at_sizes`` at their values; a TypeError
    when a symbol in it has none (a map's parameter, or no sizes set)."""
    try:
        return int(value)
    except TypeError:
        sizes = {**COUNT_BOUNDS, **(_SIZES.get() or {})}
        if not sizes:
            raise
    import sympy
    from workbench.importer.symbolic import lookup
    expr = value if isinstance(value, sympy.Basic) else sympy.sympify(value)
    known = {s: lookup(sizes, s) for s in expr.free_symbols}
    return int(expr.subs({s: v for s, v in known.items() if v is not None}))


def number_or_typical(value) -> int:
    """``number(value)`` at the sizes set, else with every symbol at a typical size
    (``symbolic_sizes.TYPICAL_SIZE``): for what only describes or probes (a match's text,
    whether a library has a kernel), never for a figure."""
    from workbench.ops.symbolic_sizes import typical
    try:
        return number(value)
    except TypeError:
        return typical(value)
