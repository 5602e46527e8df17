"""MatMulStrided: a matrix product that reads and writes its tensors where they lie.

A workbench-internal op (domain ``workbench``) made by the layout level
(``transforms/layout``): a Transpose feeding a MatMul, or a 1x1 Conv's
NCHW data, becomes a strided view of an operand instead of a copy.
Attributes give each tensor a logical view over its stored row-major array,
``<x>_shape`` and ``<x>_strides`` in elements, all of the output's rank r
(``<x>_layout``, when present, gives the strides the tensor is stored at
instead of row-major: SiblingGemmsAsOne moves an output into columns of a
wider array):

    A [*batch, M, K]   B [*batch, K, N]   Y, C [*batch, M, N]
    Y = alpha * A @ B + beta * C          (C, the bias, is optional)

A broadcast dimension has stride 0. In a program whose sizes are symbols
(``workbench.importer.symbolic``) a size or stride may be an expression,
kept as its text (``"64*sequence_"``). The BLAS implementation calls one GEMM
per batch index with leading dimensions taken from the strides (a matrix
whose rows or columns are contiguous is a plain or transposed BLAS operand);
the pure one is a parallel map over Y's elements, each a dot product loop.
"""
import dace

from workbench.build.settings import blas_implementation
from workbench.ops.reduce import refuse_float16
from workbench.ops.library_tasklet import library_tasklet
from workbench.ops.registry import (implements, mapped_tasklet, outer_layout_sdfg,
                                    row_major_strides)
from workbench.ops.symbolic_sizes import cpp_size, maybe, sized, surely

OP_TYPE = "MatMulStrided"
DOMAIN = "workbench"


def size_attr(value):
    """A size or stride as an attribute holds it: an int, or the text of an expression."""
    value = sized(value)
    return value if isinstance(value, int) else str(value)


def attr_size(value):
    """``size_attr``'s inverse: an int, or a sympy expression of DaCe symbols."""
    if isinstance(value, str):
        from dace.symbolic import pystr_to_symbolic
        return sized(pystr_to_symbolic(value))
    return value


def attr_sizes(values) -> tuple:
    return tuple(attr_size(v) for v in values)


def views(call) -> dict:
    """Connector -> (logical shape, strides) for every present tensor."""
    y_shape = attr_sizes(call.attr("y_shape"))
    out = {}
    for pos, key in ((0, "a"), (1, "b"), (2, "c")):
        if call.input(pos):
            shape = attr_sizes(call.attr(f"{key}_shape") or y_shape)
            out[call.input(pos)] = (shape, attr_sizes(call.attr(f"{key}_strides")))
    out[call.output(0)] = (y_shape, attr_sizes(call.attr("y_strides")))
    return out


def flat(view, index) -> str:
    """Flat element position of logical ``index`` (expressions) in a view, in C++."""
    return " + ".join(f"{p} * {cpp_size(s)}" for p, s in zip(index, view[1]) if s) or "0"


def _pointwise(call, state, label, ranges, reads, code, collapse=None):
    """A parallel map over Y's logical elements whose C++ tasklet reads and
    writes through pointers (``_<conn>``, ``_y``) at flat offsets.

    Tensors keep their shapes inside: a connector seen reshaped becomes a
    DaCe View when inlined, and DaCe's state splitting during inlining has
    been seen to cut such a View off its data.
    """
    sdfg = state.parent
    y = call.output(0)
    inputs = {f"_{c}": dace.Memlet.from_array(c, sdfg.arrays[c]) for c in reads}
    for m in inputs.values():
        m.dynamic = True
    out = dace.Memlet.from_array(y, sdfg.arrays[y])
    out.dynamic = True
    tasklet, entry, _ = mapped_tasklet(state, label, ranges, inputs, code, {"_y": out},
                                       language=dace.Language.CPP)
    for conn in list(tasklet.in_connectors):
        tasklet.in_connectors[conn] = dace.pointer(sdfg.arrays[inputs[conn[2:]].data].dtype)
    tasklet.out_connectors["___y"] = dace.pointer(sdfg.arrays[y].dtype)
    entry.map.collapse = collapse or len(ranges)


def _stored_sdfg(call, name: str):
    """The implementation's SDFG with each tensor at the strides it is stored at: the
    views index that layout (``_dims`` checked it is the one they were written for)."""
    refuse_float16(call)
    sdfg = outer_layout_sdfg(call, name)
    return sdfg, sdfg.add_state()


def _dims(call):
    """The views, batch dims, M, N and K; each tensor must be stored as its view was
    written for: row-major, or the layout ``<x>_layout`` records."""
    a, y = call.input(0), call.output(0)
    keys = {call.input(0): "a", call.input(1): "b", call.output(0): "y"}
    if call.input(2):
        keys[call.input(2)] = "c"
    for conn, desc in {**call.inputs, **call.outputs}.items():
        laid = call.attr(f"{keys.get(conn)}_layout")
        expected = attr_sizes(laid) if laid else row_major_strides(desc.shape)
        if any(n != 1 and s != e for n, s, e in zip(desc.shape, desc.strides, expected)):
            raise call.fail(f"'{conn}' is stored at strides {tuple(desc.strides)}, not "
                            f"{tuple(expected)}; its view strides would be wrong")
    v = views(call)
    *batch, m, n = v[y][0]
    return v, tuple(batch), m, n, v[a][0][-1]


def _merge_rows(view, nb):
    """``view`` with its last batch dim folded into its rows, or None when the rows of
    consecutive batch entries are not one evenly strided run (or the batch is broadcast)."""
    (*shape, n0, rows, cols), (*strides, s0, sr, sc) = view
    if n0 != nb:
        return None
    if (s0, sr) == (0, 0):
        stride = 0
    elif nb == 1:
        stride = sr
    elif rows == 1:
        stride = s0
    elif s0 == rows * sr:
        stride = sr
    else:
        return None
    return (*shape, nb * rows, cols), (*strides, stride, sc)


def merged_views(v, a, b, y):
    """Batch dims folded into M while B does not move along them: one GEMM of
    nb*M rows instead of nb GEMMs of M rows (ViT's sequence-first attention
    projections had become 197 one-row GEMMs). Views are returned unchanged
    where no dim folds."""
    while len(v[y][0]) > 2:
        nb = v[y][0][-3]
        (*b_shape, b_n, k, n), (*b_strides, b_s, sk, sn) = v[b]
        if b_s != 0 and b_n != 1:
            return v
        merged = {x: _merge_rows(view, nb) for x, view in v.items() if x != b}
        if None in merged.values():
            return v
        v = {**merged, b: ((*b_shape, k, n), (*b_strides, sk, sn))}
    return v


def _output_ranges(batch, M, N) -> dict:
    return {**{f"b{i}": f"0:{n}" for i, n in enumerate(batch)}, "m": f"0:{M}", "n": f"0:{N}"}


def _bias_code(call, v, index) -> str:
    c, y = call.input(2), call.output(0)
    beta = call.attr("beta", 1.0)
    scale = "" if beta == 1.0 else f"({call.dtype(y).ctype})({beta!r}) * "
    value = f"{scale}_{c}[{flat(v[c], index)}]" if c else "0"
    return f"_y[{flat(v[y], index)}] = {value};"


@implements(OP_TYPE, internal=True)
def matmul_strided(call):
    """Y[b.., m, n] = beta * C[b.., m, n] + sum_k alpha * A[b.., m, k] * B[b.., k, n]."""
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    v, batch, M, N, K = _dims(call)
    sdfg, state = _stored_sdfg(call, "matmul_strided")
    if 0 in batch + (M, N):
        return sdfg
    index = [f"b{i}" for i in range(len(batch))]
    ctype = call.dtype(y).ctype
    terms = (f"{ctype} acc = 0;\n"
             f"for (long long k = 0; k < {cpp_size(K)}; ++k) "
             f"acc += _{a}[{flat(v[a], index + ['m', 'k'])}] * _{b}[{flat(v[b], index + ['k', 'n'])}];\n")
    bias = f" + {call.attr('beta', 1.0)!r} * _{c}[{flat(v[c], index + ['m', 'n'])}]" if c else ""
    code = terms + f"_y[{flat(v[y], index + ['m', 'n'])}] = {call.attr('alpha', 1.0)!r} * acc{bias};"
    _pointwise(call, state, "matmul", _output_ranges(batch, M, N),
               [x for x in dict.fromkeys((a, b, c)) if x], code)
    return sdfg


def blas_operand(shape, strides):
    """('N' or 'T', leading dimension) reading a (rows, cols) view row-major, or None.

    Rows or columns must be contiguous; a size-1 dimension's stride is free.
    """
    (rows, cols), (sr, sc) = shape, strides
    if cols == 1 or sc == 1:
        ld = _leading(rows, sr, cols)
        if ld is not None:
            return "N", ld
    if rows == 1 or sr == 1:
        ld = _leading(cols, sc, rows)
        if ld is not None:
            return "T", ld
    return None


def _leading(count, stride, width):
    """The leading dimension of ``count`` vectors ``stride`` apart, each ``width``
    contiguous values: the BLAS takes at least max(1, width); None when the stride is
    not that at every size."""
    least = width if surely(width >= 1) else 1
    if count == 1:
        return least
    return stride if surely(stride >= least) else None


def gemm_plan(view_of: dict, a: str, b: str, y: str):
    """How one BLAS call per batch index computes Y, or None when it cannot.

    Returns (M, N, K, (ta, lda, A), (tb, ldb, B), ldy): when Y's columns are
    not contiguous but its rows are, Y^T = B^T A^T is computed instead.
    """
    (*_, M, N), (*_, K) = view_of[y][0], view_of[a][0]
    pa = blas_operand(view_of[a][0][-2:], view_of[a][1][-2:])
    pb = blas_operand(view_of[b][0][-2:], view_of[b][1][-2:])
    py = blas_operand(view_of[y][0][-2:], view_of[y][1][-2:])
    if None in (pa, pb, py):
        return None
    if py[0] == "N":
        return M, N, K, (pa[0], pa[1], a), (pb[0], pb[1], b), py[1]
    flip = {"N": "T", "T": "N"}
    return N, M, K, (flip[pb[0]], pb[1], b), (flip[pa[0]], pa[1], a), py[1]


_BLAS_TYPES = {dace.float32: ("s", "float"), dace.float64: ("d", "double")}
BLAS_ENVIRONMENTS = {"OpenBLAS": "OpenBLAS", "MKL": "IntelMKL"}  # CPU CBLAS libraries


@implements(OP_TYPE, impl="blas", internal=True)
def matmul_strided_blas(call):
    a, b, y = call.input(0), call.input(1), call.output(0)
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    v, batch, M, N, K = _dims(call)
    merged = merged_views(v, a, b, y)
    plan = gemm_plan(merged, a, b, y)
    if plan is not None:
        v = merged
        *batch, M, N = v[y][0]
        batch = tuple(batch)
    else:
        plan = gemm_plan(v, a, b, y)
    dtype = call.dtype(y)
    # cuBLAS (a GPU build) would need device pointers and its own strided call:
    # the map implementation runs there instead.
    if (plan is None or dtype not in _BLAS_TYPES or 0 in batch + (M, N, K)
            or impl not in BLAS_ENVIRONMENTS):
        return matmul_strided(call)
    sdfg, state = _stored_sdfg(call, "matmul_strided_blas")
    if call.input(2):
        init = sdfg.add_state_before(state, "bias")
        index = [f"b{i}" for i in range(len(batch))] + ["m", "n"]
        # OpenMP over all but the last dim: GCC vectorizes the row loop left inside
        ranges = _output_ranges(batch, M, N)
        _pointwise(call, init, "bias", ranges, [call.input(2)], _bias_code(call, v, index),
                   collapse=max(1, len(ranges) - 1))
    conns = {a: "_a", b: "_b"}
    code = _gemm_code(plan, v, conns, y, batch, dtype, call.attr("alpha", 1.0),
                      1.0 if call.input(2) else 0.0)
    library_tasklet(sdfg, state, "gemm", {conn: arr for arr, conn in conns.items()}, ("_y", y),
                    code, blas_environment(impl))
    return sdfg


# A GEMM of up to this many multiply-adds is too small for the BLAS to split across
# threads with profit (attention's per-head products: 128x128x64 is 1M): a batch of
# them runs one GEMM per thread instead, in an OpenMP loop over the batch, where
# OpenBLAS and MKL run single-threaded.
SMALL_GEMM = 1 << 22


def _gemm_code(plan, view_of, conns, y, batch, dtype, alpha, beta) -> str:
    """Nested loops over the batch, one cblas_?gemm each, pointers offset by stride;
    the loops run in parallel when the GEMMs are small (``SMALL_GEMM``)."""
    M, N, K, (ta, lda, first), (tb, ldb, second), ldy = plan
    prefix, ctype = _BLAS_TYPES[dtype]
    loops = [f"__b{i}" for i in range(len(batch))]
    at = {c: flat(view_of[c], loops) for c in view_of}
    trans = {"N": "CblasNoTrans", "T": "CblasTrans"}
    c = cpp_size
    call = (f"cblas_{prefix}gemm(CblasRowMajor, {trans[ta]}, {trans[tb]}, {c(M)}, {c(N)}, "
            f"{c(K)}, ({ctype})({alpha!r}), {conns[first]} + ({at[first]}), {c(lda)}, "
            f"{conns[second]} + ({at[second]}), {c(ldb)}, ({ctype})({beta!r}), "
            f"_y + ({at[y]}), {c(ldy)});")
    lines = [f"for (long long {p} = 0; {p} < {c(n)}; ++{p}) {{" for p, n in zip(loops, batch)]
    count = 1
    for n in batch:
        count *= n
    parallel = f"#pragma omp parallel for collapse({len(loops)}) schedule(static)"
    small = (count > 1) & (M * N * K <= SMALL_GEMM)   # Y's blocks are disjoint: no race
    loop = "\n".join(lines + [call] + ["}"] * len(loops))
    if surely(small):
        return f"{parallel}\n{loop}"
    if maybe(small):
        # symbolic sizes: decided per call, as the fixed program decides once. Not an
        # OpenMP if() clause: BLAS called inside its inactive region ran 3.5x slower
        # (Whisper-tiny's attention at 1500 frames, 14-16 against 3.3-4.4 ms)
        return (f"if (({c(count)}) > 1 && (long long)({c(M)}) * ({c(N)}) * ({c(K)}) <= "
                f"{SMALL_GEMM}LL) {{\n{parallel}\n{loop}\n}} else {{\n{loop}\n}}")
    return loop


def blas_environment(impl: str):
    """The DaCe environment that links CBLAS library ``impl`` (a key of BLAS_ENVIRONMENTS)."""
    from dace.libraries.blas import environments
    return getattr(environments, BLAS_ENVIRONMENTS[impl])
