"""Where an array's memory is touched in a state: its lifetime, for buffer sharing
and in-place writes.

Rules:
1. An array's memory is touched through every access node of it and of every
   View that sees it (a View of a View too): the *family* of the array. The
   family's edges to the View nodes move nothing; every other node joined to
   a family access node uses the memory: a *writer* when the edge enters the
   family, a *reader* when it leaves it.
2. Uses are counted in the state's dataflow steps (a top-level map and all
   it holds is one step, see ``transforms.graph.dataflow_steps``).
3. A family is *exact* when its uses are all that touches the memory and
   their order is the order the program will run in: no access node of it
   inside a map or nested scope (a buffer there may be private to each
   iteration), no accumulating (WCR) write (it adds to what was there), no
   copy from or to another access node (the build's simplification may turn
   a copy into an alias, and the copy's readers would then read this memory),
   and no user that the build may take apart: a DaCe library node other than
   an ONNX operator, or a nested SDFG that may be inlined (an ONNX operator's
   expansion stays whole in a state whose buffers hold several values, see
   ``workbench.ops.whole``).
"""
from dataclasses import dataclass, field

from dace import data as dt
from dace.sdfg import nodes

from transforms.graph import dataflow_steps
from workbench import nodeid
from workbench.ops.node import OnnxOp


@dataclass
class Family:
    """The access nodes that see one array's memory, and the steps that use it."""
    root: str
    accesses: list = field(default_factory=list)
    writers: set = field(default_factory=set)
    readers: set = field(default_factory=set)
    exact: bool = True

    @property
    def uses(self) -> set:
        return self.writers | self.readers


def root_of(sdfg, state, access):
    """The name of the array ``access`` sees (itself, or what its Views view), or None
    for a View whose viewed array cannot be found."""
    seen = set()
    while isinstance(sdfg.arrays[access.data], dt.View):
        if access in seen:
            return None
        seen.add(access)
        edge = _view_edge(state, access)
        if edge is None:
            return None
        access = edge.src if edge.dst is access else edge.dst
        if not isinstance(access, nodes.AccessNode):
            return None
    return access.data


def _view_edge(state, view):
    from dace.sdfg import utils as sdutil
    edge = sdutil.get_view_edge(state, view)
    if edge is None:
        return None
    other = edge.src if edge.dst is view else edge.dst
    return edge if isinstance(other, nodes.AccessNode) else None


def _takes_apart(node) -> bool:
    """A user the build may split into pieces that run in another order."""
    if isinstance(node, nodes.NestedSDFG):
        return not node.no_inline
    return isinstance(node, nodes.LibraryNode) and not isinstance(node, OnnxOp)


def families(sdfg, state, steps=None, only=None) -> dict:
    """Root array name -> Family, for every array touched in ``state`` (or ``only``
    that one, or those of a set of names). A View whose viewed array is unknown makes
    a family of its own that is not exact."""
    _, step = steps or dataflow_steps(state)
    wanted = None if only is None else ({only} if isinstance(only, str) else set(only))
    scopes = state.scope_dict()
    out = {}
    members = {}
    for access in state.data_nodes():
        if wanted is not None and access.data not in wanted and not isinstance(
                sdfg.arrays[access.data], dt.View):
            continue
        root = root_of(sdfg, state, access)
        if wanted is not None and root not in wanted:
            continue
        fam = out.setdefault(root or access.data, Family(root or access.data))
        fam.accesses.append(access)
        members[access] = fam
        if root is None or scopes[access] is not None:
            fam.exact = False
    for access, fam in members.items():
        for edge in state.in_edges(access):
            if members.get(edge.src) is fam:
                continue  # the edge between a View and what it views
            fam.writers.add(step(edge.src))
            if edge.data.wcr is not None or isinstance(edge.src, nodes.AccessNode):
                fam.exact = False
            if _takes_apart(edge.src):
                fam.exact = False
        for edge in state.out_edges(access):
            if members.get(edge.dst) is fam:
                continue
            fam.readers.add(step(edge.dst))
            if isinstance(edge.dst, nodes.AccessNode) or _takes_apart(edge.dst):
                fam.exact = False
    return out


def other_uses(sdfg, state, name: str, skip, steps=None) -> set:
    """The steps that touch array ``name``'s memory in ``state`` through any access
    node of its family but ``skip``; None when the family is not exact."""
    graph_steps = steps or dataflow_steps(state)
    _, step = graph_steps
    if nodeid.holding_still():   # finding matches: every candidate asks, one pass answers all
        fam = nodeid.per_state(state, "families",
                               lambda: families(sdfg, state, graph_steps)).get(name)
    else:
        fam = families(sdfg, state, graph_steps, only=name).get(name)
    if fam is None:
        return set()
    if not fam.exact:
        return None
    members = set(fam.accesses)
    out = set()
    for access in fam.accesses:
        if access is skip:
            continue
        out |= {step(e.src) for e in state.in_edges(access) if e.src not in members}
        out |= {step(e.dst) for e in state.out_edges(access) if e.dst not in members}
    return out
