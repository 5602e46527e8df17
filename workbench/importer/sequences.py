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

The rewrite itself is ``sequence_lowering.Lowering``; the ops it rewrites are
in ``sequence_ops.py`` and ``sequence_inlining.py``.
"""
import onnx

from workbench.errors import ShapeError
from workbench.importer.sequence_lowering import Lowering
from workbench.importer.sequence_values import (ABSENT, LOWERED_AT_IMPORT, Lowered,
                                                carries_sequences, is_tensor)


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
        if vi.name not in inits and not is_tensor(vi):
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
    return Lowering(model, interface or {}).run()


def lowered_op_types(model: onnx.ModelProto) -> set:
    """The op types the importer lets through to this pass: the sequence and optional ops,
    and If/Loop where one of them carries sequences."""
    return LOWERED_AT_IMPORT | {n.op_type for n in model.graph.node
                                if n.op_type in ("If", "Loop") and carries_sequences(n)}
