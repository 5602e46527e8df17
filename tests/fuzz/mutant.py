"""What a mutant is, and the helpers every kind of mutation uses."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import onnx

MODEL_FILE = "model.onnx"
OUTSIDE_FILE = "secret.bin"   # written by the runner one level above each mutant


@dataclass
class Mutant:
    kind: str
    note: str
    files: dict                                  # relative path -> bytes
    links: dict = field(default_factory=dict)    # relative path -> symlink target


def _one(rng: random.Random, options):
    return options[rng.randrange(len(options))]


def _save(kind, note, model: onnx.ModelProto, **extra) -> Mutant:
    return Mutant(kind, note, {MODEL_FILE: model.SerializeToString(), **extra.pop("files", {})},
                  **extra)


def _graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _node_label(node, i):
    return node.name or f"#{i} {node.op_type}"


def _producers(model):
    return {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}


def _ancestors(model, j):
    """Indices of the nodes node ``j`` depends on (transitively)."""
    producers, seen, stack = _producers(model), set(), [j]
    while stack:
        for t in model.graph.node[stack.pop()].input:
            k = producers.get(t)
            if k is not None and k not in seen:
                seen.add(k)
                stack.append(k)
    return seen
