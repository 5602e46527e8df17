"""What the lowering of sequences and optionals shares (see ``sequences.py``).

The op types it removes, the value of an absent optional, its result
(``Lowered``), its limits, how it names a refused node, and walks over the
bodies (subgraph attributes) of a node.
"""
from dataclasses import dataclass, field

import onnx

from workbench.errors import UnsupportedCaseError

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


# Unrolling stops here; values followed at import up to this size.
MAX_UNROLL = 4096
MAX_KNOWN_ELEMENTS = 4096


def is_tensor(vi) -> bool:
    """Whether value info ``vi`` is a tensor (not a sequence, optional or map)."""
    return vi.type.HasField("tensor_type")


def body_graphs(node):
    """The GraphProtos of ``node``'s subgraph attributes."""
    for a in node.attribute:
        yield from ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))


def carries_sequences(node) -> bool:
    """A node with a body (at any depth) that holds a sequence or optional op."""
    return any(n.domain in ("", "ai.onnx") and n.op_type in LOWERED_AT_IMPORT
               or carries_sequences(n) for g in body_graphs(node) for n in g.node)


def outer_reads(node) -> set:
    """Names the bodies of ``node`` read from outside them."""
    out = set()
    for g in body_graphs(node):
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            out |= {i for i in n.input if i and i not in local}
            out |= outer_reads(n) - local
            local |= set(n.output)
    return out


def rename_reads(graph, rename: dict) -> None:
    """Rename the outer names ``graph`` (and the bodies in it) reads."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        for pos, name in enumerate(n.input):
            if name not in local and name in rename:
                n.input[pos] = rename[name]
        for g in body_graphs(n):
            rename_reads(g, {k: v for k, v in rename.items() if k not in local})
        local |= set(n.output)
    for o in graph.output:
        if o.name not in local and o.name in rename:
            o.name = rename[o.name]


class Fail:
    """The error refusing one node, named by its label and op type, for a reason."""

    def __init__(self, label, op_type):
        self.label, self.op_type = label, op_type

    def __call__(self, why) -> UnsupportedCaseError:
        return UnsupportedCaseError(self.label, self.op_type, why)


def static_shape(vi, name, fail) -> tuple:
    """The dims of tensor value info ``vi``; ``fail`` refuses one that is not static."""
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if not tt.HasField("shape") or any(d is None for d in dims):
        raise fail(f"the shape of '{name}' is not static at import")
    return tuple(dims)
