"""The names and sizes of a program's symbols: the SDFG's name of a dim and back,
the symbols' values read from input arrays, a shape evaluated at sizes, and a
shape printed as people write it. Re-exported by ``symbolic``, whose imports
at probe sizes these serve, and used wherever a symbolic shape is shown."""
import functools

import numpy as np
import sympy

from workbench.errors import ShapeError


@functools.lru_cache(maxsize=None)
def internal_name(name: str) -> str:
    """The SDFG's name for the dim ``name``: itself, or ``name_`` where DaCe's parser
    would read it as a function of its math library inside an expression
    (``sequence``: ``64*sequence`` fails to parse), or where it is as short as the
    connectors and map variables expansions name (``W``, ``n``: a symbol ``W`` cannot
    pass into a Conv whose weight connector is ``W``)."""
    from dace.symbolic import pystr_to_symbolic
    if len(name) <= 2:
        return f"{name}_"
    try:
        expr = pystr_to_symbolic(f"2*{name} + 1")
        ok = [str(x) for x in expr.free_symbols] == [name]
    except Exception:
        ok = False
    return name if ok else f"{name}_"


def user_name(symbol: str) -> str:
    """The dim's own name of the SDFG's symbol ``symbol`` (``internal_name`` undone)."""
    if symbol.endswith("_") and internal_name(symbol[:-1]) == symbol:
        return symbol[:-1]
    return symbol


def lookup(sizes: dict, symbol):
    """The value ``sizes`` (keyed by the dims' own names or the SDFG's) gives
    ``symbol``, or None."""
    key = str(symbol)
    if key in sizes:
        return sizes[key]
    return sizes.get(key[:-1]) if key.endswith("_") else None


def sizes_of(info_shapes: dict, values: dict) -> dict:
    """The symbols' values from input arrays: ``info_shapes`` (input -> its shape, ints
    and expressions), ``values`` (input -> array). Raises ShapeError on a mismatch."""
    found = {}
    for name, shape in info_shapes.items():
        got = np.shape(values[name])
        if len(got) != len(shape):
            raise ShapeError(f"input '{name}' has {len(got)} dimensions; the model takes "
                             f"{len(shape)} ({shape_text(shape)}).")
        for dim, size in zip(shape, got):
            if isinstance(dim, sympy.Symbol):
                key = user_name(str(dim))
                if int(size) < 1:   # the generated code assumes sizes of at least 1
                    raise ShapeError(f"input '{name}' is empty along '{key}': a symbolic "
                                     f"size must be at least 1.")
                if found.setdefault(key, int(size)) != int(size):
                    raise ShapeError(f"'{key}' is {found[key]} in one input and {size} "
                                     f"in '{name}'.")
    for name, shape in info_shapes.items():
        want = evaluate(shape, found)
        if tuple(np.shape(values[name])) != want:
            raise ShapeError(f"input '{name}' has shape {tuple(np.shape(values[name]))}; the "
                             f"model takes {shape_text(shape)}, here {want}.")
    return found


def evaluate(shape, sizes: dict) -> tuple:
    """``shape`` with the symbols at ``sizes`` (a ShapeError names one not given)."""
    out = []
    for dim in shape:
        if isinstance(dim, (int, np.integer)):
            out.append(int(dim))
            continue
        expr = dim if isinstance(dim, sympy.Basic) else sympy.sympify(dim)
        missing = sorted(str(s) for s in expr.free_symbols if lookup(sizes, s) is None)
        if missing:
            raise ShapeError(f"no size given for {', '.join(missing)}.")
        out.append(int(expr.subs({s: lookup(sizes, s) for s in expr.free_symbols})))
    return tuple(out)


def is_symbolic(shape) -> bool:
    return any(not isinstance(d, (int, np.integer)) and not getattr(d, "is_Integer", False)
               for d in shape)


def dim_text(dim) -> str:
    """A size as people write it: its expression with the dims' own names, a floor
    division as ``((frames - 1)//2)`` (Python reads it too: an export's ``run.py``)."""
    if not is_symbolic([dim]):
        return str(int(dim))
    expr = dim if isinstance(dim, sympy.Basic) else sympy.sympify(dim)
    from workbench.importer.size_forms import SizePrinter
    return SizePrinter().doprint(
        expr.subs({s: sympy.Symbol(user_name(str(s))) for s in expr.free_symbols}))


def shape_json(shape) -> list:
    """``shape`` for JSON: ints, and a symbolic size as its expression's text."""
    return [int(d) if not is_symbolic([d]) else dim_text(d) for d in shape]


def shape_text(shape) -> str:
    return "[" + ", ".join(dim_text(d) for d in shape) + "]"
