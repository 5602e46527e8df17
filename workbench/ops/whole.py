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
operators is what keeps a value alive until its last reader is done.

Rules:
1. An array is *shared* when it has two or more access nodes in the state
   (Views not counted) and one of them is written.
2. An operator stays whole (its nested SDFG is marked ``no_inline``) when it
   reads or writes a shared array, directly or through a View of it.
3. In a state with a shared array, an operator also stays whole when the
   order it passes on might not survive inlining: it has several outputs
   (one may not depend on every input), or it reads an input for its shape
   only (``SHAPE_ONLY``). Any other operator's every output depends on every
   input it does not know at build time, so a chain of them, inlined, still
   orders what it joins.
Operators that touch no shared memory are inlined as before: a View feeding
a nested SDFG meets DaCe 1.0.2 bugs in its view removal (RedundantReadSlice
"Dimension mismatch in composition"), so whole is kept to where it is needed.
"""
from dace import data as dt
from dace.sdfg import nodes

SHAPE_ONLY = {"Shape", "Size", "EyeLike", "RandomNormalLike", "RandomUniformLike"}


def shared_arrays(sdfg, state) -> set:
    counts, written = {}, set()
    for access in state.data_nodes():
        desc = sdfg.arrays.get(access.data)
        if desc is None or isinstance(desc, dt.View):
            continue
        counts[access.data] = counts.get(access.data, 0) + 1
        if state.in_degree(access):  # written, directly or through a View
            written.add(access.data)
    return {name for name in written if counts[name] > 1}


def shares_memory(sdfg, state) -> bool:
    return bool(shared_arrays(sdfg, state))


def _viewed(sdfg, state, access, seen=()):
    """The non-View array ``access`` sees (following View edges)."""
    while isinstance(sdfg.arrays.get(access.data), dt.View) and access not in seen:
        seen = (*seen, access)
        nxt = [e.dst if e.src is access else e.src for e in state.all_edges(access)
               if "views" in (e.src_conn, e.dst_conn)]
        if not nxt or not isinstance(nxt[0], nodes.AccessNode):
            return None
        access = nxt[0]
    return access.data


def must_stay_whole(node, state, sdfg) -> bool:
    shared = shared_arrays(sdfg, state)
    if not shared:
        return False
    if len(state.out_edges(node)) > 1 or getattr(node, "op_type", "") in SHAPE_ONLY:
        return True
    for edge in state.all_edges(node):
        other = edge.src if edge.dst is node else edge.dst
        if isinstance(other, nodes.AccessNode):
            root = _viewed(sdfg, state, other)
            if root is None or root in shared:
                return True
    return False


def keep_whole(expansion, node, state, sdfg):
    """The nested SDFG node for ``expansion`` (an SDFG), marked ``no_inline``, when
    ``node`` must stay whole; else ``expansion`` unchanged (DaCe nests it)."""
    if not must_stay_whole(node, state, sdfg):
        return expansion
    nested = state.add_nested_sdfg(expansion, sdfg, node.in_connectors, node.out_connectors,
                                   name=node.name, schedule=node.schedule,
                                   debuginfo=node.debuginfo)
    nested.no_inline = True
    return nested
