"""Mutations of the graph: shapes and structure."""
from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz.mutant import _ancestors, _graph_inputs, _node_label, _one, _save


# -- shapes -------------------------------------------------------------------

def wrong_dims(model, rng):
    g = model.graph
    variant = rng.randrange(6)
    inputs = _graph_inputs(model)
    if variant == 0 and inputs:
        inp = _one(rng, inputs)
        dims = inp.type.tensor_type.shape.dim
        k = rng.randrange(len(dims))
        dims[k].dim_value = max(1, dims[k].dim_value + _one(rng, [-1, 1, 3, 7]))
        return _save("wrong_dims", f"input {inp.name} dim {k} -> {dims[k].dim_value}", model)
    if variant == 1 and inputs:
        inp = _one(rng, inputs)
        dims = inp.type.tensor_type.shape.dim
        if rng.random() < 0.5 and len(dims) > 1:
            del dims[rng.randrange(len(dims))]
            what = "one dim dropped"
        else:
            dims.add().dim_value = rng.randint(1, 4)
            what = "one dim added"
        return _save("wrong_dims", f"input {inp.name}: {what}", model)
    if variant == 2 and g.initializer:
        t = _one(rng, list(g.initializer))
        if t.dims:
            k = rng.randrange(len(t.dims))
            t.dims[k] += _one(rng, [-1, 1, 2])
        else:
            t.dims.append(2)
        return _save("wrong_dims", f"initializer {t.name} dims -> {list(t.dims)} (data unchanged)",
                     model)
    if variant == 3 and g.initializer:
        t = max(g.initializer, key=lambda t: len(t.dims))
        dims = list(t.dims)
        if len(dims) < 2 or dims == dims[::-1]:
            dims = [int(np.prod(dims))] if dims else [1]
        else:
            dims = dims[::-1]
        del t.dims[:]
        t.dims.extend(dims)
        return _save("wrong_dims", f"initializer {t.name} dims -> {dims} (same size)", model)
    if variant == 4 and g.output:
        out = _one(rng, list(g.output))
        dims = out.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_value = dims[0].dim_value + 5 if dims[0].HasField("dim_value") else 5
        return _save("wrong_dims", f"output {out.name} declares a wrong shape", model)
    # A value_info that contradicts what the graph computes.
    node = _one(rng, [n for n in g.node if n.output])
    name = node.output[0]
    shape = [rng.randint(1, 9) for _ in range(rng.randint(0, 5))]
    g.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    return _save("wrong_dims", f"value_info {name} claims {shape}", model)


def negative_shape(model, rng):
    g = model.graph
    value = _one(rng, [-1, -3, -(2 ** 31), -(2 ** 63), 0])
    variant = rng.randrange(3)
    inputs = _graph_inputs(model)
    if variant == 0 and inputs:
        inp = _one(rng, inputs)
        dims = inp.type.tensor_type.shape.dim
        k = rng.randrange(len(dims))
        dims[k].dim_value = value
        return _save("negative_shape", f"input {inp.name} dim {k} = {value}", model)
    if variant == 1 and g.initializer:
        t = _one(rng, list(g.initializer))
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = value
        else:
            t.dims.append(value)
        return _save("negative_shape", f"initializer {t.name} dims {list(t.dims)}", model)
    # A shape-like int64 constant (Reshape target, Unsqueeze axes, ...) goes negative.
    if _mutate_int_constant(model, rng, lambda v: np.full_like(v, value if value else -5)):
        return _save("negative_shape", f"an int64 constant filled with {value or -5}", model)
    out = _one(rng, list(g.output))
    out.type.tensor_type.shape.dim.add().dim_value = value
    return _save("negative_shape", f"output {out.name} gets a dim {value}", model)


def huge_shape(model, rng):
    g = model.graph
    variant = rng.randrange(6)
    inputs = _graph_inputs(model)
    if variant == 0 and inputs:
        inp = _one(rng, inputs)
        dims = inp.type.tensor_type.shape.dim
        rest = int(np.prod([d.dim_value for d in dims[1:]])) or 1
        dims[0].dim_value = max(1, 10 ** 12 // rest)
        return _save("huge_shape", f"input {inp.name} batch {dims[0].dim_value} (~1e12 elements)",
                     model)
    if variant == 1 and inputs:
        inp = _one(rng, inputs)
        dims = inp.type.tensor_type.shape.dim
        dims[rng.randrange(len(dims))].dim_value = _one(rng, [2 ** 62, 2 ** 63 - 1, 2 ** 40])
        return _save("huge_shape", f"input {inp.name} has a dim near int64 max", model)
    if variant == 2 and g.initializer:
        t = _one(rng, list(g.initializer))
        del t.dims[:]
        t.dims.extend([10 ** 6, 10 ** 6])
        return _save("huge_shape", f"initializer {t.name} claims 1e12 elements", model)
    if variant == 3:
        # ConstantOfShape with a constant 1e12-element shape, as an extra output.
        shape = _one(rng, [[10 ** 6, 10 ** 6], [10 ** 4] * 3, [2 ** 31, 2 ** 31]])
        g.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), "fuzz_shape"))
        # An int64 fill makes onnxruntime's symbolic inference materialize the value.
        dtype = _one(rng, [np.float32, np.int64])
        g.node.append(helper.make_node(
            "ConstantOfShape", ["fuzz_shape"], ["fuzz_big"], name="fuzz_constant_of_shape",
            value=numpy_helper.from_array(np.ones(1, dtype))))
        g.output.append(helper.make_tensor_value_info(
            "fuzz_big", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [None] * len(shape)))
        return _save("huge_shape", f"ConstantOfShape {shape} of {np.dtype(dtype)} as an output",
                     model)
    if variant == 4:
        # Expand an intermediate tensor to a huge shape and add it to an output.
        out = g.output[0]
        g.initializer.append(numpy_helper.from_array(
            np.array([10 ** 4, 10 ** 4, 10 ** 4], np.int64), "fuzz_expand_shape"))
        g.node.append(helper.make_node("ReduceSum", [out.name], ["fuzz_scalar"], keepdims=0,
                                       name="fuzz_reduce"))
        g.node.append(helper.make_node("Expand", ["fuzz_scalar", "fuzz_expand_shape"],
                                       ["fuzz_expanded"], name="fuzz_expand"))
        g.output.append(helper.make_tensor_value_info("fuzz_expanded", TensorProto.FLOAT,
                                                      [None] * 3))
        return _save("huge_shape", f"Expand of {out.name}'s sum to 1e12 elements", model)
    if _mutate_int_constant(model, rng, lambda v: np.full_like(v, 10 ** 6)):
        return _save("huge_shape", "an int64 constant filled with 1e6", model)
    return huge_shape(model, random.Random(rng.random()))


def _mutate_int_constant(model, rng, fn) -> bool:
    """Apply ``fn`` to one int64 initializer or Constant value; False if there is none."""
    g = model.graph
    slots = [("init", t) for t in g.initializer if t.data_type == TensorProto.INT64]
    slots += [("const", a) for n in g.node if n.op_type == "Constant" for a in n.attribute
              if a.name == "value" and a.t.data_type == TensorProto.INT64]
    if not slots:
        return False
    where, item = _one(rng, slots)
    tensor = item if where == "init" else item.t
    value = numpy_helper.to_array(tensor)
    new = numpy_helper.from_array(np.asarray(fn(value), np.int64), tensor.name)
    tensor.CopyFrom(new)
    return True


# -- graph structure ----------------------------------------------------------

def cycle(model, rng):
    g = model.graph
    nodes = list(g.node)
    with_inputs = [j for j, n in enumerate(nodes) if n.input]
    j = _one(rng, with_inputs)
    ancestors = sorted(_ancestors(model, j))
    if ancestors and rng.random() < 0.7:
        i = _one(rng, ancestors)
        k = rng.randrange(len(nodes[i].input)) if nodes[i].input else None
        if k is None:
            nodes[i].input.append(nodes[j].output[0])
        else:
            nodes[i].input[k] = nodes[j].output[0]
        return _save("cycle", f"node {_node_label(nodes[i], i)} reads {nodes[j].output[0]} "
                              f"of its descendant {_node_label(nodes[j], j)}", model)
    k = rng.randrange(len(nodes[j].input))
    nodes[j].input[k] = nodes[j].output[0]
    return _save("cycle", f"node {_node_label(nodes[j], j)} reads its own output", model)


def dangling_input(model, rng):
    g = model.graph
    variant = rng.randrange(4)
    if variant == 0:
        j, node = _one(rng, [(j, n) for j, n in enumerate(g.node) if n.input])
        k = rng.randrange(len(node.input))
        node.input[k] = f"ghost_{rng.randrange(1000)}"
        return _save("dangling_input", f"node {_node_label(node, j)} input {k} -> {node.input[k]}",
                     model)
    if variant == 1:
        out = _one(rng, list(g.output))
        old, out.name = out.name, "ghost_output"
        return _save("dangling_input", f"graph output {old} renamed to ghost_output", model)
    if variant == 2:
        j = rng.randrange(len(g.node))
        label = _node_label(g.node[j], j)
        del g.node[j]
        return _save("dangling_input", f"node {label} removed", model)
    if g.initializer:
        k = rng.randrange(len(g.initializer))
        name = g.initializer[k].name
        del g.initializer[k]
        return _save("dangling_input", f"initializer {name} removed", model)
    return dangling_input(model, random.Random(rng.random()))


def duplicate_names(model, rng):
    g = model.graph
    variant = rng.randrange(6)
    if variant == 0 and len(g.node) > 1:
        i, j = rng.sample(range(len(g.node)), 2)
        g.node[j].output[0] = g.node[i].output[0]
        return _save("duplicate_names", f"nodes #{i} and #{j} both write {g.node[i].output[0]}",
                     model)
    if variant == 1 and len(g.initializer) > 1:
        a, b = rng.sample(list(g.initializer), 2)
        copy = TensorProto()
        copy.CopyFrom(b)
        copy.name = a.name
        g.initializer.append(copy)
        return _save("duplicate_names", f"two initializers named {a.name}", model)
    if variant == 2:
        inp = _graph_inputs(model)[0]
        dup = onnx.ValueInfoProto()
        dup.CopyFrom(inp)
        if rng.random() < 0.5:
            dup.type.tensor_type.elem_type = TensorProto.INT64
        g.input.append(dup)
        return _save("duplicate_names", f"graph input {inp.name} listed twice", model)
    if variant == 3:
        for n in g.node:
            n.name = "same"
        return _save("duplicate_names", "every node named 'same'", model)
    if variant == 4:
        g.output.append(g.output[0])
        return _save("duplicate_names", f"graph output {g.output[0].name} listed twice", model)
    # An initializer that shadows a node's output.
    node = _one(rng, [n for n in g.node if n.output])
    g.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), node.output[0]))
    return _save("duplicate_names", f"an initializer shadows node output {node.output[0]}", model)


def unknown_domain(model, rng):
    g = model.graph
    j = rng.randrange(len(g.node))
    node = g.node[j]
    variant = rng.randrange(5)
    if variant == 0:
        node.domain = "com.example.evil"
        model.opset_import.append(helper.make_opsetid("com.example.evil", 1))
        return _save("unknown_domain", f"node {_node_label(node, j)} in domain com.example.evil "
                                       f"(imported)", model)
    if variant == 1:
        node.domain = _one(rng, ["com.example.evil", "ai.onnx.ml", "com.microsoft", "../../x"])
        return _save("unknown_domain", f"node {_node_label(node, j)} in domain {node.domain} "
                                       f"(not imported)", model)
    if variant == 2:
        node.op_type = _one(rng, ["NoSuchOp", "", "Gemm ", "gemm", "__import__('os')"])
        return _save("unknown_domain", f"node {_node_label(node, j)} op_type {node.op_type!r}",
                     model)
    if variant == 3:
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = _one(rng, [999, 0, -5, 1])
        return _save("unknown_domain", f"default opset version {model.opset_import[0].version}",
                     model)
    del model.opset_import[:]
    return _save("unknown_domain", "no opset_import at all", model)


def structure(model, rng):
    """Arity and emptiness: too few/many inputs, no outputs, no nodes, unsorted nodes."""
    g = model.graph
    variant = rng.randrange(6)
    if variant == 0:
        j, node = _one(rng, [(j, n) for j, n in enumerate(g.node) if n.input])
        del node.input[-1]
        return _save("structure", f"node {_node_label(node, j)} lost its last input", model)
    if variant == 1:
        j, node = _one(rng, list(enumerate(g.node)))
        node.input.extend(list(node.input[:1]) * rng.randint(1, 4) or [g.input[0].name])
        return _save("structure", f"node {_node_label(node, j)} gets extra inputs", model)
    if variant == 2:
        del g.output[:]
        return _save("structure", "the graph has no outputs", model)
    if variant == 3:
        del g.node[:]
        return _save("structure", "the graph has no nodes", model)
    if variant == 4:
        j, node = _one(rng, list(enumerate(g.node)))
        node.output[0] = ""
        return _save("structure", f"node {_node_label(node, j)} output 0 is unnamed", model)
    nodes = list(g.node)
    rng.shuffle(nodes)
    del g.node[:]
    g.node.extend(nodes)
    return _save("structure", "nodes in shuffled (not topological) order", model)
