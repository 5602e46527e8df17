"""Small models and checks shared by the fusion-level tests."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_helpers import onnx_ops, value_info
from workbench import transformation_api as transform

F32 = "float32"


def graph_model(nodes, inputs: dict, outputs, inits: dict = None, opset: int = 17):
    """A checked model from ``nodes``; ``inputs`` maps names to (shape, dtype),
    ``outputs`` are names whose types shape inference fills in."""
    graph = helper.make_graph(
        nodes, "fusion_test", [value_info(n, *spec) for n, spec in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    types = {v.name: v.type for v in list(inferred.value_info) + list(inferred.output)}
    for out in model.graph.output:
        out.type.CopyFrom(types[out.name])
    onnx.checker.check_model(model, full_check=True)
    return model


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"/{outs[0]}/{op}", **attrs)


def apply_all(ws, name: str) -> list:
    """Apply ``name`` until it no longer matches; the descriptions applied."""
    done = []
    for _ in range(100):
        found = transform.get(name).find(ws.sdfg)
        if not found:
            return done
        ws.apply(found[0])
        done.append(found[0].description)
    raise AssertionError(f"{name} kept matching")


def op_types(ws) -> list:
    return sorted(n.op_type for n in onnx_ops(ws.sdfg))


def nodes_of(ws, op_type: str) -> list:
    return [n for n in onnx_ops(ws.sdfg) if n.op_type == op_type]


def verify(ws, inputs=None):
    report = ws.verify(inputs)
    assert report.match, report.text()


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)
