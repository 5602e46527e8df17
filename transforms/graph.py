"""Queries on the operator graph shared by the library's transformations."""
from dace.sdfg import nodes

from workbench import nodeid
from workbench.build.storage import runs_once_per_call
from workbench.ops.node import OnnxOp


def shape_text(shape) -> str:
    """A shape as people write it in a reason: [1,64,56,56]."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def node_text(node) -> str:
    """An operator as a reason names it: its type and ONNX name ("MatMul /fc1/MatMul")."""
    if isinstance(node, OnnxOp):
        return f"{node.op_type} {node.onnx_name}"
    return nodeid.short(node)


def names_text(names, most: int = 3) -> str:
    """Array names as a reason lists them: 'a', 'b', 'c'... and "is" or "are" after."""
    names = list(names)
    listed = ", ".join(repr(n) for n in names[:most]) + ("..." if len(names) > most else "")
    return f"{listed} {'is' if len(names) == 1 else 'are'}"


def readers_text(count: int) -> str:
    return "nothing" if count == 0 else f"{count} node{'s' if count != 1 else ''}"


def onnx_ops(sdfg, op_types=None):
    """(state, node) for OnnxOp nodes of the top-level SDFG, optionally by op type."""
    out = []
    for state in sdfg.states():
        for node in state.nodes():
            if isinstance(node, OnnxOp) and (op_types is None or node.op_type in op_types):
                out.append((state, node))
    return out


def ident(sdfg, state, node) -> str:
    return nodeid.identity(sdfg, state, node)


def in_array(state, node, conn):
    """The access node feeding connector ``conn``."""
    return next(e.src for e in state.in_edges(node) if e.dst_conn == conn)


def out_array(state, node, conn):
    return next(e.dst for e in state.out_edges(node) if e.src_conn == conn)


def consumers(state, access):
    """Nodes reading ``access`` (through any edge)."""
    return [e.dst for e in state.out_edges(access)]


def readers_elsewhere(sdfg, state, data: str) -> int:
    """How many access nodes of ``data`` other states hold (to keep cross-state reads)."""
    return sum(len(_accesses_by_name(s).get(data, ())) for s in sdfg.states() if s is not state)


def single_consumer(sdfg, state, access) -> bool:
    return (len(state.out_edges(access)) == 1 and sdfg.arrays[access.data].transient
            and readers_elsewhere(sdfg, state, access.data) == 0)


outside_maps = runs_once_per_call  # one definition, in the build (storage.py)


def access_nodes(sdfg, data: str) -> list:
    """(state, access node) for every access node of ``data`` in ``sdfg``'s states."""
    return [(s, n) for s in sdfg.states() for n in _accesses_by_name(s).get(data, ())]


def is_weight(sdfg, data: str, weights) -> bool:
    """A value in the session's weights that no node writes: a constant of the program."""
    return (bool(weights) and data in weights and not sdfg.arrays[data].transient
            and not any(s.in_degree(n) for s, n in access_nodes(sdfg, data)))


def state_accesses(state, data: str) -> list:
    """``state``'s access nodes of ``data``, in node order (indexed once per state while
    finding matches: counting them per candidate was a third of a find on ViT-tiny)."""
    return _accesses_by_name(state).get(data, [])


def _accesses_by_name(state) -> dict:
    """Array name -> the state's access nodes of it, in node order (one pass per state
    while finding matches, instead of one per question)."""
    def index():
        out = {}
        for n in state.data_nodes():
            out.setdefault(n.data, []).append(n)
        return out
    return nodeid.per_state(state, "accesses", index)


def rename_arrays(sdfg, state, renames: dict) -> None:
    """The one way to rename arrays: every access node and memlet of ``state`` naming a
    key of ``renames`` names its value instead, and the old arrays go. The caller makes
    sure no other state names them."""
    for access in state.data_nodes():
        access.data = renames.get(access.data, access.data)
    for edge in state.edges():  # memlets inside maps (expanded readers) name the array too
        if edge.data.data in renames:
            edge.data.data = renames[edge.data.data]
    for name in renames:
        sdfg.remove_data(name, validate=False)


def record_for_readers(state, access, value) -> None:
    """The operators reading ``access`` record ``value`` as that input's constant (if
    small: ``OnnxOp.record_const``), as the importer records small weights."""
    for e in state.out_edges(access):
        if isinstance(e.dst, OnnxOp) and e.dst_conn in e.dst.onnx_inputs:
            e.dst.record_const(e.dst.onnx_inputs.index(e.dst_conn), value)


def dataflow_steps(state):
    """(graph, step): the state's dataflow with each top-level map (and all it
    holds) collapsed into its entry node; ``step(node)`` is the top-level node
    standing for ``node``. Order questions (does A finish before B starts?)
    are ancestor queries on this graph (built once per state while finding matches:
    callers only read it)."""
    return nodeid.per_state(state, "dataflow_steps", lambda: _dataflow_steps(state))


def _dataflow_steps(state):
    import networkx as nx
    scopes = state.scope_dict()

    def step(node):
        if isinstance(node, nodes.ExitNode):
            node = state.entry_node(node)
        while scopes[node] is not None:
            node = scopes[node]
        return node

    graph = nx.DiGraph()
    graph.add_nodes_from(step(n) for n in state.nodes())
    for e in state.edges():
        a, b = step(e.src), step(e.dst)
        if a is not b:
            graph.add_edge(a, b)
    return graph, step


def step_ancestors(state):
    """(before, order) over ``dataflow_steps(state)``: ``before[s]`` has bit
    ``order[t]`` set for every step ``t`` that must finish before step ``s`` starts.
    One pass in topological order, kept like ``dataflow_steps``: a breadth-first search
    per question took 3.5 s of a ViT-tiny training program's predictions."""
    return nodeid.per_state(state, "step_ancestors", lambda: _step_ancestors(state))


def _step_ancestors(state):
    import networkx as nx
    graph, _ = dataflow_steps(state)
    topo = list(nx.topological_sort(graph))
    order = {n: i for i, n in enumerate(topo)}
    before = {}
    for n in topo:
        bits = 0
        for p in graph.predecessors(n):
            bits |= before[p] | (1 << order[p])
        before[n] = bits
    return before, order


def step_bits(order, steps) -> int:
    """The bit set of ``steps`` (keys of ``order``)."""
    bits = 0
    for n in steps:
        bits |= 1 << order[n]
    return bits
