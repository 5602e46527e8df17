"""When an operator's implementation must stay one nested program at build time.

An ONNX operator in the graph starts after all its inputs are written and has
written all its outputs before any reader starts. DaCe's inlining of its
expansion (the build's simplify, ``InlineSDFG``) keeps only the order of the
pieces inside: a piece that reads one input (a Concat's copy of its first
operand) or none (a table of constants, an initial fill) may then run before
the operator's other inputs are written, or before an earlier reader of the
memory it writes has finished.

That is harmless while every array holds one value. Once buffers hold several
values over the program (TransientReuse gives one array to several tensors,
InPlaceElementwise writes an output over its input), the order between
operators is what keeps a value alive until its last reader is done; there,
every operator stays whole (its nested SDFG is marked ``no_inline``).

Rule: a state *shares memory* when an array (with the Views that see it) has
two or more access nodes in it that are not Views and one of them is written.
"""
from dace import data as dt


def shares_memory(sdfg, state) -> bool:
    counts, written = {}, set()
    for access in state.data_nodes():
        desc = sdfg.arrays.get(access.data)
        if desc is None or isinstance(desc, dt.View):
            continue
        counts[access.data] = counts.get(access.data, 0) + 1
        if state.in_degree(access):  # written, directly or through a View
            written.add(access.data)
    return any(counts[name] > 1 for name in written)


def keep_whole(expansion, node, state, sdfg):
    """The nested SDFG node for ``expansion`` (an SDFG), marked ``no_inline``, when
    ``state`` shares memory; else ``expansion`` unchanged (DaCe nests it)."""
    if not shares_memory(sdfg, state):
        return expansion
    nested = state.add_nested_sdfg(expansion, sdfg, node.in_connectors, node.out_connectors,
                                   name=node.name, schedule=node.schedule,
                                   debuginfo=node.debuginfo)
    nested.no_inline = True
    return nested
