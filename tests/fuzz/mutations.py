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

import gzip
import io
import random
import zipfile
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

MODEL_FILE = "model.onnx"
OUTSIDE_FILE = "secret.bin"   # written by the runner one level above each mutant


@dataclass
class Mutant:
    kind: str
    note: str
    files: dict                                  # relative path -> bytes
    links: dict = field(default_factory=dict)    # relative path -> symlink target


def _one(rng: random.Random, options):
    return options[rng.randrange(len(options))]


def _save(kind, note, model: onnx.ModelProto, **extra) -> Mutant:
    return Mutant(kind, note, {MODEL_FILE: model.SerializeToString(), **extra.pop("files", {})},
                  **extra)


def _graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _node_label(node, i):
    return node.name or f"#{i} {node.op_type}"


def _producers(model):
    return {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}


def _ancestors(model, j):
    """Indices of the nodes node ``j`` depends on (transitively)."""
    producers, seen, stack = _producers(model), set(), [j]
    while stack:
        for t in model.graph.node[stack.pop()].input:
            k = producers.get(t)
            if k is not None and k not in seen:
                seen.add(k)
                stack.append(k)
    return seen


# -- byte-level ---------------------------------------------------------------

def truncate(model, rng):
    data = model.SerializeToString()
    cut = _one(rng, [rng.randrange(0, 64), rng.randrange(len(data)),
                     len(data) - rng.randrange(1, 256)])
    return Mutant("truncate", f"first {cut} of {len(data)} bytes", {MODEL_FILE: data[:cut]})


def flip_bytes(model, rng):
    """Flip bytes, mostly in the protobuf structure rather than in weight payloads."""
    data = bytearray(model.SerializeToString())
    payload = []
    for t in model.graph.initializer:
        if len(t.raw_data) > 64:
            at = bytes(data).find(t.raw_data)
            if at >= 0:
                payload.append((at, at + len(t.raw_data)))
    payload.sort()
    structure, pos = [], 0
    for a, b in payload:
        if a > pos:
            structure.append((pos, a))
        pos = max(pos, b)
    structure.append((pos, len(data)))
    flips = []
    for _ in range(rng.randint(1, 8)):
        if payload and rng.random() < 0.1:
            a, b = _one(rng, payload)
        else:
            weights = [b - a for a, b in structure]
            a, b = rng.choices(structure, weights=weights)[0]
        at = rng.randrange(a, b)
        data[at] = data[at] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
        flips.append(at)
    return Mutant("flip_bytes", f"bytes at {sorted(flips)} of {len(data)}", {MODEL_FILE: bytes(data)})


def not_onnx(model, rng):
    data = model.SerializeToString()
    variant = rng.randrange(8)
    if variant == 0:
        body, note = b"", "empty file"
    elif variant == 1:
        body, note = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))), "random bytes"
    elif variant == 2:
        body, note = b"ir_version: 8\ngraph { name: 'x' }\n", "protobuf text format"
    elif variant == 3:
        body, note = b"\x89PNG\r\n\x1a\n" + bytes(64), "a PNG header"
    elif variant == 4:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("model.onnx", data[:4096])
        body, note = buf.getvalue(), "a zip archive"
    elif variant == 5:
        body, note = gzip.compress(data[:65536]), "gzip of the model's start"
    elif variant == 6:
        # Field 7 (graph), length-delimited, claiming ~2 GiB that are not there.
        body, note = bytes([0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0x07]) + data[:128], "graph length 2 GiB"
    else:
        # Protobuf merges a repeated message: every node and initializer twice.
        body, note = data + data, "the model serialized twice, concatenated"
    return Mutant("not_onnx", note, {MODEL_FILE: body})


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


# -- external data ------------------------------------------------------------

_ESCAPES = ["../../etc/passwd", "/etc/passwd", f"../{OUTSIDE_FILE}",
            f"sub/../../{OUTSIDE_FILE}", "/proc/self/mem", "./../" + OUTSIDE_FILE]


def external_data(model, rng):
    """One initializer moved to external data, with a path that escapes or lies."""
    g = model.graph
    t = _one(rng, [t for t in g.initializer if t.raw_data] or list(g.initializer))
    raw = numpy_helper.to_array(t).tobytes()
    t.ClearField("raw_data")
    for f in ("float_data", "int32_data", "int64_data", "double_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    files, links = {}, {}
    variant = rng.randrange(6)
    location, extra = "weights.bin", {}
    if variant == 0:
        location = _one(rng, _ESCAPES)
        note = f"{t.name} at {location}"
    elif variant == 1:
        location = "link.bin"
        links["link.bin"] = _one(rng, ["/etc/passwd", f"../{OUTSIDE_FILE}"])
        note = f"{t.name} at a symlink to {links['link.bin']}"
    elif variant == 2:
        location = _one(rng, ["missing.bin", "", ".", "sub/"])
        note = f"{t.name} at {location!r}, which is no file"
    elif variant == 3:
        files["weights.bin"] = raw
        extra = _one(rng, [{"offset": str(len(raw) + 10)}, {"length": str(10 ** 12)},
                           {"offset": "-8"}, {"length": "abc"}, {"length": str(len(raw) // 2)}])
        note = f"{t.name} in weights.bin with {extra}"
    elif variant == 4:
        files["weights.bin"] = raw
        del t.dims[:]
        t.dims.extend([10 ** 6, 10 ** 6])
        note = f"{t.name} in weights.bin, dims claim 1e12 elements"
    else:
        files["weights.bin"] = raw
        note = f"{t.name} in weights.bin, correct (harmless)"
    del t.external_data[:]
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return _save("external_data", note, model, files=files, links=links)


MUTATIONS = {f.__name__: f for f in (
    truncate, flip_bytes, not_onnx, wrong_dims, negative_shape, huge_shape, cycle,
    dangling_input, duplicate_names, unknown_domain, structure, wrong_dtype, wrong_attr_type,
    attr_values, external_data)}


def mutate(kind: str, model: onnx.ModelProto, rng: random.Random) -> Mutant:
    """Mutant of a private copy of ``model``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return MUTATIONS[kind](copy, rng)
