"""Sizes that may be symbolic (``workbench.importer.symbolic``) as expansions use them.

An expansion sees a size as an int or a sympy expression of the program's symbols.
These say whether a comparison of sizes holds at every size (``surely``) or at some
(``maybe``), write a size into C++ (``cpp_size``), broadcast two dims, and give a
typical value where only an order of magnitude matters.
"""


def surely(condition) -> bool:
    """A size comparison that holds at every size: with symbolic sizes
    (``workbench.importer.symbolic``) one that depends on them is not sure. Sizes are at
    least 1 (``Session.run`` refuses empty ones). Only for choices of speed (how to split
    work), never of meaning."""
    try:
        return bool(condition)
    except TypeError:   # sympy: "cannot determine truth value of Relational"
        pass
    try:
        return bool(_sizes_at_least_one(condition))
    except TypeError:
        return False


def maybe(condition) -> bool:
    """A size comparison that holds at some size: true when the symbols decide it
    (``surely``'s other side). For leaving out work that is empty at a size (a map of
    one iteration), where keeping it is right at every size."""
    try:
        return bool(condition)
    except TypeError:
        pass
    try:
        return bool(_sizes_at_least_one(condition))
    except TypeError:
        return True


def _sizes_at_least_one(condition):
    """``condition`` with every symbol s written 1 + t, t a non-negative integer, and each
    ``int_floor(a, b)`` of a non-negative ``a`` (a size after a strided window) a
    non-negative integer of its own, so that sympy can decide what holds for every size
    of at least 1."""
    import sympy
    from dace.symbolic import int_floor
    out = condition.subs({s: 1 + sympy.Symbol(f"{s.name}_above_one", integer=True,
                                                nonnegative=True)
                          for s in condition.free_symbols})
    floors = {f: sympy.Dummy(integer=True, nonnegative=True) for f in out.atoms(int_floor)
              if f.args[0].is_nonnegative and f.args[1].is_positive}
    return out.xreplace(floors)


# the size every symbol stands at where only an order of magnitude matters (a loop order)
TYPICAL_SIZE = 16


def typical(value) -> int:
    """A size as a number: an int as it is, an expression with every symbol at
    ``TYPICAL_SIZE``. Only for choices of speed."""
    try:
        return int(value)
    except TypeError:
        return int(value.subs({s: TYPICAL_SIZE for s in value.free_symbols}))


def cpp_size(value) -> str:
    """A size written into C++ code: an int, or a symbolic expression in C++ syntax
    (DaCe's printer: ``4*seq**2`` is Python, not C++), in parentheses unless it is one
    symbol: ``s / {n}`` with ``n`` the product ``H*W`` must divide by both."""
    try:
        return str(int(value))
    except TypeError:
        from dace.symbolic import symstr
        text = symstr(value)
        return text if getattr(value, "is_Symbol", False) else f"({text})"


def broadcast_dim(x, z):
    """The size two broadcast dims give (one of them 1, or both equal); symbolic sizes
    broadcast only against 1 or themselves."""
    if x == z or z == 1:
        return x
    if x == 1:
        return z
    if isinstance(x, int) and isinstance(z, int):
        return max(x, z)
    raise TypeError(f"sizes {x} and {z} broadcast only if one of them is 1 at run time")


def sized(dim):
    """A size or stride: an int, or an expression of a symbolic program's symbols."""
    try:
        return int(dim)
    except TypeError:   # an expression of symbols
        return dim
