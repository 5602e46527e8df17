"""Building tiny ONNX models and checking the workbench against onnxruntime.

    model = single_node_model("Add", {"a": ([2, 3], "float32"), "b": np.ones(3, "float32")})
    assert_matches_onnxruntime(model, {"a": ..., "b": ...})

An input given as an array is fed with that array; one given as
``(shape, dtype)`` is fed with seeded random values (see ``feeds_for``).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

IR_VERSION = 8


def _dtype_of(value) -> np.dtype:
    if isinstance(value, np.ndarray):
        return value.dtype
    return np.dtype(value[1] if len(value) > 1 else "float32")


def _shape_of(value) -> list:
    return list(value.shape) if isinstance(value, np.ndarray) else list(value[0])


def value_info(name: str, shape, dtype) -> onnx.ValueInfoProto:
    """A typed graph input/output; ``shape`` entries may be ints or dim names."""
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         shape)


def single_node_model(op_type: str, inputs: dict, attrs: dict = None, outputs=("y",),
                      opset: int = 17, initializers: dict = None, node_inputs: list = None,
                      name: str = None, domain: str = "") -> onnx.ModelProto:
    """A checked model (IR version 8) with one ``op_type`` node.

    ``inputs`` maps graph input names to an array or ``(shape, dtype)``;
    ``initializers`` maps names to constant arrays. The node reads
    ``node_inputs`` in order (``""`` for an absent optional input), by
    default the inputs then the initializers. ``outputs`` is a list of names
    (types come from ONNX shape inference) or a dict name -> (shape, dtype).
    """
    initializers = dict(initializers or {})
    if node_inputs is None:
        node_inputs = list(inputs) + list(initializers)
    if isinstance(outputs, dict):
        outs = [value_info(n, *spec) for n, spec in outputs.items()]
    else:
        outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    node = helper.make_node(op_type, node_inputs, [o.name for o in outs],
                            name=name or f"{op_type}_node", domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], f"{op_type.lower()}_test",
        [value_info(n, _shape_of(v), _dtype_of(v)) for n, v in inputs.items()], outs,
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    imports = [helper.make_opsetid("", opset)]
    if domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)
    if not isinstance(outputs, dict):
        model = _typed_outputs(model)
    onnx.checker.check_model(model, full_check=domain in ("", "ai.onnx"))
    return model


def graph_model(nodes: list, inputs: dict, initializers: dict, outputs: list,
                opset: int = 17) -> onnx.ModelProto:
    """A checked model of ``nodes`` (inputs: name -> (shape, dtype)), its ``outputs``
    typed by shape inference."""
    graph = helper.make_graph(
        nodes, "graph", [value_info(n, list(shape), dtype) for n, (shape, dtype) in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    model = _typed_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                             ir_version=IR_VERSION))
    onnx.checker.check_model(model, full_check=True)
    return model


def op_counts(ws) -> dict:
    """Op type -> how many OnnxOp nodes of it the session's SDFG has (bodies too)."""
    from collections import Counter
    from workbench.ops.node import OnnxOp
    return Counter(n.op_type for n, _ in ws.sdfg.all_nodes_recursive() if isinstance(n, OnnxOp))


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fill output types from shape inference: the workbench needs them static."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
             if vi.type.HasField("tensor_type")}
    for out in model.graph.output:
        if out.name not in types:
            raise ValueError(f"shape inference gives no type for output '{out.name}'")
        out.type.CopyFrom(types[out.name].type)
    return model


def combine(models: list, name: str = "combined") -> onnx.ModelProto:
    """One model holding the (disjoint) graphs of ``models`` side by side.

    Several cases of one op then cost one compile; each keeps its own
    outputs, so a failure still names the case.
    """
    first = models[0]
    graph = helper.make_graph(
        [n for m in models for n in m.graph.node], name,
        [i for m in models for i in m.graph.input], [o for m in models for o in m.graph.output],
        initializer=[t for m in models for t in m.graph.initializer])
    model = helper.make_model(graph, opset_imports=list(first.opset_import),
                              ir_version=first.ir_version)
    onnx.checker.check_model(model)
    return model


def feeds_for(inputs: dict, seed: int = 0, positive: bool = False) -> dict:
    """Arrays for ``inputs``: given arrays as they are, ``(shape, dtype)`` random."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, value in inputs.items():
        if isinstance(value, np.ndarray):
            feeds[name] = value
            continue
        shape, dtype = _shape_of(value), _dtype_of(value)
        if dtype.kind == "f":
            data = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, shape)
        else:
            data = rng.integers(0, 3, shape)
        feeds[name] = np.asarray(data).astype(dtype)
    return feeds


def onnx_ops(sdfg) -> list:
    """The ``OnnxOp`` library nodes of ``sdfg``, in every state."""
    from workbench.ops.node import OnnxOp
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, OnnxOp)]


def set_implementation(ws, implementation: str) -> None:
    """Pick ``implementation`` on every node of ``ws.sdfg`` that offers it."""
    from workbench.ops import implementations_of
    for node in onnx_ops(ws.sdfg):
        if implementation in implementations_of(node.op_type):
            node.implementation = implementation


def assert_matches_onnxruntime(model, inputs: dict = None, implementation: str = None,
                               rtol: float = 1e-3, atol: float = 1e-4, **open_kwargs):
    """Open ``model``, build and run it, and compare every output with onnxruntime.

    ``inputs`` may hold ``(shape, dtype)`` entries (see ``feeds_for``).
    Returns the session so callers can look further.
    """
    import workbench
    ws = workbench.open(model, **open_kwargs)
    if implementation is not None:
        set_implementation(ws, implementation)
    report = ws.verify(feeds_for(inputs) if inputs is not None else None, rtol=rtol, atol=atol)
    assert report.match, report.text()
    return ws
