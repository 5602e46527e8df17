"""Row kernels: C++ loops over a contiguous row that the compiler vectorizes.

The build compiles without -ffast-math (it would break ONNX's NaN and
infinity semantics), which leaves GCC two reasons not to vectorize: glibc
declares its vector math functions (libmvec: expf, erff, tanhf, ...) only
under __FAST_MATH__, and a float reduction may not be reordered. Python
tasklets add a third: ``erf(x)`` of a float calls C's double ``::erf``. The
kernels here loop under ``#pragma omp simd`` (which allows reordering a
declared reduction), call the ``std::`` overloads, and declare the libmvec
variants themselves (``SIMD_MATH``: they keep NaN and infinity semantics).
An erf/exp-heavy row runs about 10x faster than the scalar loop.
"""
import re

import dace
from dace.codegen.cppunparse import py2cpp

from workbench.ops.registry import mapped_tasklet
from workbench.ops.symbolic_sizes import cpp_size, maybe, sized, surely

FLOAT_TYPES = (dace.float32, dace.float64)  # what the row kernels compute in

_FLOAT = ["exp", "log", "sin", "cos", "pow"]                  # in libmvec since glibc 2.22
_NEWER = ["erf", "tanh", "log1p", "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh",
          "asinh", "acosh", "atanh", "exp2", "log2", "log10", "cbrt"]  # since glibc 2.35


def _declare(names) -> str:
    lines = []
    for name in names:
        args = 2 if name == "pow" else 1
        for ctype, suffix in (("float", "f"), ("double", "")):
            params = ", ".join([ctype] * args)
            lines.append(f"#pragma omp declare simd notinbranch\n"
                         f"{ctype} {name}{suffix}({params}) noexcept;")
    return "\n".join(lines)


# Global code of every row kernel; the guard emits it once per file.
SIMD_MATH = f"""
#ifndef WORKBENCH_SIMD_MATH
#define WORKBENCH_SIMD_MATH
#if defined(_OPENMP) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__) \\
    && !defined(__CUDACC__)
extern "C" {{
{_declare(_FLOAT)}
#if __GLIBC_PREREQ(2, 35)
{_declare(_NEWER)}
#endif
}}
#endif
#endif
"""

MATH_FUNCTIONS = set(_FLOAT) | set(_NEWER) | {"sqrt", "floor", "ceil", "nearbyint", "copysign",
                                               "fmod", "fabs", "isfinite", "isnan"}
_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")
CHUNK = 1024
_CALL = re.compile(r"(?<![\w.:])(" + "|".join(sorted(MATH_FUNCTIONS)) + r")\s*\(")


def to_cpp(expr: str) -> str:
    """A Python tasklet expression as C++, math calling the overload of the argument type."""
    return _CALL.sub(r"std::\1(", py2cpp(expr).rstrip().rstrip(";"))


def row_loop(lines, ctype: str, n, start="0", stop=None, outputs=()) -> str:
    """``for j_`` over a row running ``lines`` ((target, Python expression) pairs; a
    target in ``outputs`` or indexed is written, the others are locals of ``ctype``)."""
    body = []
    for target, expr in lines:
        cpp = to_cpp(expr)
        body.append(f"    {target} = {cpp};" if "[" in target or target in outputs else
                    f"    const {ctype} {target} = {cpp};")
    stop = stop or cpp_size(n)
    return (f"#pragma omp simd\nfor (int j_ = {start}; j_ < {stop}; ++j_) {{\n"
            + "\n".join(body) + "\n}")


def substitute(expr: str, names: dict) -> str:
    """``expr`` with whole identifiers replaced (never parts of numbers or attributes)."""
    return _IDENT.sub(lambda m: names.get(m.group(1), m.group(1)), expr)


def _full(array_shape, shape, d) -> bool:
    """Whether an operand broadcast against ``shape`` has all of dim ``d``."""
    k = d - (len(shape) - len(array_shape))
    return k >= 0 and array_shape[k] == shape[d]


def _same_reach(array_shape, shape, first, last) -> bool:
    """Whether the operand reads dims ``first..last`` all whole or all broadcast."""
    reach = {_full(array_shape, shape, d) for d in range(first, last + 1) if shape[d] != 1}
    return len(reach) <= 1


def _one_run(array_shape, strides, shape, first, last) -> bool:
    """Whether the operand's elements of dims ``first..last`` (read whole) lie evenly
    spaced, so that one row loop walks them: each dim's stride is the next one's times
    its size (always so for a row-major array; a strided View may break it)."""
    offset = len(shape) - len(array_shape)
    dims = [d - offset for d in range(first, last + 1)
            if d >= offset and array_shape[d - offset] != 1]
    return all(surely(strides[a] == strides[b] * array_shape[b]) for a, b in zip(dims, dims[1:]))


def _row_step(array_shape, strides, shape, row):
    """The operand's stride along the row (its innermost dim of extent above 1)."""
    offset = len(shape) - len(array_shape)
    dims = [d - offset for d in range(offset, row + 1) if array_shape[d - offset] != 1]
    return strides[dims[-1]] if dims else 1


def _chunks(n, chunk: int) -> str:
    """How many ``chunk``-element pieces cover ``n`` elements, as a map range's end."""
    try:
        return str(-(-int(n) // chunk))
    except TypeError:
        return f"int_ceil({n}, {chunk})"


def add_row_kernel(state, label: str, shape, inputs: dict, lines, outputs: dict, ctype: str,
                   input_nodes=None, tail=None):
    """One map over ``shape`` but its last dimension (OpenMP over it), each iteration a
    row loop. ``inputs``/``outputs`` map connector -> (array, array shape), broadcast
    against ``shape`` numpy-style; ``lines`` are (name, Python expression) over the
    connector names, in order; a name that is an output connector writes it.
    ``tail(access)`` (connector -> its element expression in ``j_``) gives C++ run
    after the loop on each whole row (rows are then never split).
    """
    shape = tuple(shape) or (1,)
    row = max([d for d, size in enumerate(shape) if size != 1], default=len(shape) - 1)
    operands = {**inputs, **outputs}
    strides = {c: tuple(state.parent.arrays[arr].strides) for c, (arr, _) in operands.items()}
    # The row is the trailing dims every operand reads whole or not at all (contiguous
    # in both cases): EfficientNet's [1, 240, 28, 28] SiLU runs 240 rows of 784, not
    # 6720 rows of 28 whose remainder loops cost more than the vector work. A strided
    # View (a transposed weight gradient) joins dims only where they form one run.
    start = row
    while tail is None and start > 0 and all(
            _same_reach(s, shape, start - 1, row)
            and (not _full(s, shape, start - 1) or _one_run(s, strides[c], shape, start - 1, row))
            for c, (_, s) in operands.items()):
        start -= 1
    n = 1  # trailing size-1 dimensions do not break contiguity
    for size in shape[start:row + 1]:
        n *= size
    ranges = {f"i{d}": f"0:{size}" for d, size in enumerate(shape[:start]) if size != 1}
    rows = 1
    for size in shape[:start]:
        rows *= size
    # too few rows to share: split them (a symbolic row may be long: split it, the
    # chunks of a short one are one iteration)
    chunk = CHUNK if surely(rows < 16) and maybe(n >= 2 * CHUNK) and tail is None else None
    if chunk or not ranges:
        ranges["c"] = f"0:{_chunks(n, chunk) if chunk else 1}"

    def along_row(array_shape) -> bool:
        return maybe(n > 1) and _full(array_shape, shape, row)

    def subset(array_shape):
        offset = len(shape) - len(array_shape)
        whole = along_row(array_shape)
        idx = [(f"0:{size}" if whole else "0") if offset + k >= start else
               (f"i{offset + k}" if size != 1 else "0")
               for k, size in enumerate(array_shape)]
        return ", ".join(idx) or "0"

    # A connector that sees one element of the row is a scalar in C++, else a row pointer
    # (stepping by its stride along the row where that is not 1).
    def element(c, s):
        step = sized(_row_step(s, strides[c], shape, row))
        return f"{c}[j_]" if surely(step == 1) else f"{c}[j_ * {cpp_size(step)}]"

    names = {c: element(c, s) if along_row(s) else c for c, (_, s) in operands.items()}
    body = [(names.get(name, name), substitute(expr, names)) for name, expr in lines]
    bounds = ((f"c * {chunk}", f"min(c * {chunk} + {chunk}, {cpp_size(n)})")
              if chunk else ("0", None))
    code = row_loop(body, ctype, n, *bounds, outputs=set(outputs))
    if tail is not None:
        code += "\n" + tail(names)
    tasklet, entry, _ = mapped_tasklet(
        state, label, ranges,
        {c: dace.Memlet(f"{arr}[{subset(s)}]") for c, (arr, s) in inputs.items()}, code,
        {c: dace.Memlet(f"{arr}[{subset(s)}]") for c, (arr, s) in outputs.items()},
        language=dace.Language.CPP, input_nodes=input_nodes)
    tasklet.code_global = dace.properties.CodeBlock(SIMD_MATH, dace.Language.CPP)
    entry.map.collapse = max(1, len(ranges))
    return entry
