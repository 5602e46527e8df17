"""GemmOnOneDNN: a GEMM with constant weights runs on oneDNN where it measured faster.

Rules:
1. Matches a MatMul, a Gemm, or a GemmEpilogue whose core is one, not yet on
   oneDNN, when oneDNN and the BLAS are installed, where the library can
   take it as one packed-weight product (``matmul_onednn.gemm_desc``):
   float32; B a weight of the session (a constant no node writes, 2-D),
   which the library reorders into its blocked layout once; A's and Y's
   rows fold into one matrix each; a Gemm's A as stored and alpha 1. oneDNN
   must have a kernel for it other than its reference loops.
2. It applies only where oneDNN measured at least 5 % faster than the BLAS
   for this shape on this machine (``workbench/build/gemm_timing.py``:
   timed once per machine and shape in a child process, then read from the
   cache, so a replayed recipe makes the same choice). The match names both
   times. A row count that is a symbol (a sequence length) is timed at
   several row counts; the node then keeps the ranges where oneDNN won
   (``library_rows``) and each call picks the library by its row count, so
   the plan is the same whatever size the session is checked at.
3. Only the implementation changes (an epilogue stays the sweep after the
   product), so the program's meaning is the node's.
"""
from transforms.graph import in_array, is_weight
from transforms.local.library_kernels import fast
from transforms.operator_transformation import OperatorTransformation
from workbench.build import gemm_timing, onednn
from workbench.errors import UnsupportedCaseError
from workbench.importer.symbol_names import dim_text
from workbench.ops.fused import core_view
from workbench.ops.matmul_onednn import gemm_desc
from workbench.ops.registry import make_call
from workbench.transformation_api import Refusal, register

GEMMS = {"MatMul", "Gemm"}


def gemm_call(sdfg, state, node):
    """The call of the product itself (an epilogue's core), or a Refusal."""
    call = make_call(node, state, sdfg)
    if node.op_type == "GemmEpilogue":
        if call.attr("core") not in GEMMS:
            return Refusal(f"{node.onnx_name}'s core is a {call.attr('core')}, "
                           f"not a MatMul or Gemm")
        call = core_view(call)
    return call


def constant_b(sdfg, state, node, call, weights):
    """Whether the product's B is a weight: the library packs it once."""
    return is_weight(sdfg, in_array(state, node, call.input(1)).data, weights)


@register
class GemmOnOneDNN(OperatorTransformation):
    level = "local"
    name = "GemmOnOneDNN"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = ("Run a GEMM with constant weights on oneDNN (weights packed once) where it "
                   "measured faster than the BLAS on this machine")
    op_types = GEMMS | {"GemmEpilogue"}
    needs_weights = True
    refusal = "{match.description}: oneDNN is no longer measured faster for {node.onnx_name}"

    def plan(self, sdfg, state, node, weights=None):
        name = node.onnx_name
        if node.implementation == "onednn":
            return Refusal(f"{name} already runs on oneDNN")
        if not onednn.available():
            return Refusal("oneDNN is not installed")
        call = gemm_call(sdfg, state, node)
        if isinstance(call, Refusal):
            return call
        if not constant_b(sdfg, state, node, call, weights):
            return Refusal(f"{name}'s B is not a weight: the library packs only constants")
        try:
            desc = gemm_desc(call)
        except UnsupportedCaseError as e:
            return Refusal(f"oneDNN cannot run {name}: {e}")
        ok, kernel = onednn.check(desc)
        if not ok or not fast(kernel):
            return Refusal(f"oneDNN has no fast kernel for {name}: {kernel or 'none'}")
        transposed = desc.b_strides[1] != 1
        rows = onednn.size_of_field(desc, "m")
        if not isinstance(rows, int):
            return self._by_rows(name, kernel, rows, desc.k, desc.n, transposed)
        times = gemm_timing.gemm_times(desc.m, desc.k, desc.n, transposed)
        if times is None:
            return Refusal("the BLAS to time against is not installed")
        if gemm_timing.faster(times) != "onednn":
            return Refusal(f"{name}: oneDNN measured {times['onednn']:.3f} ms against the "
                           f"BLAS's {times['blas']:.3f} ms ({desc.m}x{desc.k}x{desc.n})")
        return kernel, f"{desc.m}x{desc.k}x{desc.n}: {_times(times)}", []

    @staticmethod
    def _by_rows(name, kernel, rows, k, n, transposed):
        """A row count that is a symbol: the library where it measured faster at the probe
        row counts, the BLAS elsewhere, chosen per call; the same plan at every size."""
        found = gemm_timing.rows_where_faster(k, n, transposed)
        if found is None:
            return Refusal("the BLAS to time against is not installed")
        ranges, times = found
        rows = dim_text(rows)
        table = ", ".join(f"{m} rows {_times(t)}" for m, t in times.items())
        if not ranges:
            return Refusal(f"{name}: oneDNN measured faster at none of the row counts tried "
                           f"({rows} x {k} x {n}: {table})")
        where = ("at every row count" if ranges == [(0, None)] else
                 "where " + " or ".join(_span(rows, lo, hi) for lo, hi in ranges))
        flat = [] if ranges == [(0, None)] else [v or 0 for r in ranges for v in r]
        return kernel, f"{rows} x {k} x {n}, {where}: {table}", flat

    def describe(self, node, plan):
        kernel, text, _ = plan
        return f"{node.onnx_name}: {node.implementation} -> oneDNN {kernel} ({text})"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        node.implementation = "onednn"
        node.library_rows = list(plan[2])


def _times(t) -> str:
    return f"{t['onednn']:.3f} ms, BLAS {t['blas']:.3f} ms"


def _span(rows, lo, hi) -> str:
    if hi is None:
        return f"{rows} >= {lo}"
    return f"{rows} < {hi}" if lo == 0 else f"{lo} <= {rows} < {hi}"
