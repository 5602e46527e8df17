"""Ways to break an ONNX model, one function per kind.

Each function takes a private copy of a valid model and a seeded
``random.Random`` and returns a :class:`Mutant`: the files to write into an
empty folder (``model.onnx`` plus, for external data, its data files) and a
note saying exactly what was changed, so a failure can be reproduced by
reading the table. Every random choice comes from ``rng``: the same seed
gives the same mutants.

The runner puts each mutant's folder next to ``secret.bin``, so external
data paths such as ``../secret.bin`` point at a file that really exists
outside the model's folder.
"""
from __future__ import annotations

import random

import onnx

from tests.fuzz.attr_mutations import attr_values, wrong_attr_type, wrong_dtype
from tests.fuzz.file_mutations import external_data, flip_bytes, not_onnx, truncate
from tests.fuzz.graph_mutations import (cycle, dangling_input, duplicate_names, huge_shape,
                                        negative_shape, structure, unknown_domain, wrong_dims)
from tests.fuzz.mutant import MODEL_FILE, OUTSIDE_FILE, Mutant  # noqa: F401 (the runner's names)


MUTATIONS = {f.__name__: f for f in (
    truncate, flip_bytes, not_onnx, wrong_dims, negative_shape, huge_shape, cycle,
    dangling_input, duplicate_names, unknown_domain, structure, wrong_dtype, wrong_attr_type,
    attr_values, external_data)}


def mutate(kind: str, model: onnx.ModelProto, rng: random.Random) -> Mutant:
    """Mutant of a private copy of ``model``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return MUTATIONS[kind](copy, rng)
