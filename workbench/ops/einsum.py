"""Einsum as its definition: Y[out] = sum over the other labels of the product of operands.

One map over every label of the equation accumulates into Y (write-conflict
resolution: sum) after a map that zeroes Y. Operands' ``...`` dims broadcast
like numpy's, aligned from the right; a repeated label in one operand reads
its diagonal. A BLAS-backed implementation for contractions that are
matrix products would be a separate ``impl``.
"""
import string

import dace

from workbench.ops.index_maps import check_shape, element_map, op_sdfg
from workbench.ops.registry import implements

_SUM = "lambda a, b: a + b"


def parse(equation: str, ranks: list):
    """(labels per operand, output labels); ``...`` dims become labels ``.0``, ``.1``, ..."""
    equation = equation.replace(" ", "")
    lhs, rhs = equation.split("->") if "->" in equation else (equation, None)
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"{len(terms)} operand terms for {len(ranks)} inputs")
    ell = [rank - (len(t) - 3) if "..." in t else 0 for t, rank in zip(terms, ranks)]
    width = max(ell, default=0)

    def labels(term, n):
        head, _, tail = term.partition("...")
        dots = [f".{k}" for k in range(width - n, width)] if "..." in term else []
        return list(head) + dots + list(tail)

    operands = [labels(t, n) for t, n in zip(terms, ell)]
    if rhs is None:
        letters = [c for t in terms for c in t if c in string.ascii_letters]
        out = [f".{k}" for k in range(width)] + sorted(c for c in set(letters)
                                                      if letters.count(c) == 1)
    else:
        out = labels(rhs, width)
    return operands, out


@implements("Einsum")
def einsum(call):
    y = call.output(0)
    conns, equation = list(call.inputs), call.attr("equation")
    terms = equation.replace(" ", "").split("->")[0].split(",")
    ranks = [len(call.shape(c)) if t else 0 for c, t in zip(conns, terms)]  # 0-d: stored (1,)
    try:
        operands, out = parse(equation, ranks)
    except ValueError as e:
        raise call.fail(f"equation {equation!r}: {e}") from None
    sizes = {}
    for conn, labels in zip(conns, operands):
        for label, n in zip(labels, call.shape(conn)):
            if sizes.get(label, 1) == 1:  # size-1 dims of ``...`` broadcast
                sizes[label] = n
    check_shape(call, y, tuple(sizes[lab] for lab in out) or (1,))
    order = out + sorted({lab for labels in operands for lab in labels} - set(out))
    param = {label: f"i{k}" for k, label in enumerate(order)}
    reads = {}
    for k, (conn, labels) in enumerate(zip(conns, operands)):
        index = [param[lab] if n == sizes[lab] else "0" for lab, n in zip(labels, call.shape(conn))]
        reads[f"a{k}"] = dace.Memlet(f"{conn}[{', '.join(index) or '0'}]")
    product = " * ".join(reads)
    out_index = ", ".join(param[lab] for lab in out) or "0"
    sdfg, state = op_sdfg(call, "einsum")
    ranges = [sizes[lab] for lab in order] or [1]
    if len(order) == len(out):  # nothing to sum: a plain element-wise map
        element_map(state, "einsum", y, ranges, product, reads, out_index=out_index)
        return sdfg
    element_map(state, "zero", y, call.shape(y), "0")
    then = sdfg.add_state_after(state, "accumulate")
    element_map(then, "einsum", y, ranges, product, reads, out_index=out_index, wcr=_SUM)
    return sdfg

