"""FoldTransposeIntoMatMul: a GEMM reads (or writes) a transposed tensor in place.

Rules:
1. Matches a Transpose between a MatMul (or MatMulStrided) and one of its
   tensors: feeding A or B, or taking Y. The tensor between them is a
   transient only these two nodes touch; the Transpose's other side is
   row-major.
2. The MatMul becomes a MatMulStrided (``workbench/ops/layout_ops.py``)
   whose view of that operand is the Transpose's other side seen through
   the permutation: strides, no copy. BERT's head split (Reshape +
   Transpose(0, 2, 1, 3) or (0, 2, 3, 1) into the score and context
   MatMuls) and head merge (Transpose(0, 2, 1, 3) + Reshape) fold this way.
3. Only when one BLAS call per batch index still computes it (each matrix
   has contiguous rows or columns): a strided pure GEMM would cost more
   than the copy it saves.
4. A Gemm's A or B fed by a Transpose flips transA / transB instead.
"""
from transforms.layout.strided import (blas_friendly, implementation_for, node_views,
                                       set_views, strided_node, through)
from transforms.layout.views import (data_input, data_output, drop_array_if_unused, full,
                                     owned_here, plain_array, producer, row_major)
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.transformation_api import Refusal, register

TARGETS = {"MatMul", "MatMulStrided", "Gemm"}


def _perm(node, rank: int) -> list:
    return list(node.attrs.get("perm") or range(rank)[::-1])


def _transpose_in(sdfg, state, node, conn):
    """(Transpose, its row-major input, the transposed transient) feeding ``conn``, or
    a ``Refusal``."""
    t = next((e.src for e in state.in_edges(node) if e.dst_conn == conn), None)
    if t is None:
        return Refusal(f"{conn}: no input")
    tr = producer(state, t)
    if tr is None or tr.op_type != "Transpose":
        return Refusal(f"{conn}: '{t.data}' is not written by a Transpose")
    if not owned_here(sdfg, state, t) or state.out_degree(t) != 1:
        return Refusal(f"{conn}: '{t.data}' from {tr.onnx_name} is read elsewhere too")
    if state.out_degree(tr) != 1:
        return Refusal(f"{conn}: {tr.onnx_name} writes more than one tensor")
    s = data_input(state, tr)
    return (tr, s, t) if s is not None and plain_array(sdfg, s) else \
        Refusal(f"{conn}: the input of {tr.onnx_name} is not row-major")


def _transpose_out(sdfg, state, node):
    """(Transpose, its row-major output, the product's transient) taking Y."""
    y = data_output(state, node)
    if y is None or not owned_here(sdfg, state, y) or state.out_degree(y) != 1:
        return Refusal("Y: its output is a graph output or read by more than one node"
                       if y is not None else "Y: no output")
    tr = state.out_edges(y)[0].dst
    if not isinstance(tr, OnnxOp) or tr.op_type != "Transpose":
        return Refusal(f"Y: '{y.data}' is not read by a Transpose")
    z = data_output(state, tr)
    reads = {e.src for e in state.in_edges(node)}
    if z is None or state.in_degree(z) != 1 or not plain_array(sdfg, z) or z in reads:
        return Refusal(f"Y: the output of {tr.onnx_name} is not a row-major tensor written "
                       f"only there")
    return tr, z, y


def plan(sdfg, state, node, operand: str):
    """(Transpose, outer access node, inner access node, new views) or a ``Refusal``
    (None for a Gemm's Y, which has no transposed form)."""
    if node.op_type == "Gemm":
        found = None if operand == "Y" else _transpose_in(sdfg, state, node, operand)
        if isinstance(found, Refusal) or found is None:
            return found
        return found + (None,) if _perm(found[0], 2) == [1, 0] else \
            Refusal(f"{operand}: {found[0].onnx_name} is not a 2-D transpose")
    views = node_views(sdfg, state, node)
    found = (_transpose_out(sdfg, state, node) if operand == "Y"
             else _transpose_in(sdfg, state, node, operand))
    if isinstance(found, Refusal):
        return found
    if views is None:
        return Refusal(f"{node.onnx_name}'s operands are not views one GEMM can read")
    tr, outer, inner = found
    outer_shape, inner_shape = sdfg.arrays[outer.data].shape, sdfg.arrays[inner.data].shape
    perm, rm = _perm(tr, len(outer_shape)), row_major(outer_shape)
    if operand == "Y":  # inner dim j lands on outer dim perm^-1[j]
        where = [rm[perm.index(j)] for j in range(len(perm))]
    else:  # inner dim i is outer dim perm[i]
        where = [rm[perm[i]] for i in range(len(perm))]
    key = operand.lower()
    view = through(views[key], inner_shape, where)
    if view is None:
        return Refusal(f"{operand}: {tr.onnx_name}'s permutation cannot be read as strides "
                       f"of one GEMM operand")
    views = {**views, key: view}
    return (tr, outer, inner, views) if blas_friendly(views) else \
        Refusal(f"{operand}: through {tr.onnx_name} no matrix would have contiguous rows or "
                f"columns (one BLAS call per batch index could not compute it)")


@register
class FoldTransposeIntoMatMul(OperatorTransformation):
    level = "layout"
    name = "FoldTransposeIntoMatMul"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = "Let a MatMul/Gemm read or write a transposed operand in place (strided BLAS)"
    op_types = TARGETS
    option_names = ("operand",)
    refusal = "{match.description} no longer applies"

    def choices(self, node):
        return [{"operand": operand} for operand in ("A", "B", "Y")]

    def plan(self, sdfg, state, node, weights=None, operand=None):
        """(operand, Transpose, outer access node, inner access node, new views) or None."""
        found = plan(sdfg, state, node, operand) if operand in ("A", "B", "Y") else None
        return (operand,) + found if found else found

    def roles(self, node, plan):
        return {"node": node, "transpose": plan[1]}

    def describe(self, node, plan):
        return f"fold {plan[1].onnx_name} into {node.onnx_name} ({plan[0]})"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        operand, tr, outer, inner, views = plan
        arrays = {e.dst_conn.lower(): e.src for e in state.in_edges(node)}
        arrays["y"] = data_output(state, node)
        arrays[operand.lower()] = outer
        state.remove_node(tr)
        state.remove_node(inner)
        drop_array_if_unused(sdfg, inner.data)
        if node.op_type == "MatMul":
            strided_node(sdfg, state, node, views, arrays, implementation_for(node.implementation))
            return
        if node.op_type == "Gemm":
            flag = "transA" if operand == "A" else "transB"
            attrs = node.attrs
            attrs[flag] = 0 if attrs.get(flag, 0) else 1
            node.set_attrs(attrs)
        else:
            set_views(node, views)
        if operand == "Y":
            state.add_edge(node, "Y", outer, None, full(sdfg, outer.data))
        else:
            state.add_edge(outer, None, node, operand, full(sdfg, outer.data))
