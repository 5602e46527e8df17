"""``OnnxOp``: the one DaCe library node that stands for any ONNX node.

One class (not one per op type) keeps SDFG files loadable by class path and
lets the op registry decide, per op type, which implementations exist.
Attributes are stored as JSON so that the node serializes exactly.
"""
import json
import threading

import dace
from dace import properties
from dace.sdfg import nodes
from dace.transformation.transformation import ExpandTransformation

from workbench.ops import registry
from workbench.ops.whole import keep_whole


def _expansion(impl_name: str):
    """An ExpandTransformation that asks the registry for ``impl_name``."""

    class _Expand(ExpandTransformation):
        environments = []

        @staticmethod
        def expansion(node, state, sdfg, **kwargs):
            return keep_whole(registry.expand(node, state, sdfg, impl_name), node, state, sdfg)

    _Expand.__name__ = _Expand.__qualname__ = f"OnnxExpand_{impl_name}"
    # A module attribute, so that SDFG files that record the expansion
    # (transformation history) find the class by its path when loaded.
    globals()[_Expand.__name__] = _Expand
    return dace.library.expansion(_Expand)


# Constant inputs up to this many elements are recorded on the node, so
# implementations that need values at build time (axes, pads, repeats,
# scales, K) can read them.
MAX_RECORDED_CONST = 4096

# How often this thread read any node's ``consts``: a unit build compares it before and
# after expanding a unit to learn whether the unit's code depends on its recorded
# constants (``build.units``); every implementation reads them through ``consts``.
# Per thread, so a build beside this one cannot change the answer.
_reads = threading.local()


def constant_reads() -> int:
    """How many times this thread has read any node's ``consts``."""
    return getattr(_reads, "count", 0)


@dace.library.node
class OnnxOp(nodes.LibraryNode):
    """An ONNX operator. ``implementation`` picks how it expands."""

    implementations = {name: _expansion(name) for name in registry.IMPLEMENTATION_NAMES}
    default_implementation = "pure"

    op_type = properties.Property(dtype=str, default="", desc="ONNX op type")
    domain = properties.Property(dtype=str, default="", desc="ONNX domain ('' is ai.onnx)")
    onnx_name = properties.Property(dtype=str, default="", desc="ONNX node name")
    opset = properties.Property(dtype=int, default=17, desc="Opset version of the node's domain")
    attrs_json = properties.Property(dtype=str, default="{}", desc="ONNX attributes as JSON")
    consts_json = properties.Property(dtype=str, default="{}",
                                      desc="Values of small constant inputs, by input position")
    onnx_inputs = properties.ListProperty(element_type=str, default=[],
                                          desc="Connector per ONNX input position ('' = absent)")
    onnx_outputs = properties.ListProperty(element_type=str, default=[],
                                           desc="Connector per ONNX output position ('' = absent)")
    library_rows = properties.ListProperty(
        element_type=int, default=[],
        desc="A GEMM on oneDNN whose row count is symbolic: the row counts [lo, hi) where "
             "the library runs, as flat pairs (hi 0: no end); the BLAS runs elsewhere. "
             "Empty: the library runs at every size")

    constant_weights = properties.Property(
        dtype=bool, default=False,
        desc="Input 1 (the weights) is a constant of the program, which a library may pack "
             "once and keep; set by the transformation that chose the library. False: the "
             "program or its caller may change them between calls (a training program's "
             "parameters), so they are packed on every call")

    def __init__(self, name, op_type="", domain="", onnx_name="", opset=17, attrs=None,
                 onnx_inputs=(), onnx_outputs=(), consts=None, **kwargs):
        ins = {c for c in onnx_inputs if c}
        outs = {c for c in onnx_outputs if c}
        super().__init__(name, inputs=ins, outputs=outs, **kwargs)
        self.op_type, self.domain, self.onnx_name, self.opset = op_type, domain, onnx_name, opset
        self.set_attrs(attrs or {})
        self.consts_json = "{}"
        for position, value in (consts or {}).items():
            self.record_const(position, value)
        self.onnx_inputs, self.onnx_outputs = list(onnx_inputs), list(onnx_outputs)

    @property
    def attrs(self) -> dict:
        return json.loads(self.attrs_json)

    def set_attrs(self, attrs: dict) -> None:
        """Replace the ONNX attributes (sorted JSON: equal attributes, equal text)."""
        self.attrs_json = json.dumps(attrs, sort_keys=True)

    def record_const(self, position: int, value) -> bool:
        """Record ``value`` as the constant at ONNX input ``position`` if it is small
        and numeric (implementations read it through ``consts``); whether it was."""
        import numpy as np
        value = np.asarray(value)
        if value.size > MAX_RECORDED_CONST or value.dtype.kind not in "biuf":
            return False
        consts = json.loads(self.consts_json)
        consts[str(position)] = {"dtype": value.dtype.str, "shape": list(value.shape),
                                 "values": value.ravel().tolist()}
        self.consts_json = json.dumps(consts, sort_keys=True)
        return True

    def forget_const(self, position: int) -> None:
        """The value at ``position`` is no longer known at import (a symbolic program's
        size-dependent input): the implementation reads the input at run time."""
        consts = json.loads(self.consts_json)
        consts.pop(str(position), None)
        self.consts_json = json.dumps(consts, sort_keys=True)

    @property
    def consts(self) -> dict:
        """Input position -> numpy value, for small constant inputs."""
        import numpy as np
        _reads.count = constant_reads() + 1
        return {int(k): np.array(v["values"], dtype=v["dtype"]).reshape(v["shape"])
                for k, v in json.loads(self.consts_json).items()}

    @property
    def has_side_effects(self) -> bool:
        return False

    def __str__(self):
        return f"{self.op_type} {self.onnx_name}"
