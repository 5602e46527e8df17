"""The sequence and optional ops, each rewritten into tensor ops at import.

``SequenceOps`` is a part of ``sequence_lowering.Lowering``: a method per op
type (``_<OpType>``) that records what a sequence holds or emits the tensor
ops that replace it.
"""
import numpy as np
from onnx import helper, numpy_helper

from workbench.importer.sequence_values import ABSENT


class SequenceOps:
    """The ``_<OpType>`` methods of the sequence and optional ops."""

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
                self.unsqueeze(t, p, ax, node)
            axis = ax
        self.emit("Concat", parts, [node.output[0]], node.name or "ConcatFromSequence", axis=axis)

    def unsqueeze(self, src, dst, axis, node):
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

