"""The SDFG of an ONNX If, Loop or Scan node (the rules: ``control_flow.py``).

One nested SDFG per node: its connectors are the node's inputs, the outer
tensors its bodies read and the constants they lift; its states are the
control flow (branch states behind conditional interstate edges, loops
made with ``add_loop``), each body a nested SDFG of its own in the state
where it runs. ``bodies`` finds those bodies again for the transformations.
The states of each node's kind are built in ``control_flow_states.py``.
"""
import dace

from workbench.errors import ShapeError
from workbench.importer.control_flow import plan_for
from workbench.importer.counted_body import pass_refusals
from workbench.importer.control_flow_states import (build_batched_scan, build_if, build_loop,
                                                    build_scan, copy_array)


def build_body(body, name: str, scope):
    """(sdfg, input array per formal input, per passed outer name, output arrays,
    weights) of the body, built by the importer that ``scope`` comes from."""
    from workbench.importer.counted_body import build_counted_body, has_counts
    if has_counts(body):   # sizes decided per iteration (importer/counted_body.py)
        sdfg, ins, outs, weights = build_counted_body(body, name, scope)
    else:
        sdfg, ins, outs, weights = scope.build(body.model, body.types, name, scope.prefer_blas,
                                               body.known, fold=body.fold)
    by_name = {i.onnx_name: i.sdfg_name for i in ins}
    formal = [by_name[vi.name] for vi in body.graph.input]
    passed = [by_name[n] for n in body.passed]
    outputs = _distinct_outputs(sdfg, [o.sdfg_name for o in outs],
                                set(formal) | set(passed) | set(weights))
    return sdfg, formal, passed, outputs, weights


def _distinct_outputs(sdfg, outputs: list, reads: set) -> list:
    """Output array names, each written by the body only: an output that is an input,
    a weight or another output already gets an array of its own and a final copy."""
    seen, out, copies = set(), [], []
    for k, name in enumerate(outputs):
        if name in reads or name in seen:
            desc = sdfg.arrays[name]
            new = sdfg.add_array(f"__out{k}", desc.shape, desc.dtype, transient=False,
                                 find_new_name=True)[0]
            copies.append((name, new))
            name = new
        seen.add(name)
        out.append(name)
    if copies:
        last = [s for s in sdfg.states() if sdfg.out_degree(s) == 0][0]
        state = sdfg.add_state_after(last, "outputs")
        for src, dst in copies:
            copy_array(state, src, dst, sdfg)
    return out


def bodies(sdfg) -> list:
    """The imported bodies inside ``sdfg``'s control flow nodes, outermost first. A
    control flow node is a nested SDFG holding no ONNX operator itself; its bodies are
    the nested SDFGs in it that do (an operator's expansion holding one, a fused
    operator's core, is no body). Each body is a program of its own: its non-transient
    arrays are its inputs, outputs and constants, none of them shared with another
    (``_distinct_outputs``, the carry states)."""
    out = []
    for node in _nested(sdfg):
        if _holds_operators(node.sdfg):
            continue
        for inner in _nested(node.sdfg, recursive=True):
            if _holds_operators(inner.sdfg):
                out.append(inner.sdfg)
                out.extend(bodies(inner.sdfg))
    return out


def _nested(sdfg, recursive=False) -> list:
    """Nested SDFG nodes in ``sdfg``'s states (with ``recursive``, also in those of
    nested SDFGs that hold no operator: a control flow node's own nesting)."""
    found = []
    for state in sdfg.states():
        for node in state.nodes():
            if isinstance(node, dace.nodes.NestedSDFG):
                found.append(node)
                if recursive and not _holds_operators(node.sdfg):
                    found.extend(_nested(node.sdfg, recursive))
    return found


def _holds_operators(sdfg) -> bool:
    from workbench.ops.node import OnnxOp
    return any(isinstance(n, OnnxOp) for s in sdfg.states() for n in s.nodes())


class Scope:
    """What the importing ``build_sdfg`` offers a control flow node: its types and
    values, access nodes of its tensors, new outer arrays for lifted weights, and
    itself (``build``, with its ``identifier`` and ``dtypes``) for the bodies."""

    def __init__(self, sdfg, state, node_for, array_of, new_array, types, values, opsets,
                 ir_version, prefer_blas, fold, build, identifier, dtypes):
        self.build, self.identifier, self.dtypes = build, identifier, dtypes
        self.sdfg, self.state, self.node_for, self.array_of = sdfg, state, node_for, array_of
        self.new_array = new_array
        self.types, self.values, self.opsets = types, values, opsets
        self.ir_version, self.prefer_blas, self.fold = ir_version, prefer_blas, fold


def add_control_flow(scope: Scope, node, label: str) -> dict:
    """Add ``node`` (If/Loop/Scan) to ``scope.state`` as a nested SDFG; returns the
    weights it lifts to the outer program (outer array name -> value)."""
    ins = [scope.types.get(n, (0, None)) if n else (0, None) for n in node.input]
    plan = plan_for(node, ins, scope.types, scope.values, scope.opsets, scope.ir_version,
                    scope.fold)
    if plan is None:
        raise ShapeError(f"node '{node.name or node.op_type}' ({node.op_type}): an input, or a "
                         f"tensor its bodies read, has no static shape. Fix the input shapes "
                         f"(--shape).")
    inner = _Inner(label, scope, node.name)
    if node.op_type == "If":
        build_if(inner, plan, node)
    elif node.op_type == "Loop":
        build_loop(inner, plan, node)
    elif plan.batch is None:
        build_scan(inner, plan, node)
    else:
        build_batched_scan(inner, plan, node)
    return inner.attach(node)


class _Inner:
    """The nested SDFG of one control flow node and its connectors."""

    def __init__(self, label, scope, node_name=""):
        self.scope, self.node_name = scope, node_name or label
        self.sdfg = dace.SDFG(label)
        self.reads = {}    # outer tensor name -> inner array
        self.writes = {}   # output position -> inner array
        self.lifted = {}   # inner array -> (outer array name, value)

    def read(self, onnx_name: str) -> str:
        """The inner array reading outer tensor ``onnx_name`` (one connector each)."""
        if onnx_name not in self.reads:
            self.reads[onnx_name] = self._array("in", onnx_name)
        return self.reads[onnx_name]

    def write(self, position: int, onnx_name: str) -> str:
        name = self._array("out", onnx_name)
        self.writes[position] = (onnx_name, name)
        return name

    def _array(self, prefix: str, onnx_name: str) -> str:
        """A connector array shaped as outer tensor ``onnx_name``."""
        desc = self.scope.sdfg.arrays[self.scope.array_of(onnx_name)]
        hint = f"{prefix}_{self.scope.identifier(onnx_name, set())[:40]}"
        return self.sdfg.add_array(hint, desc.shape, desc.dtype, find_new_name=True)[0]

    def loop_symbol(self, tag: str = "it") -> str:
        """The iteration variable: named after the enclosing SDFGs and this node, so that
        loops nested in bodies keep distinct variables when DaCe inlines them."""
        return f"{tag}_{self.scope.sdfg.name}_{self.sdfg.name}"

    def transient(self, hint, shape, dtype) -> str:
        """A new transient; ``dtype`` a DaCe type or an ONNX element type."""
        if not isinstance(dtype, dace.typeclass):
            dtype = self.scope.dtypes[dtype]
        return self.sdfg.add_array(hint, shape or (1,), dtype, transient=True,
                                   find_new_name=True)[0]

    def place(self, state, body, name, formal_arrays: list, output_arrays: list):
        """Import ``body`` as a nested SDFG in ``state``: formal input k reads inner array
        ``formal_arrays[k]``, output k writes ``output_arrays[k]``."""
        try:
            bsdfg, formal, passed, outputs, weights = build_body(body, name, self.scope)
        except ShapeError as e:   # say which node's body, not only which tensor
            raise ShapeError(f"in the body '{body.graph.name}' of node '{self.node_name}': "
                             f"{e}") from None
        inputs = {}
        for conn, arr in zip(formal, formal_arrays):
            inputs[conn] = arr
        for conn, onnx_name in zip(passed, body.passed):
            inputs[conn] = self.read(onnx_name)
        for conn, value in weights.items():
            desc = bsdfg.arrays[conn]
            arr = self.sdfg.add_array(f"w_{conn}", desc.shape, desc.dtype,
                                      find_new_name=True)[0]
            self.lifted[arr] = value
            inputs[conn] = arr
        nested = state.add_nested_sdfg(bsdfg, self.sdfg, set(inputs), set(outputs))
        pass_refusals(self.sdfg, state, nested)
        for conn, arr in inputs.items():
            state.add_edge(state.add_read(arr), None, nested, conn,
                           dace.Memlet.from_array(arr, self.sdfg.arrays[arr]))
        for conn, arr in zip(outputs, output_arrays):
            state.add_edge(nested, conn, state.add_write(arr), None,
                           dace.Memlet.from_array(arr, self.sdfg.arrays[arr]))
        return nested

    def attach(self, node) -> dict:
        """The nested SDFG node in the outer state, wired to the outer arrays."""
        scope = self.scope
        lifted = {}
        outer_in = dict(self.reads)
        for arr, value in self.lifted.items():
            desc = self.sdfg.arrays[arr]
            outer = scope.new_array(arr, desc.shape, desc.dtype)
            lifted[outer] = value
            outer_in[outer] = arr
        ins = {inner: onnx_name for onnx_name, inner in outer_in.items()}
        outs = {inner: onnx_name for onnx_name, inner in self.writes.values()}
        nested = scope.state.add_nested_sdfg(self.sdfg, scope.sdfg, set(ins), set(outs),
                                             name=self.sdfg.name)
        pass_refusals(scope.sdfg, scope.state, nested)
        for inner, name in ins.items():
            src = scope.node_for(name) if name in self.reads else scope.state.add_read(name)
            scope.state.add_edge(src, None, nested, inner,
                                 dace.Memlet.from_array(src.data, scope.sdfg.arrays[src.data]))
        for inner, name in outs.items():
            dst = scope.node_for(name)
            scope.state.add_edge(nested, inner, dst, None,
                                 dace.Memlet.from_array(dst.data, scope.sdfg.arrays[dst.data]))
        return lifted

