"""MatMul and Gemm: a pure map implementation and a BLAS one.

The BLAS expansion folds leading batch dimensions into GEMM rows when the
right operand is a plain matrix (one large GEMM instead of many small
ones), and uses a batched GEMM when both operands carry the same batch.
"""
import math

import dace
from dace.libraries.blas import BatchedMatMul, Gemm

from workbench.build.settings import blas_implementation
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet


def _matmul_shapes(a_shape, b_shape):
    """ONNX/numpy MatMul: (batch_a, batch_b, M, K, N, output batch)."""
    a = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    batch_a, batch_b = a[:-2], b[:-2]
    n = max(len(batch_a), len(batch_b))
    pa = (1,) * (n - len(batch_a)) + batch_a
    pb = (1,) * (n - len(batch_b)) + batch_b
    return pa, pb, a[-2], a[-1], b[-1]


@implements("MatMul")
def matmul_pure(call):
    """C[b, m, n] = sum_k A[b, m, k] * B[b, k, n], batch dims broadcast."""
    a, b, y = call.input(0), call.input(1), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b))
    batch = tuple(max(x, z) for x, z in zip(pa, pb))
    sdfg, state = connector_sdfg(call, "matmul", {
        a: pa + (M, K), b: pb + (K, N), y: batch + (M, N)})
    bp = [f"b{i}" for i in range(len(batch))]
    ai = [("0" if n == 1 else p) for n, p in zip(pa, bp)]
    bi = [("0" if n == 1 else p) for n, p in zip(pb, bp)]
    init = sdfg.add_state_before(state, "zero")
    mapped_tasklet(init, "zero", {**{p: f"0:{n}" for p, n in zip(bp, batch)}, "m": f"0:{M}",
                                     "n": f"0:{N}"}, {}, "c = 0",
                            {"c": dace.Memlet(f"{y}[{', '.join(bp + ['m', 'n'])}]")})
    ranges = {**{p: f"0:{n}" for p, n in zip(bp, batch)}, "m": f"0:{M}", "n": f"0:{N}",
              "k": f"0:{K}"}
    mapped_tasklet(state, "matmul", ranges, {
        "x": dace.Memlet(f"{a}[{', '.join(ai + ['m', 'k'])}]"),
        "w": dace.Memlet(f"{b}[{', '.join(bi + ['k', 'n'])}]")}, "c = x * w", {
        "c": dace.Memlet(f"{y}[{', '.join(bp + ['m', 'n'])}]", wcr="lambda p, q: p + q")})
    return sdfg


@implements("MatMul", impl="blas")
def matmul_blas(call):
    a, b, y = call.input(0), call.input(1), call.output(0)
    pa, pb, M, K, N = _matmul_shapes(call.shape(a), call.shape(b))
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    rows = math.prod(pa) * M if all(n == 1 for n in pb) else M
    if 1 in (rows, K, N):  # DaCe's Gemm/BatchedMatMul squeeze size-1 dims, then refuse them
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
    _wire(sdfg, state, node, {a: "_a", b: "_b"}, {y: "_c"})
    return sdfg


@implements("Gemm")
def gemm_pure(call):
    """Y = alpha * A' @ B' + beta * C."""
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    ta, tb = call.attr("transA", 0), call.attr("transB", 0)
    alpha, beta = call.attr("alpha", 1.0), call.attr("beta", 1.0)
    M, K = call.shape(a)[::-1] if ta else call.shape(a)
    N = call.shape(b)[0] if tb else call.shape(b)[1]
    sdfg, state = connector_sdfg(call, "gemm")
    init = sdfg.add_state_before(state, "init")
    _bias_init(call, init, c, y, beta, M, N)
    ai = "k, m" if ta else "m, k"
    bi = "n, k" if tb else "k, n"
    mapped_tasklet(state, "gemm", {"m": f"0:{M}", "n": f"0:{N}", "k": f"0:{K}"}, {
        "x": dace.Memlet(f"{a}[{ai}]"), "w": dace.Memlet(f"{b}[{bi}]")},
        f"c = {alpha} * x * w", {"c": dace.Memlet(f"{y}[m, n]", wcr="lambda p, q: p + q")})
    return sdfg


@implements("Gemm", impl="blas")
def gemm_blas(call):
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    impl = blas_implementation()
    if impl is None:
        raise call.fail("no BLAS library found (install libopenblas-dev liblapacke-dev)")
    ta, tb = bool(call.attr("transA", 0)), bool(call.attr("transB", 0))
    alpha, beta = call.attr("alpha", 1.0), call.attr("beta", 1.0)
    M = call.shape(a)[1] if ta else call.shape(a)[0]
    N = call.shape(b)[0] if tb else call.shape(b)[1]
    if 1 in (M, N, call.shape(a)[0 if ta else 1]):  # DaCe's Gemm refuses size-1 dims
        return gemm_pure(call)
    sdfg, state = connector_sdfg(call, "gemm_blas")
    node = Gemm("gemm", transA=ta, transB=tb, alpha=alpha, beta=0)
    node.implementation = impl
    state.add_node(node)
    _wire(sdfg, state, node, {a: "_a", b: "_b"}, {y: "_c"})
    if c is not None and beta != 0:  # bias epilogue, after the GEMM
        epilogue = sdfg.add_state_after(state, "bias")
        _bias_add(call, epilogue, c, y, beta, M, N)
    return sdfg


def _bias_init(call, state, c, y, beta, M, N):
    if c is None or beta == 0:
        mapped_tasklet(state, "init", {"m": f"0:{M}", "n": f"0:{N}"}, {}, "o = 0",
                                 {"o": dace.Memlet(f"{y}[m, n]")})
    else:
        mapped_tasklet(state, "init", {"m": f"0:{M}", "n": f"0:{N}"},
                                 {"b": dace.Memlet(f"{c}[{_bias_index(call.shape(c), M, N)}]")},
                                 f"o = {beta} * b", {"o": dace.Memlet(f"{y}[m, n]")})


def _bias_add(call, state, c, y, beta, M, N):
    mapped_tasklet(state, "bias", {"m": f"0:{M}", "n": f"0:{N}"},
                             {"b": dace.Memlet(f"{c}[{_bias_index(call.shape(c), M, N)}]"),
                              "acc": dace.Memlet(f"{y}[m, n]")},
                             f"o = acc + {beta} * b", {"o": dace.Memlet(f"{y}[m, n]")})


def _bias_index(shape, M, N) -> str:
    """Index of C for Y[m, n] (C broadcasts unidirectionally to (M, N))."""
    idx = []
    for dim, (size, var) in enumerate(zip(shape, ("m", "n")[2 - len(shape):])):
        idx.append(var if size != 1 else "0")
    return ", ".join(idx) or "0"


def _wire(sdfg, state, node, inputs: dict, outputs: dict):
    for arr, conn in inputs.items():
        state.add_edge(state.add_read(arr), None, node, conn,
                       dace.Memlet.from_array(arr, sdfg.arrays[arr]))
    for arr, conn in outputs.items():
        state.add_edge(node, conn, state.add_write(arr), None,
                       dace.Memlet.from_array(arr, sdfg.arrays[arr]))
