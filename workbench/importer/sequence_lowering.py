"""The rewrite of one model without sequences and optionals, node by node.

``Lowering`` walks the graph: a node that takes or makes a sequence or an
optional is rewritten by the method named after its op type (``_<OpType>``,
in ``sequence_ops.py`` and ``sequence_inlining.py``), any other is kept. It
tracks what each sequence holds and the values known at import, and infers
the static shapes of the tensors made so far.
"""
import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import ShapeError, UnsupportedCaseError
from workbench.importer.sequence_inlining import Inlining
from workbench.importer.sequence_ops import SequenceOps
from workbench.importer.sequence_values import (ABSENT, LOWERED_AT_IMPORT, MAX_KNOWN_ELEMENTS,
                                                Fail, Lowered, carries_sequences, is_tensor,
                                                outer_reads, static_shape)


class Lowering(SequenceOps, Inlining):
    """One model's rewrite: ``run`` returns it as ``Lowered``."""

    def __init__(self, model, interface):
        self.src = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          onnx.defs.onnx_opset_version())
        g = model.graph
        self.taken = {n for node in g.node for n in list(node.input) + list(node.output)}
        self.taken |= {v.name for v in list(g.input) + list(g.output) + list(g.initializer)}
        self.taken |= {node.name for node in g.node}
        self.consts = {t.name: t for t in g.initializer}
        self.values = {}      # sequence name -> [tensor names]; absent optional -> ABSENT
        self.known_values = {}  # tensor name -> value computed at import (conditions, counts)
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.interface = interface

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    # --- the graph's interface ------------------------------------------------------------
    def _inputs(self):
        inits = set(self.consts)
        for vi in self.src.graph.input:
            if vi.name in inits:   # an input with a default value: the value's shape
                t = self.consts[vi.name]
                self.inputs.append(helper.make_tensor_value_info(vi.name, t.data_type, t.dims))
                continue
            if is_tensor(vi):  # a value given fixes its shape (element shapes follow from it)
                value = self.interface.get(vi.name)
                self.inputs.append(vi if value is None else helper.make_tensor_value_info(
                    vi.name, vi.type.tensor_type.elem_type, np.shape(value)))
                continue
            if vi.name not in self.interface:
                raise ShapeError(f"graph input '{vi.name}' is a sequence or an optional; give "
                                 f"its value (the elements of the sequence, or None) so that "
                                 f"its length and element shapes are known at import.")
            self.values[vi.name] = self._feed(vi.name, self.interface[vi.name], vi.type)

    def _feed(self, name, value, tp):
        if value is None:
            if not tp.HasField("optional_type"):
                raise ShapeError(f"graph input '{name}' is a sequence; None is no sequence.")
            return ABSENT
        if tp.HasField("optional_type"):
            tp = tp.optional_type.elem_type
        if isinstance(value, (list, tuple)):
            if not tp.HasField("sequence_type"):
                raise ShapeError(f"graph input '{name}' takes a tensor, not a list.")
            elem = tp.sequence_type.elem_type
            return [self._tensor_input(f"{name}__{i}", v, elem) for i, v in enumerate(value)]
        if not tp.HasField("tensor_type"):
            raise ShapeError(f"graph input '{name}' takes a sequence, not one array.")
        return self._tensor_input(f"{name}__value", value, tp)

    def _tensor_input(self, base, value, tp):
        if not tp.HasField("tensor_type"):
            raise ShapeError(f"'{base}': sequences of sequences, maps and optionals are not "
                             f"supported.")
        value = np.asarray(value)
        name = self.fresh(base)
        elem = tp.tensor_type.elem_type or helper.np_dtype_to_tensor_dtype(value.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
        self.feeds[name] = value
        return name

    def _outputs(self):
        outs, layout = [], {}
        for vo in self.src.graph.output:
            value = self.values.get(vo.name, vo.name)
            if is_tensor(vo) and isinstance(value, str):
                outs.append(vo)
                layout[vo.name] = vo.name
                continue
            if value is ABSENT:
                layout[vo.name] = ABSENT
                continue
            names = []
            fail = Fail(vo.name, "graph output")
            for i, t in enumerate(value if isinstance(value, list) else [value]):
                name = self.fresh(f"{vo.name}__{i}" if isinstance(value, list)
                                  else f"{vo.name}__value")
                vi = self.inferred(t, fail)
                self.nodes.append(helper.make_node("Identity", [t], [name],
                                                   name=self.fresh(f"{name}_out")))
                outs.append(helper.make_tensor_value_info(name, vi.type.tensor_type.elem_type,
                                                          static_shape(vi, t, fail)))
                names.append(name)
            layout[vo.name] = names if isinstance(value, list) else names[0]
        return outs, layout

    # --- nodes ---------------------------------------------------------------------------
    def run(self) -> Lowered:
        self._inputs()
        for i, node in enumerate(self.src.graph.node):
            self.node(node, node.name or f"{node.op_type}_{i}")
        outs, layout = self._outputs()
        g = self.src.graph
        graph = helper.make_graph(self.nodes, g.name, self.inputs, outs,
                                  list(g.initializer) + self.inits)
        model = helper.make_model(graph, opset_imports=list(self.src.opset_import),
                                  ir_version=self.src.ir_version)
        for f in self.src.functions:
            model.functions.add().CopyFrom(f)
        return Lowered(model, layout, self.feeds)

    def node(self, node, label):
        op = node.op_type if node.domain in ("", "ai.onnx") else None
        fail = Fail(label, node.op_type)
        if op in LOWERED_AT_IMPORT or (op == "Identity" and node.input[0] in self.values) \
                or (op in ("If", "Loop") and (carries_sequences(node) or any(
                    i in self.values for i in list(node.input) + sorted(outer_reads(node))))):
            getattr(self, f"_{op}")(node, fail)
            return
        for name in node.input:
            if name in self.values:
                raise fail(f"input '{name}' is a sequence or an absent optional; only "
                           f"{', '.join(sorted(LOWERED_AT_IMPORT))} and Identity take those")
        for a in node.attribute:   # a body reading an outer sequence cannot be rewritten here
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                inner = {i for n in g.node for i in n.input}
                hit = sorted(inner & set(self.values))
                if hit:
                    raise fail(f"its subgraph reads the sequence or optional '{hit[0]}'")
        self.nodes.append(node)

    def emit(self, op, inputs, outputs, label, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.fresh(label), **attrs))

    def const(self, value, base) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        self.consts[name] = self.inits[-1]
        return name

    def known(self, name, fail, what):
        """The value of ``name`` when it follows from constants (initializers, Constant
        nodes, and the nodes emitted so far that compute from them)."""
        value = self.value_of(name)
        if value is None:
            raise fail(f"{what} '{name}' is computed at run time; it must be known at import "
                       f"for the sequence's length and elements (or the branch taken) to be")
        return value

    def value_of(self, name, depth=0):
        if name in self.known_values:
            return self.known_values[name]
        t = self.consts.get(name)
        if t is not None:
            return numpy_helper.to_array(t)
        from workbench.importer.fold import NON_DETERMINISTIC, evaluate_node
        producer = next((n for n in reversed(self.nodes) if name in n.output), None)
        if producer is None or depth > 64 or producer.op_type in ("If", "Loop", "Scan") \
                or producer.op_type in NON_DETERMINISTIC or producer.domain not in ("", "ai.onnx"):
            return None
        feeds = {}
        for i in producer.input:
            if i:
                feeds[i] = self.value_of(i, depth + 1)
                if feeds[i] is None or feeds[i].size > MAX_KNOWN_ELEMENTS:
                    return None
        opsets = {o.domain: o.version for o in self.src.opset_import}
        try:
            values = evaluate_node(producer, feeds, opsets)
        except Exception:  # noqa: BLE001 (left to the compiled program)
            return None
        for out, v in zip(producer.output, values):
            if out:
                self.known_values[out] = np.asarray(v)
        return self.known_values.get(name)

    def sequence(self, name, fail) -> list:
        value = self.values.get(name)
        if not isinstance(value, list):
            raise fail(f"input '{name}' is not a sequence known at import")
        return value

    def shape(self, name, fail) -> tuple:
        """The static shape of tensor ``name``."""
        return static_shape(self.inferred(name, fail), name, fail)

    def inferred(self, name, fail):
        """The value info of tensor ``name``, from onnx's inference on the nodes so far."""
        for vi in self.inputs:
            if vi.name == name:
                return vi
        if name in self.consts:
            t = self.consts[name]
            return helper.make_tensor_value_info(name, t.data_type, tuple(t.dims))
        g = self.src.graph
        graph = helper.make_graph(self.nodes, "shape", self.inputs,
                                  [helper.make_empty_tensor_value_info(name)],
                                  list(g.initializer) + self.inits)
        model = helper.make_model(graph, opset_imports=list(self.src.opset_import),
                                  ir_version=self.src.ir_version)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception as e:  # noqa: BLE001 (onnx raises several types)
            raise fail(f"the shape of '{name}' cannot be inferred ({e})") from None
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            if vi.name == name and vi.type.tensor_type.elem_type:
                try:
                    static_shape(vi, name, fail)
                    return vi
                except UnsupportedCaseError:
                    break
        value = self.value_of(name)   # computed from constants: its value has the shape
        if value is not None and value.dtype.kind in "biuf":
            return helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        raise fail(f"the type and shape of '{name}' are not known at import")
