"""What an op test case is, and small input makers shared by the case tables."""
from dataclasses import dataclass, field

import numpy as np

_rng = np.random.default_rng(1234)


def rand(*shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(dtype)


def pos(*shape):
    """Away from 0 so Log, Sqrt, Reciprocal, Div and Pow stay well defined."""
    return _rng.uniform(0.5, 2.0, shape).astype("float32")


def ints(*values):
    return np.array(values, dtype=np.int64)


@dataclass
class Case:
    id: str
    inputs: dict                         # graph inputs, fed with these arrays
    attrs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)  # initializers (weights, shape tensors)
    outputs: tuple = ("y",)
    node_inputs: list = None             # order when not inputs + init; "" = absent
    opset: int = 17


def unary(x=None, **attrs):
    return [Case("default", {"x": rand(2, 3, 4) if x is None else x}, attrs)]


C = Case
