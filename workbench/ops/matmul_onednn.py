"""MatMul and Gemm on oneDNN (implementation ``onednn``): the weights packed once.

One C++ tasklet calls ``wb_dnnl_matmul`` (workbench/build/native/wb_dnnl.cpp)
with a static descriptor: rows of A (a MatMul's batch dimensions folded into
them) and of Y at their own strides, B as stored or transposed (Gemm's
``transB``), and a bias row when a Gemm's C is one. B is reordered into the
kernel's blocked layout on the first call and kept while the program lives,
as onnxruntime prepacks initializers: this implementation is for B a
constant of the program. ChooseImplementation and GemmOnOneDNN offer it only
there (``b_is_weight``); an expansion whose B is computed inside the program
(a transient) takes the BLAS implementation instead.

What is not this shape (float64, B with batch dimensions, A transposed,
alpha other than 1, rows that do not fold) expands as BLAS.

A node whose row count is a symbol may name the row counts where the library
runs (``library_rows``, set by GemmOnOneDNN from timings at several row
counts): it then expands to a branch on the row count, each call taking the
library or the BLAS, so one program holds the faster library at every size.
"""
import math

import dace

from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv_onednn import library_call, library_ready, strides_of
from workbench.ops.linalg import add_bias_state
from workbench.ops.registry import expand_as, implements, keep_strides, outer_layout_sdfg


def rows_of(shape, strides):
    """(rows, row stride) of an array whose dimensions but the last fold into evenly
    spaced rows with contiguous columns, else None."""
    if len(shape) < 2 or strides[-1] != 1:
        return None
    for i in range(len(shape) - 2):
        if shape[i] != 1 and strides[i] != strides[i + 1] * shape[i + 1]:
            return None
    return math.prod(shape[:-1]), strides[-2]


def gemm_desc(call) -> onednn.MatMulDesc:
    """The call's product as the shim's descriptor, without the bias (raises call.fail
    when the library cannot run it as one)."""
    a, b, y = call.input(0), call.input(1), call.output(0)
    if any(call.dtype(c) != dace.float32 for c in (a, b, y)):
        raise call.fail("the oneDNN GEMM is float32 only")
    gemm = call.op_type == "Gemm"
    if gemm and (call.attr("transA", 0) or call.attr("alpha", 1.0) != 1.0):
        raise call.fail("the oneDNN GEMM takes A as stored and alpha 1")
    bs = call.shape(b)
    if len(bs) != 2:
        raise call.fail("the oneDNN GEMM takes a 2-D B (no batch of weights)")
    transposed = gemm and call.attr("transB", 0)
    k, n = bs[::-1] if transposed else bs
    a_rows = rows_of(call.shape(a), strides_of(call, a))
    y_rows = rows_of(call.shape(y), strides_of(call, y))
    if a_rows is None or y_rows is None or a_rows[0] != y_rows[0] or call.shape(a)[-1] != k:
        raise call.fail("A's and Y's rows do not fold into one matrix each")
    bst = strides_of(call, b)
    d = onednn.MatMulDesc()
    for f, v in (("m", a_rows[0]), ("k", k), ("n", n), ("lda", a_rows[1]), ("ldc", y_rows[1])):
        onednn.set_size(d, f, v)
    for i, s in enumerate((bst[1], bst[0]) if transposed else bst):
        onednn.set_size(d, "b_strides", s, i)
    if 0 in (a_rows[0], k, n):
        raise call.fail("an empty product")
    return d



def b_is_transient(call) -> bool:
    return call.inputs[call.input(1)].transient


def _library(call):
    """The library's SDFG and the product's descriptor (raises call.fail where the
    library cannot run it)."""
    library_ready(call)
    if b_is_transient(call):
        raise call.fail("B is computed inside the program: the library packs only constants")
    d = gemm_desc(call)
    a, b, c, y = call.input(0), call.input(1), call.input(2), call.output(0)
    bias = None
    if call.op_type == "Gemm" and c is not None and call.attr("beta", 1.0) != 0:
        if call.attr("beta", 1.0) == 1.0 and call.shape(c) in ((d.n,), (1, d.n)):
            bias = c
    d.has_bias = int(bias is not None)
    operands = {"__a": a, "__b": b, **({"__bias": bias} if bias else {})}
    sdfg = library_call(call, "gemm", d, operands, y, "wb_dnnl_matmul",
                        f"__a, __b, {'__bias' if bias else 'nullptr'}, __y")
    if call.op_type == "Gemm" and c is not None and call.attr("beta", 1.0) != 0 and not bias:
        add_bias_state(call, sdfg, sdfg.sink_nodes()[0], onednn.size_of_field(d, "m"), d.n)
    return sdfg, d


@implements("MatMul", "Gemm", impl="onednn")
def gemm_onednn(call):
    try:
        library, desc = _library(call)
    except UnsupportedCaseError:
        return expand_as(call, "blas")
    rows = onednn.size_of_field(desc, "m")
    if not call.node.library_rows or isinstance(rows, int):
        return library
    return _by_rows(call, library, library_condition(rows, call.node.library_rows))


def library_condition(rows, flat: list) -> str:
    """When the library runs: ``rows`` (an expression) within one of the [lo, hi) pairs
    in ``flat`` (hi 0: no end), as an interstate condition."""
    spans = []
    for lo, hi in zip(flat[::2], flat[1::2]):
        parts = ([f"({rows}) >= {lo}"] if lo else []) + ([f"({rows}) < {hi}"] if hi else [])
        spans.append(" and ".join(parts) or "True")
    return " or ".join(f"({s})" for s in spans)


def _by_rows(call, library, condition: str):
    """The library's SDFG and the BLAS's, each nested in its own state, and a branch on
    the row count between them."""
    blas = expand_as(call, "blas")
    keep_strides(blas, call)
    sdfg = outer_layout_sdfg(call, "gemm_by_rows")
    pick, done = sdfg.add_state("pick", is_start_block=True), sdfg.add_state("done")
    for name, inner, when in (("onednn", library, condition),
                              ("blas", blas, f"not ({condition})")):
        state = sdfg.add_state(name)
        for symbol in inner.free_symbols - set(sdfg.symbols):
            sdfg.add_symbol(symbol, dace.int64)
        nested = state.add_nested_sdfg(inner, sdfg, set(call.inputs), set(call.outputs))
        for conn in call.inputs:
            state.add_edge(state.add_read(conn), None, nested, conn,
                           dace.Memlet.from_array(conn, sdfg.arrays[conn]))
        for conn in call.outputs:
            state.add_edge(nested, conn, state.add_write(conn), None,
                           dace.Memlet.from_array(conn, sdfg.arrays[conn]))
        sdfg.add_edge(pick, state, dace.InterstateEdge(condition=when))
        sdfg.add_edge(state, done, dace.InterstateEdge())
    return sdfg
