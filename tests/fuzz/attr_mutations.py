"""Mutations of element types and attributes."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from tests.fuzz.mutant import _graph_inputs, _node_label, _one, _save


# -- types and attributes -----------------------------------------------------

_ELEM_TYPES = [0, TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.BFLOAT16,
               TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE, 999]


def wrong_dtype(model, rng):
    g = model.graph
    elem = _one(rng, _ELEM_TYPES)
    variant = rng.randrange(3)
    if variant == 0:
        inp = _one(rng, _graph_inputs(model))
        inp.type.tensor_type.elem_type = elem
        return _save("wrong_dtype", f"input {inp.name} elem_type {elem}", model)
    if variant == 1 and g.initializer:
        t = _one(rng, list(g.initializer))
        t.data_type = _one(rng, [e for e in _ELEM_TYPES if e != 999] + [TensorProto.INT32])
        return _save("wrong_dtype", f"initializer {t.name} data_type {t.data_type} (same bytes)",
                     model)
    out = _one(rng, list(g.output))
    out.type.tensor_type.elem_type = elem
    return _save("wrong_dtype", f"output {out.name} elem_type {elem}", model)


def wrong_attr_type(model, rng):
    g = model.graph
    j, node = _one(rng, list(enumerate(g.node)))
    label = _node_label(node, j)
    variant = rng.randrange(5)
    if variant == 0 and node.attribute:
        a = _one(rng, list(node.attribute))
        old = a.type
        a.type = _one(rng, [t for t in (AttributeProto.INT, AttributeProto.FLOAT,
                                        AttributeProto.STRING, AttributeProto.INTS,
                                        AttributeProto.TENSOR, AttributeProto.GRAPH) if t != old])
        return _save("wrong_attr_type", f"{label}.{a.name} type {old} -> {a.type}, value kept",
                     model)
    if variant == 1 and node.attribute:
        a = _one(rng, list(node.attribute))
        name = a.name
        new = _one(rng, [helper.make_attribute(name, "text"), helper.make_attribute(name, 2.5),
                         helper.make_attribute(name, [1, 2, 3]),
                         helper.make_attribute(name, numpy_helper.from_array(np.ones(2))),
                         helper.make_attribute(name, 7)])
        a.CopyFrom(new)
        return _save("wrong_attr_type", f"{label}.{name} replaced by a {new.type} value", model)
    if variant == 2:
        node.attribute.append(helper.make_attribute(_one(rng, ["bogus", "", "axis"]), 1))
        if node.attribute[-1].name == "axis" and sum(a.name == "axis" for a in node.attribute) > 1:
            return _save("wrong_attr_type", f"{label} has attribute 'axis' twice", model)
        return _save("wrong_attr_type", f"{label} gets attribute {node.attribute[-1].name!r}",
                     model)
    if variant == 3 and node.attribute:
        a = _one(rng, list(node.attribute))
        a.ClearField("type")
        return _save("wrong_attr_type", f"{label}.{a.name} has no type", model)
    # A subgraph attribute: a graph where an int is expected.
    sub = helper.make_graph([], "sub", [], [])
    node.attribute.append(helper.make_attribute("then_branch", sub))
    return _save("wrong_attr_type", f"{label} gets a graph attribute", model)


def attr_values(model, rng):
    """Attributes of the right type with values the op cannot accept."""
    g = model.graph
    with_attrs = [(j, n) for j, n in enumerate(g.node) if n.attribute]
    if not with_attrs or rng.random() < 0.2:
        j, node = _one(rng, list(enumerate(g.node)))
        node.attribute.append(helper.make_attribute(
            _one(rng, ["axis", "perm", "kernel_shape", "pads"]),
            _one(rng, [10 ** 9, -7, [0, 0], [-1, 2 ** 40]])))
        return _save("attr_values", f"{_node_label(node, j)} gets {node.attribute[-1].name}",
                     model)
    j, node = _one(rng, with_attrs)
    a = _one(rng, list(node.attribute))
    if a.type == AttributeProto.INT:
        a.i = _one(rng, [0, -1, 7, 10 ** 9, -(2 ** 63), 2 ** 63 - 1])
        value = a.i
    elif a.type == AttributeProto.INTS:
        choice = rng.randrange(4)
        vals = list(a.ints)
        if choice == 0:
            vals = vals + [1]
        elif choice == 1:
            vals = vals[:-1]
        elif choice == 2:
            vals = [_one(rng, [0, -1, -(2 ** 31), 10 ** 6]) for _ in vals]
        else:
            vals = [vals[0]] * len(vals) if vals else [0]
        del a.ints[:]
        a.ints.extend(vals)
        value = vals
    elif a.type == AttributeProto.FLOAT:
        a.f = _one(rng, [float("nan"), float("inf"), -1e38, 0.0])
        value = a.f
    elif a.type == AttributeProto.STRING:
        a.s = _one(rng, [b"", b"NOPE", b"\xff\xfe", b"x" * 10000])
        value = a.s[:10]
    elif a.type == AttributeProto.TENSOR:
        a.t.CopyFrom(numpy_helper.from_array(np.zeros((0,), np.float32), a.t.name))
        value = "an empty tensor"
    else:
        value = "unchanged"
    return _save("attr_values", f"{_node_label(node, j)}.{a.name} = {value}", model)
