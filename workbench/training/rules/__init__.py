"""Gradient rules, one per ONNX op type.

A rule gets a ``GradCall`` (the forward node, the gradients reaching its
outputs, which inputs want one) and returns the gradient of each input, as
names of tensors it wrote with the call's ``Emitter`` (None: no gradient).
Rules only write ordinary ONNX operators, so the backward pass is imported,
transformed, profiled and verified like any model.
"""
from onnx import helper

RULES = {}


def rule(*op_types):
    def register(fn):
        for op_type in op_types:
            RULES[op_type] = fn
        return fn
    return register


class GradCall:
    def __init__(self, emitter, node, dys: list, wants: list):
        self.e, self.node, self.dys, self._wants = emitter, node, dys, wants
        self._attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def x(self, i: int):
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def y(self, i: int = 0):
        return self.node.output[i] if i < len(self.node.output) and self.node.output[i] else None

    def dy(self, i: int = 0):
        """The gradient reaching output i; zeros where none reached it."""
        if i < len(self.dys) and self.dys[i] is not None:
            return self.dys[i]
        return self.e.zeros(self.y(i))

    def wants(self, i: int) -> bool:
        return i < len(self._wants) and self._wants[i]

    def attr(self, name: str, default=None):
        value = self._attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def shape(self, name: str) -> tuple:
        return self.e.shape(name)

    def fail(self, why: str):
        from workbench.errors import UnsupportedCaseError
        return UnsupportedCaseError(self.node.name or self.node.output[0], self.node.op_type,
                                    f"no gradient: {why}")


def _load() -> None:
    # each module registers its rules when imported
    from workbench.training.rules import (elementwise, linear, normalization,  # noqa: F401
                                          pooling, reduction, shaping)


_load()
