"""One SDFG state, one ``OnnxOp`` library node per ONNX node."""
from dataclasses import dataclass

import dace
import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import ShapeError, UnsupportedOpError
from workbench.importer import control_flow, control_flow_sdfg
from workbench.importer.data_dependent import unknown_shape_error
from workbench.importer.identifiers import c_identifier
from workbench.ops import registry
from workbench.ops.node import OnnxOp

DTYPES = {
    onnx.TensorProto.FLOAT: dace.float32, onnx.TensorProto.DOUBLE: dace.float64,
    onnx.TensorProto.FLOAT16: dace.float16, onnx.TensorProto.INT8: dace.int8,
    onnx.TensorProto.INT16: dace.int16, onnx.TensorProto.INT32: dace.int32,
    onnx.TensorProto.INT64: dace.int64, onnx.TensorProto.UINT8: dace.uint8,
    onnx.TensorProto.UINT16: dace.uint16, onnx.TensorProto.UINT32: dace.uint32,
    onnx.TensorProto.UINT64: dace.uint64, onnx.TensorProto.BOOL: dace.bool_,
}
@dataclass
class TensorInfo:
    """An ONNX tensor as the SDFG holds it."""
    onnx_name: str
    sdfg_name: str
    shape: tuple  # the ONNX shape (0-d tensors are stored as shape (1,))
    dtype: str    # numpy dtype name


# Ops that constant folding always removes when shapes are static.
FOLDED_AT_IMPORT = {"Constant", "Shape", "Size"}


def check_supported(model: onnx.ModelProto, allow=()) -> None:
    """Raise one error listing every unsupported op type with its nodes."""
    missing = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type in allow and node.domain in ("", "ai.onnx"):
            continue
        if control_flow.is_control_flow(node):  # supported when its bodies are
            for key, names in control_flow.unsupported_in_bodies(node,
                                                                 registry.is_supported).items():
                missing.setdefault(key, []).extend(names)
            continue
        if not registry.is_supported(node.op_type, node.domain):
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            missing.setdefault(key, []).append(node.name or f"#{i}")
    if missing:
        raise UnsupportedOpError(missing)


def connector_names(node: onnx.NodeProto, opset: int):
    """Connector names from the op schema's formal parameter names."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        formal_in = [p.name for p in schema.inputs]
        formal_out = [p.name for p in schema.outputs]
    except Exception:
        formal_in, formal_out = [], []

    def names(actual, formal, prefix):
        taken, out = set(), []
        for i, tensor in enumerate(actual):
            if not tensor:
                out.append("")
                continue
            variadic = i >= len(formal) - 1 and len(actual) > len(formal) and formal
            base = formal[min(i, len(formal) - 1)] if formal else f"{prefix}{i}"
            if variadic or base in taken:
                base = f"{base}_{i}"
            conn = c_identifier(base, taken)
            out.append(conn)
        return out

    return names(node.input, formal_in, "in"), names(node.output, formal_out, "out")


def constant_inputs(node: onnx.NodeProto, inits: dict, known: dict = None) -> dict:
    """Constant inputs (initializers, or values known at import) by position; the node
    records the small ones (``OnnxOp.record_const``)."""
    consts = {}
    for pos, name in enumerate(node.input):
        t = inits.get(name)
        arr = numpy_helper.to_array(t) if t is not None else (known or {}).get(name)
        if arr is not None:
            consts[pos] = arr
    return consts


def attributes_json(node: onnx.NodeProto) -> dict:
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.type == onnx.AttributeProto.TENSOR:
            arr = numpy_helper.to_array(v)
            v = {"__tensor__": arr.dtype.str, "shape": list(arr.shape), "values": arr.ravel().tolist()}
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            v = "<graph>"
        attrs[a.name] = v
    return attrs


def build_sdfg(model: onnx.ModelProto, types: dict, name: str, prefer_blas: bool,
               known: dict = None, fold: bool = True):
    """Return (sdfg, inputs, outputs, weights) for a folded, shape-inferred model.

    ``types`` maps tensor name -> (onnx elem type, static shape). If, Loop and Scan
    nodes become nested SDFGs with control flow (importer/control_flow.py); ``fold``
    is how their bodies are folded.
    """
    graph = model.graph
    check_supported(model)
    missing = sorted({t for n in graph.node for t in list(n.input) + list(n.output)
                      if t and (t not in types or types[t][1] is None)})
    if missing:
        raise unknown_shape_error(model, missing)
    sdfg = dace.SDFG(name)
    state = sdfg.add_state("main", is_start_block=True)
    taken, infos, access = set(), {}, {}
    inits = {t.name: t for t in graph.initializer}
    graph_in = [i.name for i in graph.input if i.name not in inits]
    graph_out = [o.name for o in graph.output]

    def tensor(onnx_name):
        if onnx_name in infos:
            return infos[onnx_name]
        elem, shape = types[onnx_name]
        if elem not in DTYPES:
            raise ShapeError(f"tensor '{onnx_name}' has element type "
                             f"{onnx.TensorProto.DataType.Name(elem)}, which is not supported.")
        sname = c_identifier(onnx_name, taken)
        transient = onnx_name not in inits and onnx_name not in graph_in and onnx_name not in graph_out
        sdfg.add_array(sname, shape or (1,), DTYPES[elem], transient=transient)
        info = TensorInfo(onnx_name, sname, tuple(shape), np.dtype(DTYPES[elem].as_numpy_dtype()).name)
        infos[onnx_name] = info
        return info

    def node_for(onnx_name):
        if onnx_name not in access:
            access[onnx_name] = state.add_access(tensor(onnx_name).sdfg_name)
        return access[onnx_name]

    opsets = {o.domain: o.version for o in model.opset_import}
    node_names = set()
    lifted = {}   # weights of control flow bodies, as outer arrays

    def new_array(hint, shape, dtype):
        sname = c_identifier(hint, taken)
        sdfg.add_array(sname, shape, dtype)
        return sname

    for i, node in enumerate(graph.node):
        opset = opsets.get(node.domain, opsets.get("ai.onnx", opsets.get("", 17)))
        onnx_name = node.name or f"{node.op_type}_{i}"
        if control_flow.is_control_flow(node):
            values = control_flow.known_values(model, known or {})
            scope = control_flow_sdfg.Scope(sdfg, state, node_for, lambda t: tensor(t).sdfg_name,
                                       new_array, types, values, list(model.opset_import),
                                       model.ir_version, prefer_blas, fold, build_sdfg,
                                       c_identifier, DTYPES)
            lifted.update(control_flow_sdfg.add_control_flow(
                scope, node, c_identifier(onnx_name, node_names)))
            continue
        ins, outs = connector_names(node, opset)
        # DaCe needs identifiers for node (and nested SDFG) names; keep the ONNX one too.
        lib = OnnxOp(c_identifier(onnx_name, node_names), op_type=node.op_type,
                     domain=node.domain, onnx_name=onnx_name,
                     opset=opset, attrs=attributes_json(node), onnx_inputs=ins, onnx_outputs=outs,
                     consts=constant_inputs(node, inits, known))
        impls = registry.implementations_of(node.op_type)
        lib.implementation = "blas" if prefer_blas and "blas" in impls else "pure"
        state.add_node(lib)
        for conn, t in zip(ins, node.input):
            if conn:
                src = node_for(t)
                state.add_edge(src, None, lib, conn, dace.Memlet.from_array(src.data, sdfg.arrays[src.data]))
        for conn, t in zip(outs, node.output):
            if conn:
                dst = node_for(t)
                state.add_edge(lib, conn, dst, None, dace.Memlet.from_array(dst.data, sdfg.arrays[dst.data]))
    for name in graph_in + graph_out:
        tensor(name)  # an input no node reads still gets an array
    # Owned copies in the stored shape (0-d becomes (1,)): DaCe refuses views.
    weights = {infos[n].sdfg_name: np.array(numpy_helper.to_array(inits[n]), copy=True).reshape(
        sdfg.arrays[infos[n].sdfg_name].shape) for n in inits if n in infos}
    weights.update(lifted)
    return sdfg, [infos[n] for n in graph_in], [infos[n] for n in graph_out], weights
