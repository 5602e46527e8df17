"""After any step, every value in a shared buffer is read before the buffer is written again.

TransientReuse and InPlaceElementwise let one array hold several tensors, one
after another, and check when they decide that each value's readers finish
before its next writer starts (``lifetimes``). A later step can break that
without touching the shared array's own nodes: folding a Transpose into a
MatMul makes the MatMul read the Transpose's input, so that input's value now
lives until the MatMul, past the writer that the buffer was given to (a
random 16-step sequence on BERT gave a wrong answer this way). So every
step's result is checked here, and a step that breaks the rule is refused.

Rules (per state, top-level dataflow as in ``lifetimes``: a map is one step):
1. A *value* of an array is one of its top-level access nodes that something
   writes (through a View too), with the steps that read that access node.
2. For two values A and B of the same array, with writers W(A) and W(B):
   every reader of A comes before W(B), or W(B) comes before W(A) (then B is
   gone before A is written). "Before" is a path in the dataflow graph.
   W(B) may read A itself only when it reads each element where it writes
   it: an element-wise ONNX operator (as InPlaceElementwise makes) or a map
   (what such an operator expands or fuses into). A MatMul reading A and
   writing B into the same buffer is a conflict.
3. Arrays whose family is not exact (an access inside a map, an accumulating
   write, a copy; see ``lifetimes``) are never shared by this library, and
   their order is the build's: they are left out.
"""
import networkx as nx

from transforms.global_.lifetimes import families
from transforms.graph import dataflow_steps


def conflicts(sdfg) -> list:
    """One line per value read after its buffer is written again, in every state."""
    out = []
    for state in sdfg.states():
        out += _state_conflicts(sdfg, state)
    return out


def _state_conflicts(sdfg, state) -> list:
    written = {}
    for access in state.data_nodes():
        if state.in_degree(access):
            written.setdefault(access.data, []).append(access)
    shared = {name for name, accesses in written.items() if len(accesses) > 1}
    if not shared:
        return []   # the common case: every array holds one value
    steps = dataflow_steps(state)
    graph, step = steps
    before = _order_query(graph)

    found = []
    # two values of one array are two written access nodes of its own name (``_values``)
    for root, fam in families(sdfg, state, steps, only=shared).items():
        if not fam.exact:
            continue
        values = _values(state, fam, step)
        for a_access, (a_writers, a_readers) in values.items():
            for b_access, (b_writers, _) in values.items():
                if b_access is a_access:
                    continue
                for w in b_writers:
                    if a_writers and all(before(w, wa) for wa in a_writers):
                        continue   # B is written (and, by symmetry, read) before A exists
                    late = [r for r in a_readers
                            if not before(r, w) and not (r is w and _elementwise(r))]
                    if late:
                        found.append(f"'{root}' is written by {_label(w)} while "
                                     f"{_label(late[0])} may still read its earlier value")
    return found


def _order_query(graph):
    """``before(a, b)``: whether a path leads from ``a`` to ``b``. A search from ``a``
    never goes past ``b``'s place in a topological order: the writers and readers
    compared are mostly near each other, and full descendant sets of a DenseNet
    cost more than the rest of a step."""
    place = {n: i for i, n in enumerate(nx.topological_sort(graph))}
    known = {}

    def before(a, b) -> bool:
        if (a, b) not in known:
            limit, seen, todo = place[b], {a}, [a]
            found = False
            while todo and not found:
                for nxt in graph.successors(todo.pop()):
                    if nxt is b:
                        found = True
                        break
                    if nxt not in seen and place[nxt] < limit:
                        seen.add(nxt)
                        todo.append(nxt)
            known[a, b] = found
        return known[a, b]
    return before


def _values(state, fam, step) -> dict:
    """Written access node of the array itself -> (writer steps, reader steps), with the
    Views that write into it or read from it folded in."""
    members = set(fam.accesses)
    out = {}
    for access in fam.accesses:
        if access.data != fam.root:
            continue   # a View: its uses count for the access node it views
        writers = {step(e.src) for n in _through_views(state, access, members, "in")
                   for e in state.in_edges(n) if e.src not in members}
        if not writers:
            continue
        readers = {step(e.dst) for n in _through_views(state, access, members, "out")
                   for e in state.out_edges(n) if e.dst not in members}
        out[access] = (writers, readers)
    return out


def _through_views(state, access, members, side: str) -> list:
    """``access`` and the family's Views joined to it on ``side`` ("in": Views written
    into it, "out": Views reading from it), a View of a View too."""
    out, todo = [access], [access]
    while todo:
        node = todo.pop()
        edges = state.in_edges(node) if side == "in" else state.out_edges(node)
        for e in edges:
            other = e.src if side == "in" else e.dst
            if other in members and other not in out:
                out.append(other)
                todo.append(other)
    return out


def _elementwise(node) -> bool:
    from dace.sdfg import nodes
    from workbench.ops.elementwise import ELEMENTWISE
    if isinstance(node, nodes.MapEntry):
        return True
    op_type = getattr(node, "op_type", None)
    if op_type == "FusedElementwise":   # the workbench's fused chains (row epilogues too)
        return True
    return op_type in ELEMENTWISE and not getattr(node, "domain", None)


def _label(node) -> str:
    return getattr(node, "label", None) or str(node)
