"""Sizes that are not linear in the symbols: ``(frames - 1) // 2 + 1`` after a strided
Conv (Whisper's audio encoder), pooling, every stage of a CNN opened with a symbolic
resolution.

The probe imports (``symbolic.py``) see each array dimension at a few sizes; three
points cannot tell ``(s + 1) // 2`` from ``s // 2 + 1`` on odd sizes, and no number of
probes bounds the divisor. So the candidate forms come from onnxruntime's symbolic shape
inference run once on the model with the symbols kept (it writes a Conv's output as
``floor(frames/2 - 1/2) + 1``), and the probes choose among them: a dimension is
``c * form + (linear in the symbols)`` when that fits every probe, and the forms that
fit must all be the same function of the sizes, or the dimension is refused by name.

A form is taken only where it is built of integers, the symbols, +, * and
floor/ceiling of a linear form over an integer; each floor becomes DaCe's
``int_floor`` (C++ integer division on the generated side; the sizes are positive)."""
import sympy

from workbench.errors import NotSymbolic

# every size from 1 to this, each symbol in turn: two forms that agree there are the same
# function for any model this importer takes (a divisor above it would need a larger input)
SAME_UP_TO = 4096


class Forms:
    """``forms`` of the model ``make_model()`` makes, found on the first call; ``used``:
    whether a dimension was fitted with one (``fit_form`` sets it)."""

    def __init__(self, make_model, names):
        self.make_model, self.names, self.used = make_model, tuple(names), False
        self._forms = None

    def __call__(self) -> list:
        if self._forms is None:
            self._forms = forms(self.make_model(), self.names)
        return self._forms

    def scale(self) -> int:
        """The largest divisor in any form: probes at least 7 times it read every form
        at several values (``symbolic.probe_sizes``)."""
        return max((int(sympy.fraction(sympy.together(f.args[0]))[1])
                    for form in self() for f in form.atoms(sympy.floor, sympy.ceiling)),
                   default=1)


def forms(model, names) -> list:
    """The distinct non-linear size expressions onnxruntime's symbolic shape inference gives
    the tensors of ``model`` (its inputs' dims ``names`` kept as dim_params, every other
    dim fixed), as sympy expressions over ``sympy.Symbol(name)``; [] where the inference
    fails."""
    from workbench.importer.shapes import _quiet, _symbolic_shapes
    from workbench.importer.weightless import without_weights
    try:
        with _quiet():
            inferred = _symbolic_shapes(without_weights(model), partial=True, merge=True)
    except MemoryError:
        raise
    except Exception:   # it asserts on some exports; the fit then refuses as before
        return []
    symbols = {n: sympy.Symbol(n, integer=True, positive=True) for n in names}
    seen, out = set(), []
    infos = list(inferred.graph.value_info) + list(inferred.graph.output)
    for info in infos:
        for dim in info.type.tensor_type.shape.dim:
            text = dim.dim_param if dim.HasField("dim_param") else ""
            if not text or text in seen or text in symbols:
                continue
            seen.add(text)
            expr = _parse(text, symbols)
            if expr is not None and not _is_linear(expr, symbols.values()):
                out.append(expr)
    return out


def _parse(text, symbols):
    try:
        expr = sympy.sympify(text, locals=dict(symbols))
    except (sympy.SympifyError, SyntaxError, TypeError, AttributeError):
        return None
    if not expr.free_symbols or not expr.free_symbols <= set(symbols.values()):
        return None
    expr = _flatten(expr, list(symbols.values()))
    return expr if _allowed(expr, symbols.values()) else None


def _flatten(expr, symbols):
    """Nested floors of one chain of windows as one: ``floor((floor(n/a) + m)/b)`` is
    ``floor((n + m*a)/(a*b))`` for whole ``n`` and ``m``, and ``ceiling(k/b)`` is
    ``floor((k + b - 1)/b)`` for whole ``k`` (pools in ceil mode); a CNN's stride-2
    stages are then one division by a power of two."""
    if not expr.args:
        return expr
    expr = expr.func(*[_flatten(a, symbols) for a in expr.args])
    if isinstance(expr, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if not den.is_Integer or den <= 0 or not _whole(num, symbols):
            return expr
        # sympy takes whole terms out of the floor: flatten what it leaves
        return _flatten(sympy.floor((num + den - 1) / den), symbols)
    if not isinstance(expr, sympy.floor):
        return expr
    arg = sympy.expand(expr.args[0])
    inner = list(arg.atoms(sympy.floor))
    if len(inner) != 1:
        return expr
    f = inner[0]
    coeff = arg.coeff(f)
    rest = sympy.expand(arg - coeff * f)
    if not coeff.is_Rational or coeff.p != 1 or rest.atoms(sympy.floor):
        return expr
    b = coeff.q
    inside = _over_integer(f.args[0], symbols)
    if inside is None or not _whole(sympy.expand(rest * b), symbols):
        return expr
    n, a = inside
    return sympy.floor((n + rest * b * a) / (a * b))


def _whole(expr, symbols) -> bool:
    """Whether ``expr`` is whole at whole sizes: integers times the symbols and floors."""
    stand_ins = {f: sympy.Dummy(integer=True) for f in expr.atoms(sympy.floor)}
    try:
        poly = sympy.Poly(sympy.expand(expr.xreplace(stand_ins)),
                          *symbols, *stand_ins.values())
    except sympy.PolynomialError:
        return False
    return all(c.is_Integer for c in poly.coeffs())


def _allowed(expr, symbols) -> bool:
    if expr.is_Integer or expr in symbols:
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        return all(_allowed(a, symbols) for a in expr.args)
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        return _over_integer(expr.args[0], symbols) is not None
    return False


def _over_integer(arg, symbols):
    """(numerator, denominator) of a linear form with rational coefficients, both with
    integer coefficients; None otherwise."""
    num, den = sympy.fraction(sympy.together(arg))
    if not den.is_Integer or den <= 0:
        return None
    try:
        poly = sympy.Poly(sympy.expand(num), *symbols)
    except sympy.PolynomialError:   # a floor inside that did not flatten
        return None
    if poly.total_degree() > 1 or not all(c.is_Integer for c in poly.coeffs()):
        return None
    return sympy.expand(num), den


def _is_linear(expr, symbols) -> bool:
    try:
        poly = sympy.Poly(expr, *symbols)
    except sympy.PolynomialError:
        return False
    return poly.total_degree() <= 1 and all(c.is_Integer for c in poly.coeffs())


def value(expr, sizes: dict) -> int:
    """``expr`` (a form of ``forms``) at ``sizes`` (name -> int)."""
    return int(expr.subs({s: sizes[str(s)] for s in expr.free_symbols}))


def fits(names, probes, seen, candidates, linear_fit) -> list:
    """Every ``c * form + linear`` of ``candidates`` that matches ``seen`` at all probes."""
    out = []
    for form in candidates:
        at = [value(form, p) for p in probes]
        moved = [k for k in range(len(names)) if at[1 + k] != at[0]]
        if not moved:
            continue
        k = moved[0]
        change, step = seen[1 + k] - seen[0], at[1 + k] - at[0]
        if change % step or not change:
            continue
        c = change // step
        rest = linear_fit([s - c * a for s, a in zip(seen, at)])
        if rest is not None:
            out.append(c * form + rest)
    return out


def where_differ(a, b, names, base: dict):
    """Sizes (name -> int) at which ``a`` and ``b`` differ, the nearest above ``base``
    (the probes' base: small sizes leave a CNN no rows, where forms meet 0), each symbol
    moved in turn up to SAME_UP_TO sizes; None when they agree there (the same function
    for any model this importer takes: a divisor above it would need a larger input)."""
    fa, fb = _numeric(a, names), _numeric(b, names)
    for n in names:
        for v in range(base[n] + 1, base[n] + SAME_UP_TO + 1):
            sizes = [v if m == n else base[m] for m in names]
            if fa(*sizes) != fb(*sizes):
                return dict(zip(names, sizes))
    return None


def _numeric(expr, names):
    import math
    symbols = [sympy.Symbol(n, integer=True, positive=True) for n in names]
    return sympy.lambdify(symbols, expr, modules=[{"floor": math.floor,
                                                   "ceiling": math.ceil}, "math"])


def to_dace(expr, symbols: dict):
    """``expr`` with DaCe's symbols (``symbols``: name -> dace.symbol) and each
    floor/ceiling of ``n / d`` as ``int_floor(n, d)`` / ``int_ceil(n, d)``."""
    from dace.symbolic import int_ceil, int_floor
    plain = {sympy.Symbol(n, integer=True, positive=True): s for n, s in symbols.items()}

    def convert(e):
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = _over_integer(e.args[0], list(plain))
            call = int_floor if isinstance(e, sympy.floor) else int_ceil
            return call(num.subs(plain), den)
        if e.args:
            return e.func(*[convert(a) for a in e.args])
        return plain.get(e, e)
    return convert(expr)


class Ambiguous(NotSymbolic):
    """Two forms of the model fit a dimension at the probes; ``sizes``: where they
    differ, the next probe."""

    def __init__(self, message, sizes):
        super().__init__(message)
        self.sizes = sizes


def fit_form(names, probes, seen, symbols, forms, what, error, linear_fit):
    """``c * form + linear`` for a dimension ``linear_fit`` (``symbolic._fit``) refused;
    ``error`` again when no form of the model fits, Ambiguous when two fit and differ."""
    plain = {n: sympy.Symbol(n, integer=True, positive=True) for n in names}

    def linear(residuals):
        try:
            return linear_fit(names, probes, residuals, plain, what)
        except NotSymbolic:
            return None
    found = fits(names, probes, seen, forms() if forms else [], linear)
    if found and hasattr(forms, "used"):
        forms.used = True
    if not found:
        raise error
    for other in found[1:]:
        sizes = where_differ(found[0], other, names, probes[0])
        if sizes is not None:
            raise Ambiguous(f"{what} is {found[0]} or {other} at the probe sizes "
                            f"({', '.join(str(s) for s in seen)}); it cannot stay symbolic.",
                            sizes)
    return to_dace(found[0], symbols)


class SizePrinter(sympy.printing.str.StrPrinter):
    """``int_floor(a, b)`` as ``((a)//b)``, ``int_ceil`` as ``(-(-(a)//b))``: Python."""

    def _print_int_floor(self, expr):
        return f"(({self._print(expr.args[0])})//{self._print(expr.args[1])})"

    def _print_int_ceil(self, expr):
        return f"(-(-({self._print(expr.args[0])})//{self._print(expr.args[1])}))"
