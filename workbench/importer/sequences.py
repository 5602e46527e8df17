"""Sequences and optionals lowered to plain tensors at import.

An SDFG holds arrays, not lists of arrays of varying count. Where a
sequence's length and its elements' tensors are known at import, and an
optional's presence too, the graph is rewritten without them:

- a sequence becomes a list of tensor names (SequenceConstruct, SequenceEmpty,
  SequenceInsert/SequenceErase with a constant position, SplitToSequence whose
  split is a constant, Identity and OptionalGetElement of a sequence);
- SequenceAt with a constant position becomes an Identity of that element,
  SequenceLength a constant, ConcatFromSequence a Concat (with Unsqueeze for
  ``new_axis``), SplitToSequence a Split (with Squeeze for ``keepdims=0``);
- SequenceMap's body is inlined once per element, under fresh names;
- an If or Loop that carries sequences or optionals (its bodies hold their
  ops, or read one from outside) is inlined: the branch its condition
  (known at import) picks, or the body once per iteration of a trip count
  and conditions known at import, carried values passed from copy to copy
  and scan outputs stacked. Other If/Loop nodes are left to the importer;
- an optional is its value or absent: Optional, OptionalGetElement and
  Identity pass it on, OptionalHasElement becomes a constant.

Sequence- and optional-typed graph inputs are fed element by element
(``interface``: one tensor input per element, named ``<input>__<i>``); the
caller learns which tensor outputs make up each sequence or optional output
(``Lowered.outputs``). Anything else (a position computed at run time, a
sequence passed to If/Loop/Scan) is refused with the op and node named.
"""
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import ShapeError, UnsupportedCaseError

# Op types this pass removes; the importer's op check lets them through to it.
LOWERED_AT_IMPORT = {
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "ConcatFromSequence", "SplitToSequence", "SequenceMap",
    "Optional", "OptionalHasElement", "OptionalGetElement",
}


class Absent:
    """An optional without a value."""

    def __repr__(self):
        return "Absent"


ABSENT = Absent()


@dataclass
class Lowered:
    """A tensor-only model and how its outputs make up the original ones.

    ``outputs`` maps each original graph output to a tensor output name (a
    tensor or a present optional tensor), a list of them (a sequence) or
    ``ABSENT`` (an absent optional); ``feeds`` the tensor inputs made from
    sequence and optional inputs to their arrays.
    """
    model: onnx.ModelProto
    outputs: dict
    feeds: dict = field(default_factory=dict)
    bound: onnx.ModelProto = None   # the model lowered (to lower the next inputs alike)


def needs_lowering(model: onnx.ModelProto) -> bool:
    g = model.graph
    return any(n.op_type in LOWERED_AT_IMPORT and n.domain in ("", "ai.onnx")
               or carries_sequences(n) for n in g.node) \
        or any(not v.type.HasField("tensor_type") for v in list(g.input) + list(g.output))


def check_tensor_inputs(model: onnx.ModelProto) -> None:
    """A sequence or optional graph input needs its value to be lowered (``interface``):
    say so before the input shapes are fixed, which assumes tensors."""
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in inits and not _is_tensor(vi):
            raise ShapeError(f"graph input '{vi.name}' is a sequence or an optional; the "
                             f"workbench takes tensor inputs only here (the ONNX backend "
                             f"feeds sequences element by element). Export the model with "
                             f"tensor inputs.")


def assemble(lowered: Lowered, values: dict) -> dict:
    """Original output name -> array, list of arrays or None, from the tensor outputs."""
    def one(layout):
        if layout is ABSENT:
            return None
        if isinstance(layout, list):
            return [values[n] for n in layout]
        return values[layout]
    return {name: one(layout) for name, layout in lowered.outputs.items()}


def lower_sequences(model: onnx.ModelProto, interface: dict = None) -> Lowered:
    """Rewrite ``model`` without sequences and optionals (see the module doc).

    ``interface`` gives the value of each sequence- or optional-typed graph
    input: a list of arrays (a sequence), an array (a present optional
    tensor) or None (absent); only its structure and shapes are used, the
    arrays come back in ``Lowered.feeds`` under their tensor input names.
    An array given for a tensor input fixes that input's shape.
    """
    return _Lowering(model, interface or {}).run()


def _is_tensor(vi) -> bool:
    return vi.type.HasField("tensor_type")


class _Lowering:
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
            if _is_tensor(vi):  # a value given fixes its shape (element shapes follow from it)
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
            if _is_tensor(vo) and isinstance(value, str):
                outs.append(vo)
                layout[vo.name] = vo.name
                continue
            if value is ABSENT:
                layout[vo.name] = ABSENT
                continue
            names = []
            fail = _Fail(vo.name, "graph output")
            for i, t in enumerate(value if isinstance(value, list) else [value]):
                name = self.fresh(f"{vo.name}__{i}" if isinstance(value, list)
                                  else f"{vo.name}__value")
                vi = self.inferred(t, fail)
                self.nodes.append(helper.make_node("Identity", [t], [name],
                                                   name=self.fresh(f"{name}_out")))
                outs.append(helper.make_tensor_value_info(name, vi.type.tensor_type.elem_type,
                                                          _static(vi, t, fail)))
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
        fail = _Fail(label, node.op_type)
        if op in LOWERED_AT_IMPORT or (op == "Identity" and node.input[0] in self.values) \
                or (op in ("If", "Loop") and (carries_sequences(node) or any(
                    i in self.values for i in list(node.input) + sorted(_outer_reads(node))))):
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
        return _static(self.inferred(name, fail), name, fail)

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
                    _static(vi, name, fail)
                    return vi
                except UnsupportedCaseError:
                    break
        value = self.value_of(name)   # computed from constants: its value has the shape
        if value is not None and value.dtype.kind in "biuf":
            return helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        raise fail(f"the type and shape of '{name}' are not known at import")

    # --- sequence ops (named _<OpType>) ---------------------------------------------------
    def _SequenceConstruct(self, node, fail):
        self.values[node.output[0]] = list(node.input)

    def _SequenceEmpty(self, node, fail):
        self.values[node.output[0]] = []

    def _position(self, node, fail, n, insert):
        if len(node.input) < (3 if insert else 2) or not node.input[2 if insert else 1]:
            return n if insert else n - 1
        given = self.known(node.input[2 if insert else 1], fail, "position")
        pos = int(np.asarray(given).ravel()[0])
        hi = n if insert else n - 1
        if not -n <= pos <= hi:
            raise fail(f"position {pos} is outside [-{n}, {hi}] for a sequence of {n}")
        return pos + n if pos < 0 else pos

    def _SequenceInsert(self, node, fail):
        seq = list(self.sequence(node.input[0], fail))
        seq.insert(self._position(node, fail, len(seq), True), node.input[1])
        self.values[node.output[0]] = seq

    def _SequenceErase(self, node, fail):
        seq = list(self.sequence(node.input[0], fail))
        if not seq:
            raise fail("erasing from an empty sequence")
        del seq[self._position(node, fail, len(seq), False)]
        self.values[node.output[0]] = seq

    def _SequenceAt(self, node, fail):
        seq = self.sequence(node.input[0], fail)
        pos = int(np.asarray(self.known(node.input[1], fail, "position")).ravel()[0])
        if not -len(seq) <= pos < len(seq):
            raise fail(f"position {pos} is outside a sequence of {len(seq)}")
        self.emit("Identity", [seq[pos]], [node.output[0]], f"{node.name or 'SequenceAt'}")

    def _SequenceLength(self, node, fail):
        n = len(self.sequence(node.input[0], fail))
        self.emit("Constant", [], [node.output[0]], node.name or "SequenceLength",
                  value=numpy_helper.from_array(np.array(n, dtype=np.int64)))

    def _ConcatFromSequence(self, node, fail):
        seq = self.sequence(node.input[0], fail)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axis, new_axis = int(attrs["axis"]), int(attrs.get("new_axis", 0))
        if not seq:
            raise fail("concatenating an empty sequence (the output has no shape)")
        parts = seq
        if new_axis:
            rank = len(self.shape(seq[0], fail)) + 1
            ax = axis + rank if axis < 0 else axis
            parts = [self.fresh(f"{t}__unsqueezed") for t in seq]
            for t, p in zip(seq, parts):
                self._unsqueeze(t, p, ax, node)
            axis = ax
        self.emit("Concat", parts, [node.output[0]], node.name or "ConcatFromSequence", axis=axis)

    def _unsqueeze(self, src, dst, axis, node):
        if self.opset >= 13:
            self.emit("Unsqueeze", [src, self.const(np.array([axis], np.int64), f"{dst}_axes")],
                      [dst], f"{node.name}_unsqueeze")
        else:
            self.emit("Unsqueeze", [src], [dst], f"{node.name}_unsqueeze", axes=[axis])

    def _SplitToSequence(self, node, fail):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = self.shape(node.input[0], fail)
        axis = int(attrs.get("axis", 0))
        axis = axis + len(shape) if axis < 0 else axis
        n = shape[axis]
        split = None
        if len(node.input) > 1 and node.input[1]:
            split = np.asarray(self.known(node.input[1], fail, "split"))
        if split is None:
            sizes, squeeze = [1] * n, not attrs.get("keepdims", 1)
        elif split.ndim == 0:
            step = int(split)
            if step <= 0:
                raise fail(f"split {step} is not positive")
            sizes, squeeze = [min(step, n - k) for k in range(0, n, step)], False
        else:
            sizes, squeeze = [int(s) for s in split], False
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise fail(f"split {sizes} does not add up to the axis length {n}")
        base = node.name or "SplitToSequence"
        parts = [self.fresh(f"{node.output[0]}__{i}") for i in range(len(sizes))]
        if not parts:
            self.values[node.output[0]] = []
            return
        pieces = [self.fresh(f"{p}__piece") for p in parts] if squeeze else parts
        if self.opset >= 13:
            self.emit("Split", [node.input[0], self.const(np.array(sizes, np.int64),
                                                          f"{base}_sizes")],
                      pieces, base, axis=axis)
        else:
            self.emit("Split", [node.input[0]], pieces, base, axis=axis, split=sizes)
        for piece, part in zip(pieces if squeeze else (), parts):
            if self.opset >= 13:
                self.emit("Squeeze", [piece, self.const(np.array([axis], np.int64),
                                                        f"{part}_axes")], [part], f"{base}_squeeze")
            else:
                self.emit("Squeeze", [piece], [part], f"{base}_squeeze", axes=[axis])
        self.values[node.output[0]] = parts

    def _SequenceMap(self, node, fail):
        body = next(a.g for a in node.attribute if a.name == "body")
        seqs = [self.values.get(n, n) for n in node.input]
        if not isinstance(seqs[0], list):
            raise fail(f"input '{node.input[0]}' is not a sequence known at import")
        n = len(seqs[0])
        for name, s in zip(node.input, seqs):
            if isinstance(s, list) and len(s) != n:
                raise fail(f"sequences of {n} and {len(s)} elements ('{name}')")
            if s is ABSENT:
                raise fail(f"input '{name}' is an absent optional")
        outs = [[] for _ in node.output]
        for k in range(n):
            values = self.inline(body, {f.name: s[k] if isinstance(s, list) else s
                                        for f, s in zip(body.input, seqs)},
                                 f"{node.name or 'SequenceMap'}__{k}")
            for j, value in enumerate(values):
                if not isinstance(value, str):
                    raise fail("its body returns a sequence or an optional per element")
                outs[j].append(value)
        for name, elems in zip(node.output, outs):
            self.values[name] = elems

    # --- If and Loop that carry sequences or optionals: inlined, unrolled --------------
    def inline(self, body, bindings: dict, tag: str) -> list:
        """Add ``body``'s nodes under fresh names, its inputs bound to ``bindings``
        (formal name -> tensor name, sequence or ABSENT); the values of its outputs."""
        rename = {}
        for formal, value in bindings.items():
            if not isinstance(value, str):
                name = self.fresh(f"{formal}__{tag}")
                self.values[name] = value
                value = name
            rename[formal] = value
        for t in body.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = rename[t.name] = self.fresh(f"{t.name}__{tag}")
            self.inits.append(copy)
            self.consts[copy.name] = copy
        for inner in body.node:
            clone = onnx.NodeProto()
            clone.CopyFrom(inner)
            for pos, name in enumerate(clone.input):
                clone.input[pos] = rename.get(name, name)
            for a in clone.attribute:   # nested bodies read the renamed names too
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    _rename_reads(g, rename)
            for pos, name in enumerate(clone.output):
                if name:
                    clone.output[pos] = rename[name] = self.fresh(f"{name}__{tag}")
            clone.name = self.fresh(f"{tag}__{inner.name or inner.op_type}")
            self.node(clone, clone.name)
        outs = []
        for out in body.output:
            name = rename.get(out.name, out.name)
            outs.append(self.values.get(name, name))
        return outs

    def bind(self, name, value):
        """Graph value ``name`` is ``value`` (a tensor name, a sequence or ABSENT)."""
        if isinstance(value, str):
            self.emit("Identity", [value], [name], f"{name}_bind")
        else:
            self.values[name] = value

    def _If(self, node, fail):
        """A condition known at import picks the branch, inlined."""
        cond = bool(np.asarray(self.known(node.input[0], fail, "condition")).ravel()[0])
        branch = next(a.g for a in node.attribute
                      if a.name == ("then_branch" if cond else "else_branch"))
        for name, value in zip(node.output, self.inline(branch, {}, node.name or "If")):
            self.bind(name, value)

    def _Loop(self, node, fail):
        """A trip count and conditions known at import: the body unrolled, its carried values
        (sequences included) passed from one copy to the next, scan outputs stacked."""
        body = next(a.g for a in node.attribute if a.name == "body")
        ins = list(node.input) + [""] * (2 - len(node.input))
        trip = int(np.asarray(self.known(ins[0], fail, "trip count")).ravel()[0]) \
            if ins[0] else None
        cond = bool(np.asarray(self.known(ins[1], fail, "condition")).ravel()[0]) \
            if ins[1] else True
        carried = [self.values.get(n, n) for n in ins[2:]]
        scans = [[] for _ in body.output[1 + len(carried):]]
        label = node.name or "Loop"
        i = 0
        while cond and (trip is None or i < trip):
            if i >= MAX_UNROLL:
                raise fail(f"more than {MAX_UNROLL} iterations to unroll")
            bindings = {body.input[0].name: self.const(np.array(i, np.int64), f"{label}_i{i}"),
                        body.input[1].name: self.const(np.array(cond), f"{label}_cond{i}")}
            bindings.update({f.name: v for f, v in zip(body.input[2:], carried)})
            outs = self.inline(body, bindings, f"{label}__{i}")
            cond = bool(np.asarray(self.known(outs[0], fail, "condition")).ravel()[0])
            carried = outs[1:1 + len(carried)]
            for parts, value in zip(scans, outs[1 + len(carried):]):
                if not isinstance(value, str):
                    raise fail("a scan output is a sequence or an optional")
                parts.append(value)
            i += 1
        for name, value in zip(node.output, carried):
            self.bind(name, value)
        for name, parts in zip(node.output[len(carried):], scans):
            if not parts:
                raise fail(f"scan output '{name}' of no iterations has no shape")
            stacked = [self.fresh(f"{p}__stacked") for p in parts]
            for p, st in zip(parts, stacked):
                self._unsqueeze(p, st, 0, node)
            self.emit("Concat", stacked, [name], f"{label}_scan", axis=0)

    # --- optionals ----------------------------------------------------------------------
    def _Optional(self, node, fail):
        self._alias(node.output[0], node.input[0] if node.input and node.input[0] else None)

    def _alias(self, out, src):
        value = ABSENT if src is None else self.values.get(src, src)
        if isinstance(value, str):
            self.emit("Identity", [value], [out], f"{out}_alias")
        else:
            self.values[out] = value

    def _OptionalGetElement(self, node, fail):
        if self.values.get(node.input[0]) is ABSENT:
            raise fail(f"the optional '{node.input[0]}' has no value")
        self._alias(node.output[0], node.input[0])

    def _Identity(self, node, fail):
        self._alias(node.output[0], node.input[0])

    def _OptionalHasElement(self, node, fail):
        src = node.input[0] if node.input else ""
        present = bool(src) and self.values.get(src) is not ABSENT
        self.emit("Constant", [], [node.output[0]], node.name or "OptionalHasElement",
                  value=numpy_helper.from_array(np.array(present)))


# Unrolling stops here; values followed at import up to this size.
MAX_UNROLL = 4096
MAX_KNOWN_ELEMENTS = 4096


def _graphs(node):
    for a in node.attribute:
        yield from ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))


def carries_sequences(node) -> bool:
    """A node with a body (at any depth) that holds a sequence or optional op."""
    return any(n.domain in ("", "ai.onnx") and n.op_type in LOWERED_AT_IMPORT
               or carries_sequences(n) for g in _graphs(node) for n in g.node)


def lowered_op_types(model: onnx.ModelProto) -> set:
    """The op types the importer lets through to this pass: the sequence and optional ops,
    and If/Loop where one of them carries sequences."""
    return LOWERED_AT_IMPORT | {n.op_type for n in model.graph.node
                                if n.op_type in ("If", "Loop") and carries_sequences(n)}


def _outer_reads(node) -> set:
    """Names the bodies of ``node`` read from outside them."""
    out = set()
    for g in _graphs(node):
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            out |= {i for i in n.input if i and i not in local}
            out |= _outer_reads(n) - local
            local |= set(n.output)
    return out


def _rename_reads(graph, rename: dict) -> None:
    """Rename the outer names ``graph`` (and the bodies in it) reads."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        for pos, name in enumerate(n.input):
            if name not in local and name in rename:
                n.input[pos] = rename[name]
        for g in _graphs(n):
            _rename_reads(g, {k: v for k, v in rename.items() if k not in local})
        local |= set(n.output)
    for o in graph.output:
        if o.name not in local and o.name in rename:
            o.name = rename[o.name]


class _Fail:
    def __init__(self, label, op_type):
        self.label, self.op_type = label, op_type

    def __call__(self, why) -> UnsupportedCaseError:
        return UnsupportedCaseError(self.label, self.op_type, why)


def _static(vi, name, fail) -> tuple:
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if not tt.HasField("shape") or any(d is None for d in dims):
        raise fail(f"the shape of '{name}' is not static at import")
    return tuple(dims)
