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
5. The operator transformations see the bodies (``control_flow_sdfg.bodies``):
   each is a program of its own whose non-transient arrays nothing aliases.
Everything else is refused with an ``UnsupportedCaseError`` naming the node.
The SDFG each node becomes is built in ``control_flow_sdfg.py``; the walks
over the ONNX bodies and the inlining of rule 2 are in ``control_flow_graphs.py``.
"""
import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import ShapeError, UnsupportedCaseError
from workbench.importer.control_flow_graphs import (body_of, inline_branch, is_control_flow,
                                                    node_attributes, outer_names,
                                                    passes_condition, refuse)
# The importer checks bodies through this module (``control_flow.unsupported_in_bodies``).
from workbench.importer.control_flow_graphs import unsupported_in_bodies  # noqa: F401

# Known outer values up to this many elements are bound inside a body as constants.
BIND_MAX_ELEMENTS = 4096


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


# ---------------------------------------------------------------- output shapes

def pin_control_flow_shapes(model, known: dict, fold: bool):
    """Give the outputs of If/Loop/Scan nodes the static shapes their bodies give
    (value_info), where inference left them open; (model, how many were pinned)."""
    from workbench.importer.shapes import infer_shapes, tensor_types
    types = tensor_types(model)
    values = known_values(model, known)
    opsets = list(model.opset_import)
    pinned = {}
    for index, node in enumerate(model.graph.node):
        if not is_control_flow(node):
            continue
        ins = [types.get(n, (0, None)) if n else (0, None) for n in node.input]
        plan = plan_for(node, ins, types, values, opsets, model.ir_version, fold)
        if node.op_type == "If" and plan is not None and len(plan.branches) == 1:
            inline_branch(model, index, node, body_of(node, next(iter(plan.branches))))
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


def known_values(model, known) -> dict:
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
                self.branches[which] = Body(body_of(node, which), [], types, values, opsets, ir,
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
            raise refuse(node, f"its branches give outputs of different or unknown shapes "
                               f"(then {_text(shapes['then_branch'])}, else "
                               f"{_text(shapes['else_branch'])}) and the condition is known only "
                               f"at run time, so the output shapes depend on data")
        self.outputs = next(iter(shapes[w] for w in self.branches))
        if any(s is None for _, s in self.outputs):
            raise refuse(node, f"a branch output has no static shape ({_text(self.outputs)})")


def _text(types) -> str:
    return ", ".join("?" if s is None else str(list(s)) for _, s in types)


class LoopPlan:
    def __init__(self, node, ins, types, values, opsets, ir, fold):
        self.node = node
        body = body_of(node, "body")
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
                raise refuse(node, f"loop-carried value '{vi.name}' changes shape from "
                                   f"{list(carried[k][1])} to {'?' if t[1] is None else list(t[1])}"
                                   f" across iterations; only shape-invariant loops have static "
                                   f"shapes")
        scans = outs[1 + n:]
        # rule 3: the trip count of a loop with scan outputs must be known at import
        self.passes_cond = passes_condition(body, self.body)
        self.cond_known_true = cond0 is not None and bool(np.asarray(cond0).ravel()[0])
        if scans and (self.trips is None or not self.passes_cond
                      or not self.cond_known_true):
            why = ("the trip count M is not known at import" if self.trips is None else
                   "the body's condition can end the loop early")
            raise refuse(node, f"it has scan outputs, whose length is the number of iterations, "
                               f"and {why}: their shape depends on data")
        if m_name == "" and c_name == "":
            raise refuse(node, "neither a trip count nor a condition: the loop never ends")
        self.trips = max(self.trips, 0) if self.trips is not None else None
        if any(s is None for _, s in scans):
            raise refuse(node, f"a scan output has no static shape ({_text(scans)})")
        self.outputs = [carried[k] for k in range(n)] + [
            (e, (self.trips,) + tuple(s)) for e, s in scans]


class ScanPlan:
    def __init__(self, node, ins, types, values, opsets, ir, fold):
        self.node = node
        a = node_attributes(node)
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
            raise refuse(node, f"scan inputs of different lengths {sorted(lengths)}")
        self.length = lengths.pop()
        slices = [(e, tuple(d for i, d in enumerate(s) if i != ax))
                  for (e, s), ax in zip(scans, self.in_axes)]
        self.body = Body(body_of(node, "body"), states + slices, types, values, opsets, ir, fold)
        outs = self.body.output_types()
        for k in range(n):
            if outs[k][1] is None or tuple(outs[k][1]) != tuple(states[k][1]):
                raise refuse(node, f"state {k} changes shape across iterations")
        per_step = outs[n:]
        if any(s is None for _, s in per_step):
            raise refuse(node, f"a scan output has no static shape ({_text(per_step)})")
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
            raise refuse(node, f"inputs with different batch sizes {sorted(map(str, batches))}")
        self.batch = batches.pop()
        lengths = {s[1] for _, s in rest[len(rest) - m:] if len(s) > 1}
        if node.input[0]:
            lens = values.get(node.input[0])
            if lens is None or len(lengths) != 1 or np.any(np.asarray(lens) != min(lengths)):
                raise refuse(node, "sequence_lens shorter than the scan inputs, or known only "
                                   "at run time, is not supported")


def _opset(opsets) -> int:
    return next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 0)
