"""ONNX If, Loop and Scan as the SDFG's own control flow.

Each such node becomes one nested SDFG in the importing state, whose
states carry the control flow; each body (a subgraph attribute) is imported
by the same importer (shape inference, folding, one ``OnnxOp`` per node)
into a nested SDFG of its own, placed in the state where it runs. Rules:

1. A body reads its formal inputs and any tensor of the enclosing graphs by
   name (ONNX scoping). An outer tensor whose value is known at import and
   small is bound inside the body as a constant (shape inference and
   folding see it); any other is a connector of the nested SDFGs, down to
   the body that reads it. A body's own constants become weights of the
   outer program (bound at call time, as the model's initializers are).
2. ``If``: the condition is read at run time and picks one of two branch
   states (conditional interstate edges). Both branches must give each
   output the same static shape. Only where the condition is known at
   import and the branches disagree (a function body's dead branch, e.g.
   AffineGrid's 3-D case in a 2-D model) is the taken branch imported alone.
3. ``Loop``: an SDFG loop over the iteration number ``i``. Loop-carried
   values live in the output arrays (initial values copied in first); each
   iteration the body reads them, writes fresh arrays, and a carry state
   copies those back, so a body never reads what it is writing. Scan
   outputs are written at row ``i``. The loop runs while ``i < M`` (M known
   at import or read at run time) and the condition holds. Carried values
   must keep their shape. Scan outputs need the trip count at import: M
   known, the first condition known true and the body's condition passed
   through unchanged (or a constant true); otherwise their shape depends on
   data and the node is refused at import, naming it.
4. ``Scan``: a loop over the scan axis; each iteration copies the slice of
   every scan input at ``t`` (or ``T - 1 - t`` reversed) into the body's
   input, and the body's scan outputs into their slices. Opset 8's batched
   Scan is a loop over the batch around that loop; its ``sequence_lens``
   must be known at import and the whole length.
5. The operator transformations see the bodies (``bodies``): each is a
   program of its own whose non-transient arrays no other array aliases.
Everything else is refused with an ``UnsupportedCaseError`` naming the node.
"""
import dace
import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import ShapeError, UnsupportedCaseError
from workbench.ops.registry import mapped_tasklet

CONTROL_FLOW = ("If", "Loop", "Scan")
# Known outer values up to this many elements are bound inside a body as constants.
BIND_MAX_ELEMENTS = 4096


def is_control_flow(node) -> bool:
    return node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx")


def subgraphs(node) -> list:
    """(attribute name, GraphProto) of a node's body attributes."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append((a.name, a.g))
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend((a.name, g) for g in a.graphs)
    return out


def outer_names(graph) -> list:
    """Names ``graph`` (with its own nested bodies) reads but does not define, in order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out = []

    def need(name):
        if name and name not in defined and name not in out:
            out.append(name)

    for node in graph.node:
        for name in node.input:
            need(name)
        for _, sub in subgraphs(node):
            for name in outer_names(sub):
                need(name)
        defined.update(o for o in node.output if o)
    for o in graph.output:
        need(o.name)
    return out


def unsupported_in_bodies(node, is_supported) -> dict:
    """op type -> node names inside ``node``'s bodies (recursively) that are unsupported."""
    missing = {}
    for _, g in subgraphs(node):
        for i, sub in enumerate(g.node):
            if is_control_flow(sub):
                for k, v in unsupported_in_bodies(sub, is_supported).items():
                    missing.setdefault(k, []).extend(v)
            elif not is_supported(sub.op_type, sub.domain):
                key = (sub.op_type if sub.domain in ("", "ai.onnx")
                       else f"{sub.domain}::{sub.op_type}")
                missing.setdefault(key, []).append(sub.name or f"{g.name}#{i}")
    return missing


def _fail(node, why) -> UnsupportedCaseError:
    return UnsupportedCaseError(node.name or node.op_type, node.op_type, why)


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute
            if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}


def _body(node, name):
    return next(g for n, g in subgraphs(node) if n == name)


# ---------------------------------------------------------------- bodies as models

class Body:
    """A body imported as a model of its own: static shapes, folded."""

    def __init__(self, graph, formal: list, types: dict, values: dict, opsets: list,
                 ir_version: int, fold: bool):
        """``formal``: (elem, shape) per formal input; ``types``/``values``: the enclosing
        scope's tensor types and known values."""
        from workbench.importer.shapes import infer_shapes, tensor_types
        self.graph = graph
        self.outer = outer_names(graph)
        g = helper.make_graph([], graph.name or "body", [], [])
        g.node.extend(graph.node)
        g.initializer.extend(graph.initializer)
        for vi, (elem, shape) in zip(graph.input, formal):
            g.input.append(helper.make_tensor_value_info(vi.name, elem, list(shape)))
        self.bound = {}
        for name in self.outer:
            value = values.get(name)
            if value is not None and value.size <= BIND_MAX_ELEMENTS and value.dtype.kind in "biuf":
                self.bound[name] = value
                g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
            elif name in types and types[name][1] is not None:
                elem, shape = types[name]
                g.input.append(helper.make_tensor_value_info(name, elem, list(shape)))
            else:
                raise _Open()   # not static yet (or never: the importer then says which)
        self.passed = [n for n in self.outer if n not in self.bound]
        g.output.extend(graph.output)
        model = helper.make_model(g, opset_imports=opsets)
        model.ir_version = ir_version
        model = infer_shapes(model)
        self.model, self.known = static_model(model, fold)
        self.types = tensor_types(self.model)
        self.fold = fold

    def output_types(self) -> list:
        return [self.types.get(o.name, (None, None)) for o in self.graph.output]

    def build(self, name: str, scope):
        """(sdfg, input array per formal input, per passed outer name, output arrays,
        weights) of the body, built by the importer that ``scope`` comes from."""
        sdfg, ins, outs, weights = scope.build(self.model, self.types, name, scope.prefer_blas,
                                               self.known, fold=self.fold)
        by_name = {i.onnx_name: i.sdfg_name for i in ins}
        formal = [by_name[vi.name] for vi in self.graph.input]
        passed = [by_name[n] for n in self.passed]
        outputs = _distinct_outputs(sdfg, [o.sdfg_name for o in outs],
                                    set(formal) | set(passed) | set(weights))
        return sdfg, formal, passed, outputs, weights


def static_model(model, fold: bool, known: dict = None):
    """Fold and infer to a fixed point, pinning the outputs of control flow nodes on the
    way (returns the model and the values known at import)."""
    from workbench.importer.fold import fold_constants
    from workbench.importer.shapes import infer_shapes, tensor_types
    for _ in range(len(model.graph.node) + 2):
        shapes = {n: s for n, (_, s) in tensor_types(model).items()}
        model, n_folded, known = fold_constants(model, shapes, evaluate=fold)
        model = infer_shapes(model, known)
        model, pinned = pin_control_flow_shapes(model, known, fold)
        if not n_folded and not pinned:
            break
    return model, known


def settle_control_flow(model, known: dict, fold: bool):
    """The importer's folded model with the outputs of its control flow nodes pinned
    (and folded again downstream of them); unchanged without control flow."""
    if not any(is_control_flow(n) for n in model.graph.node):
        return model, known
    model, pinned = pin_control_flow_shapes(model, known, fold)
    return static_model(model, fold) if pinned else (model, known)


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
            _copy(state, src, dst, sdfg)
    return out


def _copy(state, src: str, dst: str, sdfg):
    a, b = state.add_read(src), state.add_write(dst)
    state.add_nedge(a, b, dace.Memlet.from_array(src, sdfg.arrays[src]))


# ---------------------------------------------------------------- output shapes

def pin_control_flow_shapes(model, known: dict, fold: bool):
    """Give the outputs of If/Loop/Scan nodes the static shapes their bodies give
    (value_info), where inference left them open; (model, how many were pinned)."""
    from workbench.importer.shapes import infer_shapes, tensor_types
    types = tensor_types(model)
    values = _values(model, known)
    opsets = list(model.opset_import)
    pinned = {}
    for index, node in enumerate(model.graph.node):
        if not is_control_flow(node):
            continue
        ins = [types.get(n, (0, None)) if n else (0, None) for n in node.input]
        plan = plan_for(node, ins, types, values, opsets, model.ir_version, fold)
        if node.op_type == "If" and plan is not None and len(plan.branches) == 1:
            _inline_branch(model, index, node, _body(node, next(iter(plan.branches))))
            return infer_shapes(model, known), 1
        if all(o and types.get(o, (0, None))[1] is not None for o in node.output if o):
            continue
        outs = None if plan is None else plan.outputs
        if outs is None:
            continue
        for name, t in zip(node.output, outs):
            if name and t[1] is not None and types.get(name, (0, None))[1] is None:
                pinned[name] = t
    if not pinned:
        return model, 0
    kept = [vi for vi in model.graph.value_info if vi.name not in pinned]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    for o in model.graph.output:
        if o.name in pinned:
            elem, shape = pinned.pop(o.name)
            o.type.CopyFrom(helper.make_tensor_type_proto(elem, list(shape)))
    model.graph.value_info.extend(helper.make_tensor_value_info(n, e, list(s))
                                  for n, (e, s) in pinned.items())
    return infer_shapes(model, known), len(pinned) or 1


def _inline_branch(model, index: int, node, branch) -> None:
    """Rule 2: replace If node ``index`` by the nodes of its taken ``branch`` (names the
    branch defines that the model already uses get new ones), each output through an
    Identity so the If's output names stay."""
    graph = model.graph
    used = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for n in graph.node:
        used.update(n.input)
        used.update(n.output)
    rename = {}
    for name in [t.name for t in branch.initializer] + [o for n in branch.node for o in n.output]:
        if name and name in used:
            new, k = f"{name}__then", 1
            while new in used:
                new, k = f"{name}__then{k}", k + 1
            rename[name] = new
        used.add(rename.get(name, name))
    nodes = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [rename.get(i, i) for i in n.input]
        copy.output[:] = [rename.get(o, o) for o in n.output]
        if copy.name:
            copy.name = f"{node.name}/{copy.name}" if node.name else copy.name
        nodes.append(copy)
    for out, inner in zip(node.output, branch.output):
        if out:
            nodes.append(helper.make_node("Identity", [rename.get(inner.name, inner.name)], [out],
                                          name=f"{node.name or 'If'}/{out}"))
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename.get(t.name, t.name)
        graph.initializer.append(copy)
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(rest[:index] + nodes + rest[index + 1:])


def _values(model, known) -> dict:
    values = dict(known)
    for t in model.graph.initializer:
        if t.name not in values and np.prod(t.dims, dtype=np.int64) <= BIND_MAX_ELEMENTS:
            values[t.name] = numpy_helper.to_array(t)
    return values


def output_types(node, types, values, opsets, ir_version, fold):
    """(elem, shape) per output of ``node``, or None where an input's shape is open."""
    ins = [types.get(n, (0, None)) if n else (0, None) for n in node.input]
    plan = plan_for(node, ins, types, values, opsets, ir_version, fold)
    return None if plan is None else plan.outputs


def plan_for(node, ins, types, values, opsets, ir_version, fold):
    kind = {"If": IfPlan, "Loop": LoopPlan, "Scan": ScanPlan}[node.op_type]
    try:
        return kind(node, ins, types, values, opsets, ir_version, fold)
    except _Open:
        return None


class _Open(Exception):
    """An input's shape is not static yet."""


def _static(t):
    if t[1] is None:
        raise _Open()
    return t


# ---------------------------------------------------------------- the three plans

class IfPlan:
    def __init__(self, node, ins, types, values, opsets, ir, fold):
        self.node = node
        cond = values.get(node.input[0])
        self.known = None if cond is None or cond.size != 1 else bool(cond.ravel()[0])
        self.branches, errors = {}, {}
        for which in ("then_branch", "else_branch"):
            try:
                self.branches[which] = Body(_body(node, which), [], types, values, opsets, ir,
                                            fold)
            except (ShapeError, UnsupportedCaseError) as e:
                errors[which] = e
        shapes = {w: b.output_types() for w, b in self.branches.items()}
        agree = len(shapes) == 2 and shapes["then_branch"] == shapes["else_branch"] and all(
            s is not None for _, s in shapes["then_branch"])
        if not agree and self.known is not None:   # rule 2: a dead branch of a known cond
            taken = "then_branch" if self.known else "else_branch"
            if taken in errors:
                raise errors[taken]
            self.branches = {taken: self.branches[taken]}
        elif not agree:
            if errors:
                raise next(iter(errors.values()))
            raise _fail(node, f"its branches give outputs of different or unknown shapes "
                              f"(then {_text(shapes['then_branch'])}, else "
                              f"{_text(shapes['else_branch'])}) and the condition is known only "
                              f"at run time, so the output shapes depend on data")
        self.outputs = next(iter(shapes[w] for w in self.branches))
        if any(s is None for _, s in self.outputs):
            raise _fail(node, f"a branch output has no static shape ({_text(self.outputs)})")


def _text(types) -> str:
    return ", ".join("?" if s is None else str(list(s)) for _, s in types)


class LoopPlan:
    def __init__(self, node, ins, types, values, opsets, ir, fold):
        self.node = node
        body = _body(node, "body")
        m_name = node.input[0] if len(node.input) > 0 else ""
        c_name = node.input[1] if len(node.input) > 1 else ""
        carried = [_static(t) for t in ins[2:]]
        n = len(carried)
        self.trips = None
        if m_name:
            m = values.get(m_name)
            self.trips = None if m is None else int(m.ravel()[0])
        cond0 = values.get(c_name) if c_name else np.array(True)
        formal = [(onnx.TensorProto.INT64, ()), (onnx.TensorProto.BOOL, ())] + carried
        self.body = Body(body, formal, types, values, opsets, ir, fold)
        outs = self.body.output_types()
        for k, (t, vi) in enumerate(zip(outs[1:1 + n], body.output[1:1 + n])):
            if t[1] is None or tuple(t[1]) != tuple(carried[k][1]):
                raise _fail(node, f"loop-carried value '{vi.name}' changes shape from "
                                  f"{list(carried[k][1])} to {'?' if t[1] is None else list(t[1])}"
                                  f" across iterations; only shape-invariant loops have static "
                                  f"shapes")
        scans = outs[1 + n:]
        # rule 3: the trip count of a loop with scan outputs must be known at import
        self.passes_cond = _passes_condition(body, self.body)
        self.cond_known_true = cond0 is not None and bool(np.asarray(cond0).ravel()[0])
        if scans and (self.trips is None or not self.passes_cond
                      or not self.cond_known_true):
            why = ("the trip count M is not known at import" if self.trips is None else
                   "the body's condition can end the loop early")
            raise _fail(node, f"it has scan outputs, whose length is the number of iterations, "
                              f"and {why}: their shape depends on data")
        if m_name == "" and c_name == "":
            raise _fail(node, "neither a trip count nor a condition: the loop never ends")
        self.trips = max(self.trips, 0) if self.trips is not None else None
        if any(s is None for _, s in scans):
            raise _fail(node, f"a scan output has no static shape ({_text(scans)})")
        self.outputs = [carried[k] for k in range(n)] + [
            (e, (self.trips,) + tuple(s)) for e, s in scans]


def _passes_condition(graph, body) -> bool:
    """Whether the body's condition output is its condition input (directly, through
    Identity nodes) or a constant true: then only M ends the loop."""
    name = graph.output[0].name
    cond_in = graph.input[1].name
    producers = {o: n for n in graph.node for o in n.output}
    constants = {t.name: t for t in body.model.graph.initializer}
    while True:
        value = body.known.get(name, body.bound.get(name))
        if value is None and name in constants:
            value = numpy_helper.to_array(constants[name])
        if value is not None:
            return value.size == 1 and bool(value.ravel()[0])
        if name == cond_in:
            return True
        node = producers.get(name)
        if node is None or node.op_type != "Identity":
            return False
        name = node.input[0]


class ScanPlan:
    def __init__(self, node, ins, types, values, opsets, ir, fold):
        self.node = node
        a = _attrs(node)
        m = int(a["num_scan_inputs"])
        # opset 8: a batch axis 0 everywhere, the scan axis 1, sequence_lens first
        self.batch = None
        if _opset(opsets) < 9:
            self._batched(node, ins, values, m, a)
            ins = [(e, s[1:]) for e, s in ins[1:]]
            a = {"scan_input_directions": a.get("directions", [0] * m)}
        n = len(ins) - m
        states = [_static(t) for t in ins[:n]]
        scans = [_static(t) for t in ins[n:]]
        self.n, self.m = n, m
        self.in_axes = [ax % len(s) if s else 0 for ax, (_, s) in
                        zip(a.get("scan_input_axes", [0] * m), scans)]
        self.in_dirs = list(a.get("scan_input_directions", [0] * m))
        lengths = {s[ax] for (_, s), ax in zip(scans, self.in_axes)}
        if len(lengths) != 1:
            raise _fail(node, f"scan inputs of different lengths {sorted(lengths)}")
        self.length = lengths.pop()
        slices = [(e, tuple(d for i, d in enumerate(s) if i != ax))
                  for (e, s), ax in zip(scans, self.in_axes)]
        self.body = Body(_body(node, "body"), states + slices, types, values, opsets, ir, fold)
        outs = self.body.output_types()
        for k in range(n):
            if outs[k][1] is None or tuple(outs[k][1]) != tuple(states[k][1]):
                raise _fail(node, f"state {k} changes shape across iterations")
        per_step = outs[n:]
        if any(s is None for _, s in per_step):
            raise _fail(node, f"a scan output has no static shape ({_text(per_step)})")
        k_out = len(per_step)
        self.out_axes = [ax % (len(s) + 1) for ax, (_, s) in
                         zip(a.get("scan_output_axes", [0] * k_out), per_step)]
        self.out_dirs = list(a.get("scan_output_directions", [0] * k_out))
        self.outputs = states + [
            (e, tuple(s[:ax]) + (self.length,) + tuple(s[ax:]))
            for (e, s), ax in zip(per_step, self.out_axes)]
        if self.batch is not None:
            self.outputs = [(e, (self.batch,) + tuple(s)) for e, s in self.outputs]

    def _batched(self, node, ins, values, m, a):
        """Opset 8's batch: the same scan per entry of axis 0; sequence_lens only where it
        is known to be the whole length (else the outputs past it depend on data)."""
        rest = [_static(t) for t in ins[1:]]
        batches = {s[0] if s else None for _, s in rest}
        if len(batches) != 1 or None in batches:
            raise _fail(node, f"inputs with different batch sizes {sorted(map(str, batches))}")
        self.batch = batches.pop()
        lengths = {s[1] for _, s in rest[len(rest) - m:] if len(s) > 1}
        if node.input[0]:
            lens = values.get(node.input[0])
            if lens is None or len(lengths) != 1 or np.any(np.asarray(lens) != min(lengths)):
                raise _fail(node, "sequence_lens shorter than the scan inputs, or known only "
                                  "at run time, is not supported")


def _opset(opsets) -> int:
    return next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 0)


# ---------------------------------------------------------------- bodies in an SDFG

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


# ---------------------------------------------------------------- building the SDFG

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
    inner = _Inner(label, scope)
    if node.op_type == "If":
        _build_if(inner, plan, node)
    elif node.op_type == "Loop":
        _build_loop(inner, plan, node)
    elif plan.batch is None:
        _build_scan(inner, plan, node)
    else:
        _build_batched_scan(inner, plan, node)
    return inner.attach(node)


class _Inner:
    """The nested SDFG of one control flow node and its connectors."""

    def __init__(self, label, scope):
        self.scope = scope
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
        bsdfg, formal, passed, outputs, weights = body.build(name, self.scope)
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
        for inner, name in ins.items():
            src = scope.node_for(name) if name in self.reads else scope.state.add_read(name)
            scope.state.add_edge(src, None, nested, inner,
                                 dace.Memlet.from_array(src.data, scope.sdfg.arrays[src.data]))
        for inner, name in outs.items():
            dst = scope.node_for(name)
            scope.state.add_edge(nested, inner, dst, None,
                                 dace.Memlet.from_array(dst.data, scope.sdfg.arrays[dst.data]))
        return lifted




def _build_if(inner, plan, node):
    sdfg = inner.sdfg
    outs = [inner.write(k, o) for k, o in enumerate(node.output) if o]
    start = sdfg.add_state("if_start", is_start_block=True)
    end = sdfg.add_state("if_end")
    if len(plan.branches) == 1:   # rule 2: the condition is known, the other branch dead
        (which, body), = plan.branches.items()
        state = sdfg.add_state(which)
        inner.place(state, body, f"{sdfg.name}_{which}", [], outs)
        sdfg.add_edge(start, state, dace.InterstateEdge())
        sdfg.add_edge(state, end, dace.InterstateEdge())
        return
    cond = inner.read(node.input[0])
    for which, condition in (("then_branch", f"{cond}[0]"), ("else_branch", f"not {cond}[0]")):
        state = sdfg.add_state(which)
        inner.place(state, plan.branches[which], f"{sdfg.name}_{which}", [], outs)
        sdfg.add_edge(start, state, dace.InterstateEdge(condition=condition))
        sdfg.add_edge(state, end, dace.InterstateEdge())


def _set_from_symbol(state, arr: str, expr: str, sdfg):
    t = state.add_tasklet(f"set_{arr}", {}, {"o"}, f"o = {expr}")
    state.add_edge(t, "o", state.add_write(arr), None, dace.Memlet(f"{arr}[0]"))


def _build_loop(inner, plan, node):
    sdfg = inner.sdfg
    i = inner.loop_symbol()
    n = len(node.input) - 2
    body = plan.body
    m_name = node.input[0]
    c_name = node.input[1] if len(node.input) > 1 else ""
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    carried = outs[:n]
    for k in range(n):   # an unused final value still needs an array to carry it
        if carried[k] is None:
            t = plan.outputs[k]
            carried[k] = inner.transient(f"carry{k}", t[1], t[0])
    scans = outs[n:]
    init = sdfg.add_state("loop_init", is_start_block=True)
    it = inner.transient("iter", (1,), dace.int64)
    cond = inner.transient("cond", (1,), dace.bool_)
    for k in range(n):
        _copy(init, inner.read(node.input[2 + k]), carried[k], sdfg)
    if c_name:
        _copy(init, inner.read(c_name), cond, sdfg)
    else:
        _set_from_symbol(init, cond, "True", sdfg)
    # the body's outputs go to fresh arrays; the carry state copies them back
    b_cond = inner.transient("cond_out", (1,), dace.bool_)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = []
    for k, (e, s) in enumerate(plan.outputs[n:]):
        b_scans.append(inner.transient(f"step{k}", s[1:], e))
    first = sdfg.add_state("loop_iter")
    _set_from_symbol(first, it, i, sdfg)
    run = sdfg.add_state_after(first, "loop_body")
    inner.place(run, body, f"{sdfg.name}_body", [it, cond] + carried,
                [b_cond] + b_carried + b_scans)
    carry = sdfg.add_state_after(run, "loop_carry")
    for k in range(n):
        _copy(carry, b_carried[k], carried[k], sdfg)
    _copy(carry, b_cond, cond, sdfg)
    for k, arr in enumerate(scans):
        if arr is None:
            continue
        shape = plan.outputs[n + k][1][1:]
        _copy_at(carry, b_scans[k], arr, shape, {}, {0: i})
    terms = []
    if m_name:
        terms.append(f"{i} < {plan.trips}" if plan.trips is not None
                     else f"{i} < {inner.read(m_name)}[0]")
    if not (plan.passes_cond and plan.cond_known_true):
        terms.append(f"{cond}[0]")
    after = sdfg.add_state("loop_end")
    sdfg.add_loop(init, first, after, i, "0", " and ".join(f"({t})" for t in terms),
                  f"{i} + 1", carry)


def _build_scan(inner, plan, node):
    sdfg = inner.sdfg
    t = inner.loop_symbol()
    n, m, length = plan.n, plan.m, plan.length
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    carried = outs[:n]
    for k in range(n):
        if carried[k] is None:
            elem, shape = plan.outputs[k]
            carried[k] = inner.transient(f"carry{k}", shape, elem)
    init = sdfg.add_state("scan_init", is_start_block=True)
    for k in range(n):
        _copy(init, inner.read(node.input[k]), carried[k], sdfg)
    first = sdfg.add_state("scan_slices")
    slices = []
    for j in range(m):
        src = inner.read(node.input[n + j])
        e, s = plan.body.types[plan.body.graph.input[n + j].name]
        dst = inner.transient(f"slice{j}", s, e)
        at = f"({length - 1} - {t})" if plan.in_dirs[j] else t
        _copy_at(first, src, dst, tuple(s), {plan.in_axes[j]: at}, {})
        slices.append(dst)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = []
    per_step = plan.body.output_types()[n:]
    for k, (e, s) in enumerate(per_step):
        b_scans.append(inner.transient(f"step{k}", s, e))
    run = sdfg.add_state_after(first, "scan_body")
    inner.place(run, plan.body, f"{sdfg.name}_body", carried + slices, b_carried + b_scans)
    carry = sdfg.add_state_after(run, "scan_carry")
    for k in range(n):
        _copy(carry, b_carried[k], carried[k], sdfg)
    for k, arr in enumerate(outs[n:]):
        if arr is None:
            continue
        at = f"({length - 1} - {t})" if plan.out_dirs[k] else t
        _copy_at(carry, b_scans[k], arr, tuple(per_step[k][1]), {}, {plan.out_axes[k]: at})
    after = sdfg.add_state("scan_end")
    sdfg.add_loop(init, first, after, t, "0", f"{t} < {length}", f"{t} + 1", carry)


def _build_batched_scan(inner, plan, node):
    """Opset 8: for each batch entry b, the scan of ``_build_scan`` on entry b of every
    input and output (the state carried in a per-entry array)."""
    sdfg = inner.sdfg
    t, b = inner.loop_symbol(), inner.loop_symbol("batch")
    n, m, length = plan.n, plan.m, plan.length
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    per_step = plan.body.output_types()[n:]
    cur = [inner.transient(f"state{k}", e_s[1][1:], e_s[0])
           for k, e_s in enumerate(plan.outputs[:n])]
    init = sdfg.add_state("scan_init", is_start_block=True)
    entry = sdfg.add_state("scan_entry")
    for k in range(n):
        _copy_at(entry, inner.read(node.input[1 + k]), cur[k], plan.outputs[k][1][1:],
                 {0: b}, {})
    first = sdfg.add_state("scan_slices")
    slices = []
    for j in range(m):
        e, s = plan.body.types[plan.body.graph.input[n + j].name]
        dst = inner.transient(f"slice{j}", s, e)
        at = f"({length - 1} - {t})" if plan.in_dirs[j] else t
        _copy_at(first, inner.read(node.input[1 + n + j]), dst, tuple(s), {0: b, 1: at}, {})
        slices.append(dst)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1][1:], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = [inner.transient(f"step{k}", s, e) for k, (e, s) in enumerate(per_step)]
    run = sdfg.add_state_after(first, "scan_body")
    inner.place(run, plan.body, f"{sdfg.name}_body", cur + slices, b_carried + b_scans)
    carry = sdfg.add_state_after(run, "scan_carry")
    for k in range(n):
        _copy(carry, b_carried[k], cur[k], sdfg)
    for k, arr in enumerate(outs[n:]):
        if arr is not None:
            _copy_at(carry, b_scans[k], arr, tuple(per_step[k][1]), {}, {0: b, 1: t})
    leave = sdfg.add_state("scan_leave")
    for k, arr in enumerate(outs[:n]):
        if arr is not None:
            _copy_at(leave, cur[k], arr, plan.outputs[k][1][1:], {}, {0: b})
    sdfg.add_loop(entry, first, leave, t, "0", f"{t} < {length}", f"{t} + 1", carry)
    after = sdfg.add_state("scan_end")
    sdfg.add_loop(init, entry, after, b, "0", f"{b} < {plan.batch}", f"{b} + 1", leave)


def _copy_at(state, src, dst, shape, src_fixed: dict, dst_fixed: dict):
    """dst = src over a slice of ``shape``, with the indices ``src_fixed`` / ``dst_fixed``
    (axis -> expression) inserted into the source's / destination's index."""
    ps = [f"j{i}" for i in range(len(shape))]
    if any(d == 0 for d in shape):
        return
    ranges = {p: f"0:{d}" for p, d in zip(ps, shape)} or {"j0": "0:1"}

    def index(fixed):
        idx = list(ps) if (ps or fixed) else ["0"]
        for axis in sorted(fixed):
            idx.insert(axis, fixed[axis])
        return ", ".join(idx)

    mapped_tasklet(state, f"slice_{src}_{dst}", ranges,
                   {"v": dace.Memlet(f"{src}[{index(src_fixed)}]")}, "o = v",
                   {"o": dace.Memlet(f"{dst}[{index(dst_fixed)}]")})
