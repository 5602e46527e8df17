"""Helpers shared by the bundled model builders.

A :class:`GraphBuilder` collects nodes and initializers, draws weights from a
seeded generator and names nodes the way the PyTorch legacy exporter does:
``<scope>/<OpType>``, then ``_1``, ``_2``... when the name is taken, with the
output tensor called ``<node name>_output_0``.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # onnxruntime accepts IR <= 10; the exporter at opset 17 writes 8
PRODUCER = "dace-workbench.sdfg_models"
PRODUCER_VERSION = "1"


def scope_of(module: str) -> str:
    """``"attention.self.query"`` -> ``"/attention/self/query"`` (``""`` -> ``""``)."""
    return "/" + module.replace(".", "/") if module else ""


class GraphBuilder:
    """Accumulates one ONNX graph; every random draw comes from ``seed``."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()

    # -- tensors -----------------------------------------------------------
    def _claim_tensor(self, name: str) -> str:
        if name in self._tensor_names:
            raise ValueError(f"tensor name {name!r} used twice")
        self._tensor_names.add(name)
        return name

    def initializer(self, name: str, array) -> str:
        """Add a constant initializer (float64 is stored as float32)."""
        array = np.asarray(array)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        self.initializers.append(numpy_helper.from_array(array, self._claim_tensor(name)))
        return name

    def weight(self, name: str, shape: Sequence[int], fan_in: int, gain: float = 1.0) -> str:
        """N(0, gain^2 / fan_in) weights: keeps activations of order 1."""
        scale = np.float32(gain / math.sqrt(fan_in))
        return self.initializer(name, self.rng.standard_normal(tuple(shape), dtype=np.float32) * scale)

    def bias(self, name: str, size: int, scale: float = 0.1) -> str:
        return self.initializer(name, self.rng.standard_normal(size, dtype=np.float32) * np.float32(scale))

    # -- nodes -------------------------------------------------------------
    def node(self, op_type: str, inputs: Sequence[str], scope: str = "",
             output: str | None = None, **attrs) -> str:
        """Append one node named ``<scope>/<op_type>[_k]``; return its output."""
        base = f"{scope}/{op_type}"
        name, k = base, 0
        while name in self._node_names:
            k += 1
            name = f"{base}_{k}"
        self._node_names.add(name)
        out = self._claim_tensor(output or f"{name}_output_0")
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def constant(self, value, scope: str = "", dtype=np.float32) -> str:
        """A ``Constant`` node holding ``value`` (scalar or array) of ``dtype``."""
        return self.node("Constant", [], scope, value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def conv(self, module: str, x: str, c_in: int, c_out: int, kernel: int, *,
             group: int = 1, pad: int = 0, gain: float = 1.0) -> str:
        """Conv with bias (BatchNorm folded), stride 1, as ``/<module>/Conv``."""
        fan_in = (c_in // group) * kernel * kernel
        w = self.weight(f"{module}.weight", (c_out, c_in // group, kernel, kernel), fan_in, gain)
        b = self.bias(f"{module}.bias", c_out)
        return self.node("Conv", [x, w, b], scope_of(module), dilations=[1, 1], group=group,
                         kernel_shape=[kernel, kernel], pads=[pad] * 4, strides=[1, 1])

    # -- model -------------------------------------------------------------
    def finish(self, graph_name: str, inputs: Mapping[str, Sequence[int]],
               outputs: Mapping[str, Sequence[int]], doc: str) -> onnx.ModelProto:
        """Wrap the graph into an opset-17 / IR-8 model and run the full checker."""
        def infos(items):
            return [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in items.items()]

        graph = helper.make_graph(self.nodes, graph_name, infos(inputs), infos(outputs),
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=PRODUCER, producer_version=PRODUCER_VERSION,
                                  doc_string=doc.strip())
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model
