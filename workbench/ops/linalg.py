"""MatMul and Gemm: a pure map implementation and a BLAS one.

The pure maps work for every dtype. The BLAS expansion (float32/float64)
folds leading batch dimensions into GEMM rows when the right operand is a
plain matrix (one large GEMM instead of many small ones), and uses a
batched GEMM when both operands carry the same batch.
"""
import math

import dace
from dace.libraries.blas import BatchedMatMul, Gemm

from workbench.build.settings import blas_implementation
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet
from workbench.ops.symbolic_sizes import broadcast_dim

_SUM = "lambda p, q: p + q"
_BLAS_TYPES = (dace.float32, dace.float64)


def _matmul_shapes(a_shape, b_shape):
    """ONNX/numpy MatMul: (batch_a, batch_b, M, K, N), batches padded to one rank."""
    a = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    batch_a, batch_b = a[:-2], b[:-2]
    n = max(len(batch_a), len(batch_b))
    pa = (1,) * (n - len(batch_a)) + batch_a
    pb = (1,) * (n - len(batch_b)) + batch_b
    return pa, pb, a[-2], a[-1], b[-1]


def matmul_sum(call, product: str = "x * w", extra: dict = None, acc_type=None, b_pos: int = 1):
    """acc[b, m, n] = sum_k product(x = A[b, m, k], w = B[b, k, n]), batch dims broadcast.

    A is input 0, B input ``b_pos``; ``extra`` maps more tasklet inputs to memlet text
    over b0.., m, n, k. ``acc`` is Y (seen as batch + (M, N)), or a transient of
    ``acc_type`` for the caller to finish. Returns (sdfg, last state, acc).
    """
    a, b, y = call.input(0), call.input(b_pos), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b))
    batch = tuple(broadcast_dim(x, z) for x, z in zip(pa, pb))
    sdfg, state = connector_sdfg(call, "matmul", {
        a: pa + (M, K), b: pb + (K, N), y: batch + (M, N)})
    acc = y
    if acc_type is not None:
        acc, _ = sdfg.add_transient("acc", batch + (M, N), acc_type)
    if 0 in batch + (M, N):
        return sdfg, state, acc
    bp = [f"b{i}" for i in range(len(batch))]
    ai = [("0" if n == 1 else p) for n, p in zip(pa, bp)]
    bi = [("0" if n == 1 else p) for n, p in zip(pb, bp)]
    out_ranges = {**{p: f"0:{n}" for p, n in zip(bp, batch)}, "m": f"0:{M}", "n": f"0:{N}"}
    at = f"{acc}[{', '.join(bp + ['m', 'n'])}]"
    init = sdfg.add_state_before(state, "zero")
    parallel(mapped_tasklet(init, "zero", out_ranges, {}, "c = 0", {"c": dace.Memlet(at)}))
    if K:
        mapped_reduction(state, "matmul", out_ranges, {"k": f"0:{K}"}, {
            "x": dace.Memlet(f"{a}[{', '.join(ai + ['m', 'k'])}]"),
            "w": dace.Memlet(f"{b}[{', '.join(bi + ['k', 'n'])}]"),
            **{name: dace.Memlet(text) for name, text in (extra or {}).items()}},
            f"c = {product}", {"c": dace.Memlet(at, wcr=_SUM)})
    return sdfg, state, acc


@implements("MatMul")
def matmul_pure(call):
    refuse_float16(call)
    return matmul_sum(call)[0]


@implements("MatMul", impl="blas")
def matmul_blas(call):
    refuse_float16(call)
    a, b, y = call.input(0), call.input(1), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b))
    impl = _blas(call)
    rows = math.prod(pa) * M if all(n == 1 for n in pb) else M
    # DaCe's Gemm/BatchedMatMul squeeze size-1 dims, then refuse them; BLAS has no ints.
    if 1 in (rows, K, N) or 0 in (rows, K, N) or call.dtype(a) not in _BLAS_TYPES:
        return matmul_pure(call)
    if all(n == 1 for n in pb):  # fold A's batch into rows: one GEMM
        sdfg, state = connector_sdfg(call, "matmul_gemm", {a: (rows, K), b: (K, N), y: (rows, N)})
        node = Gemm("gemm", alpha=1, beta=0)
    elif pa == pb:
        nb = math.prod(pa)
        sdfg, state = connector_sdfg(call, "matmul_bmm", {a: (nb, M, K), b: (nb, K, N),
                                                          y: (nb, M, N)})
        node = BatchedMatMul("bmm")
    else:
        return matmul_pure(call)  # mixed batch broadcasting: no single BLAS call
    node.implementation = impl
    state.add_node(node)
    wire(sdfg, state, node, {a: "_a", b: "_b"}, {y: "_c"})
    return sdfg


def _gemm_dims(call):
    a, b = call.input(0), call.input(1)
    ta, tb = call.attr("transA", 0), call.attr("transB", 0)
    M, K = call.shape(a)[::-1] if ta else call.shape(a)
    N = call.shape(b)[0] if tb else call.shape(b)[1]
    return M, K, N


@implements("Gemm")
def gemm_pure(call):
    """Y = alpha * A' @ B' + beta * C."""
    refuse_float16(call)
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    alpha, beta = call.attr("alpha", 1.0), call.attr("beta", 1.0)
    M, K, N = _gemm_dims(call)
    # A and B are read by memlets: either may be a column slice read in place
    sdfg, state = connector_sdfg(call, "gemm", strided=(a, b))
    if 0 in (M, N):
        return sdfg
    _bias(call, sdfg.add_state_before(state, "init"), c, y, beta, M, N, accumulate=False)
    if K:
        ai = "k, m" if call.attr("transA", 0) else "m, k"
        bi = "n, k" if call.attr("transB", 0) else "k, n"
        mapped_reduction(state, "gemm", {"m": f"0:{M}", "n": f"0:{N}"}, {"k": f"0:{K}"}, {
            "x": dace.Memlet(f"{a}[{ai}]"), "w": dace.Memlet(f"{b}[{bi}]")},
            f"c = {alpha} * x * w", {"c": dace.Memlet(f"{y}[m, n]", wcr=_SUM)})
    return sdfg


@implements("Gemm", impl="blas")
def gemm_blas(call):
    refuse_float16(call)
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    impl = _blas(call)
    alpha, beta = call.attr("alpha", 1.0), call.attr("beta", 1.0)
    M, K, N = _gemm_dims(call)
    if (1 in (M, N, K) or 0 in (M, N, K) or call.dtype(a) not in _BLAS_TYPES
            or not math.isfinite(alpha)):
        # DaCe's Gemm refuses size-1 dims; BLAS has no ints; DaCe's BLAS expansion
        # writes alpha into C++ as Python prints it ('inf', 'nan': no C++ names)
        return gemm_pure(call)
    # DaCe's BLAS expansion takes the leading dimensions from A's and B's strides
    sdfg, state = connector_sdfg(call, "gemm_blas", strided=(a, b))
    node = Gemm("gemm", transA=bool(call.attr("transA", 0)), transB=bool(call.attr("transB", 0)),
                alpha=alpha, beta=0)
    node.implementation = impl
    state.add_node(node)
    wire(sdfg, state, node, {a: "_a", b: "_b"}, {y: "_c"})
    if c is not None and beta != 0:
        add_bias_state(call, sdfg, state, M, N)
    return sdfg


def add_bias_state(call, sdfg, state, M, N):
    """Gemm's ``Y += beta * C``, in a state after ``state`` (the product's)."""
    _bias(call, sdfg.add_state_after(state, "bias"), call.input(2), call.output(0),
          call.attr("beta", 1.0), M, N, accumulate=True)


def _blas(call) -> str:
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    return impl


def _bias(call, state, c, y, beta, M, N, accumulate: bool):
    """Y[m, n] = (Y[m, n] if accumulate else 0) + beta * C[m, n], C broadcast to (M, N)."""
    inputs, terms = {}, []
    if accumulate:
        inputs["acc"] = dace.Memlet(f"{y}[m, n]")
        terms.append("acc")
    if c is not None and beta != 0:
        inputs["b"] = dace.Memlet(f"{c}[{bias_index(call.shape(c))}]")
        terms.append(f"{beta} * b")
    parallel(mapped_tasklet(state, "bias", {"m": f"0:{M}", "n": f"0:{N}"}, inputs,
                            f"o = {' + '.join(terms) or '0'}", {"o": dace.Memlet(f"{y}[m, n]")}))


def bias_index(shape) -> str:
    """Index of C for Y[m, n] (C broadcasts unidirectionally to (M, N))."""
    names = ("m", "n")[2 - len(shape):]
    return ", ".join(var if size != 1 else "0" for size, var in zip(shape, names)) or "0"


def wire(sdfg, state, node, inputs: dict, outputs: dict):
    """Whole-array edges from a new read of each array of ``inputs`` to ``node``'s
    connector, and from ``node``'s connectors to a new write of each array of ``outputs``
    (both: array -> connector)."""
    for arr, conn in inputs.items():
        state.add_edge(state.add_read(arr), None, node, conn,
                       dace.Memlet.from_array(arr, sdfg.arrays[arr]))
    for arr, conn in outputs.items():
        state.add_edge(node, conn, state.add_write(arr), None,
                       dace.Memlet.from_array(arr, sdfg.arrays[arr]))
