"""Constant and shape folding at import.

Rules:
1. A ``Constant`` node becomes an initializer.
2. ``Shape`` and ``Size`` of a tensor whose shape is static become initializers.
3. With ``evaluate`` on, a node all of whose inputs are constants is
   evaluated (with ``onnx.reference``) and its outputs become initializers,
   unless it is non-deterministic, produces a graph output, or its result
   exceeds ``max_elements``, or it only broadcasts a few values into many
   (Expand, Tile or ConstantOfShape making at least ``SPREAD`` times the
   elements it reads, and more than ``SPREAD_MIN`` of them: the constant
   would be read in full where the node writes it from a few values, as a
   training program's zeros and loss seeds are). The ONNX backend turns this off so that every
   operator under test runs as compiled code. A ``DequantizeLinear`` is never
   folded here: a quantized model's weights stay the integers it stores (a
   quarter of float32's bytes), so that QLinearFusion can hand them to integer
   kernels; ConstantFolding dequantizes what it leaves.
4. Initializers no remaining node or output uses are dropped.
5. A kept node that reads a known value (the output of a node all of whose
   inputs are known, kept because ``evaluate`` is off) and also a value
   computed at run time reads the known one as an initializer: shape
   inference sees it (ReduceMean's axes from Range(Size(Shape(x))), Split's
   sizes), the producing node still runs.
Afterwards the SDFG sees static shapes and no shape plumbing.
"""
from collections import ChainMap
from collections.abc import MutableMapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.importer.weightless import copy_fields
from workbench.ops.data_dependent import unique_numpy
from workbench.ops.quantize_linear import dequantize_numpy

NON_DETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli"}


def fold_constants(model: onnx.ModelProto, static_shapes: dict, max_elements: int = 1 << 26,
                   evaluate: bool = True, keep=frozenset()):
    """Return (folded model, number of nodes folded, known values).

    Known values are the outputs of kept nodes whose inputs are all known
    (with ``evaluate`` off, or for graph outputs): the node still runs as
    compiled code, but its output's shape and (small) value are known at
    import, e.g. axes computed by Range(Size(Shape(x))). A node writing a tensor named
    in ``keep`` is never folded (a symbolic program's tensors whose size is symbolic).
    """
    graph = model.graph
    consts = _Constants(graph.initializer)
    known = {}
    outputs = {o.name for o in graph.output}
    opset = {o.domain: o.version for o in model.opset_import}
    kept, folded = [], 0
    for node in graph.node:
        values = None
        # rule 3: quantized weights stay quantized (their values are still known)
        if not any(o in outputs or o in keep for o in node.output) \
                and node.op_type != "DequantizeLinear":
            values = _try_fold(node, consts, static_shapes, opset, max_elements, evaluate)
        if values is None:
            kept.append(node)
            values = _try_fold(node, ChainMap(known, consts), static_shapes, opset,
                               KNOWN_MAX_ELEMENTS, True)
            for name, value in zip(node.output, values or ()):
                if name and value is not None:
                    known[name] = np.asarray(value)
            continue
        folded += 1
        for name, value in zip(node.output, values):
            if name:
                consts[name] = np.asarray(value)
    used = {i for n in kept for i in n.input} | outputs | _subgraph_inputs(kept)
    new = onnx.ModelProto()
    copy_fields(model, new, skip=("graph",))
    copy_fields(graph, new.graph, skip=("node", "initializer"))
    new.graph.node.extend(kept)
    new.graph.initializer.extend(consts.tensors(used))
    inits = {t.name for t in new.graph.initializer}
    keep_inputs = [i for i in new.graph.input if i.name not in consts or i.name in inits]
    del new.graph.input[:]
    new.graph.input.extend(keep_inputs)
    _read_known_values_as_constants(new, known)
    return new, folded, known


class _Constants(MutableMapping):
    """name -> value of the initializers and the values folded so far. An initializer
    becomes an array only when a node being folded reads it, and one never replaced goes
    back into the model as the same tensor: converting GPT-2 small's 653 MB of weights
    to arrays and back on every pass held the GIL for seconds and folded nothing."""

    def __init__(self, initializers):
        self._tensors = {t.name: t for t in initializers}
        self._arrays = {}

    def __getitem__(self, name):
        if name not in self._arrays:
            self._arrays[name] = numpy_helper.to_array(self._tensors[name])
        return self._arrays[name]

    def __setitem__(self, name, value):
        self._arrays[name] = value
        self._tensors.pop(name, None)

    def __delitem__(self, name):
        self._arrays.pop(name, None)
        self._tensors.pop(name, None)

    def __contains__(self, name):
        return name in self._arrays or name in self._tensors

    def __iter__(self):
        return iter({**self._tensors, **self._arrays})

    def __len__(self):
        return len(set(self._tensors) | set(self._arrays))

    def tensors(self, names) -> list:
        """The initializers of ``names`` in first-seen order: the originals untouched."""
        out = []
        for name in self:
            if name not in names:
                continue
            tensor = self._tensors.get(name)
            out.append(tensor if tensor is not None
                       else numpy_helper.from_array(self._arrays[name], name))
        return out


# Values of kept nodes are evaluated (for shapes and small constants) up to this size.
KNOWN_MAX_ELEMENTS = 1 << 16


def _try_fold(node, consts, static_shapes, opset, max_elements, evaluate):
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or op in NON_DETERMINISTIC:
        return None
    if op == "Constant":
        return [_constant_value(node)]
    if op in ("Shape", "Size"):
        shape = static_shapes.get(node.input[0])
        if shape is None:
            return None
        if op == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    if not evaluate or not node.input or any(i and i not in consts for i in node.input):
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    for out in node.output:
        shape = static_shapes.get(out)
        if shape is not None and int(np.prod(shape)) > max_elements:
            return None
    if op in SPREADING and _spreads_here(node, consts, static_shapes):
        return None
    return _evaluate(node, consts, opset)


SPREADING = {"Expand", "Tile", "ConstantOfShape"}
SPREAD, SPREAD_MIN = 16, 4096


def spreads(op_type: str, made: int, read: int) -> bool:
    """Whether a node making ``made`` elements from ``read`` only broadcasts them (rule
    3): folding it would store, and read in full, what it writes from a few values.
    ConstantFolding keeps the same rule on the SDFG."""
    return op_type in SPREADING and made > SPREAD_MIN and made >= SPREAD * max(read, 1)


def _spreads_here(node, consts, static_shapes) -> bool:
    shape = static_shapes.get(node.output[0])
    if shape is None:
        return False
    read = 1 if node.op_type == "ConstantOfShape" else int(np.size(consts[node.input[0]]))
    return spreads(node.op_type, int(np.prod(shape)), read)


def _constant_value(node):
    attr = node.attribute[0]
    value = helper.get_attribute_value(attr)
    if attr.name == "value":
        return numpy_helper.to_array(value)
    if attr.name in ("value_float", "value_int"):
        return np.array(value, dtype=np.float32 if attr.name == "value_float" else np.int64)
    if attr.name in ("value_floats", "value_ints"):
        return np.array(value, dtype=np.float32 if attr.name == "value_floats" else np.int64)
    if attr.name == "value_string":
        return np.array(value)
    if attr.name == "value_strings":
        return np.array(value)
    raise ValueError(f"Constant with unsupported attribute {attr.name}")


def _gather_elements(attrs, data, indices):
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along ``axis``; the output
    has the indices' shape, which may be smaller than the data's off the axis."""
    axis = int(attrs.get("axis", 0)) % data.ndim
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise ValueError(f"an index is outside [-{n}, {n - 1}]")
    index = np.where(indices < 0, indices + n, indices).astype(np.int64)
    window = tuple(slice(None) if d == axis else slice(0, k) for d, k in enumerate(index.shape))
    return [np.take_along_axis(data[window], index, axis)]


# Ops that onnx.reference evaluates wrongly or not at all, computed with numpy instead:
# its GatherElements uses np.choose, which takes at most 32 choices under numpy 1.x, and
# its fallback handles one index per row only ("cannot reshape array of size 1 into
# shape (1,16)" on BERT's token_type_ids buffer gathered along 512 positions).
# DequantizeLinear: onnx.reference (1.23) has none before opset 19, where quantization
# tools leave their weights (ConstantFolding folds them).
NUMPY_KERNELS = {"GatherElements": _gather_elements, "DequantizeLinear": dequantize_numpy,
                 "Unique": unique_numpy}


def _mean_of_nothing(node, feeds, opsets):
    """ReduceMean over no elements: 0, as onnxruntime and PyTorch have it (the spec leaves
    it undefined; onnx.reference gives NaN). An empty EmbeddingBag of mode mean folds so
    (importer/counted_body.py). None where some element is reduced."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = feeds.get(node.input[0])
    axes = feeds.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    axes = attrs.get("axes") if axes is None else axes
    if x is None or (axes is not None and len(np.ravel(axes)) == 0
                     and attrs.get("noop_with_empty_axes", 0)):
        return None
    axes = range(x.ndim) if axes is None or not len(np.ravel(axes)) else np.ravel(axes)
    axes = tuple(int(a) % x.ndim for a in axes)
    if any(x.shape[a] for a in axes) and x.size:
        return None
    keep = bool(attrs.get("keepdims", 1))
    return lambda _a, *_: [np.zeros_like(np.sum(x, axis=axes, keepdims=keep))]


def evaluate_node(node: onnx.NodeProto, feeds: dict, opsets: dict) -> list:
    """The one single-node evaluator: outputs (its named ones, in order) of ``node`` on
    ``feeds`` (input name -> array) at ``opsets`` (domain -> version), with a numpy kernel
    where onnx.reference is wrong, else onnx.reference. Raises what they raise."""
    kernel = NUMPY_KERNELS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if node.op_type == "ReduceMean" and kernel is None:
        kernel = _mean_of_nothing(node, feeds, opsets)
    if kernel is not None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return kernel(attrs, *(feeds[n] if n else None for n in node.input))
    from onnx.reference import ReferenceEvaluator
    # a model, not the bare node: onnx.reference ignores ``opsets`` for a NodeProto (it
    # runs the newest opset), and the typed inputs pick context-dependent implementations
    return ReferenceEvaluator(_single_node_model(node, feeds, opsets)).run(None, feeds)


def _evaluate(node, consts, opset):
    feeds = {n: consts[n] for n in node.input if n}
    try:
        values = evaluate_node(node, feeds, opset)
    except Exception:
        return None  # leave it to the compiled program
    if any(v is None or (hasattr(v, "size") and v.size > (1 << 26)) for v in values):
        return None
    return values


def _single_node_model(node, feeds, opset):
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "fold", ins, outs)
    imports = [helper.make_opsetid(d, v) for d, v in opset.items()]
    return helper.make_model(graph, opset_imports=imports)


# Known values read by a kept node are given to it as constants up to this size (rule 5).
SHAPE_VALUE_MAX_ELEMENTS = 4096


def _read_known_values_as_constants(model: onnx.ModelProto, known: dict):
    """Rule 5: a kept node with an input of its own still computed at run time
    reads the known (small) values among its inputs from initializers instead
    (copies under new names); their producers still run. Shape inference then
    sees the values (Reshape's shape, ReduceMean's axes, Split's sizes) where
    it would otherwise leave the outputs open or guess them (an even Split)."""
    graph = model.graph
    taken = {n for node in graph.node for n in list(node.input) + list(node.output)}
    taken |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
    constant = set(known) | {t.name for t in graph.initializer}
    copies, rewired = {}, []
    for node in graph.node:
        if all(not i or i in constant for i in node.input):
            continue  # computed at import itself: its output is known already
        for pos, name in enumerate(node.input):
            value = known.get(name)
            # integers only: shapes, axes, sizes, counts. A float value is data, and the
            # node that computes it runs as compiled code (fold=False, the ONNX backend)
            # with its reader reading its result, for the transformations to fold.
            if value is None or value.size > SHAPE_VALUE_MAX_ELEMENTS \
                    or value.dtype.kind not in "iu":
                continue
            if name not in copies:
                copy, k = f"{name}__known", 1
                while copy in taken:
                    copy, k = f"{name}__known{k}", k + 1
                taken.add(copy)
                copies[name] = copy
                graph.initializer.append(numpy_helper.from_array(value, copy))
            node.input[pos] = copies[name]
            rewired.append(node)
    # Shapes inferred before without the values are stale downstream (a guessed even
    # Split); onnx's inference keeps a declared shape over its own when they differ.
    stale = _downstream({o for n in rewired for o in n.output if o}, graph.node)
    kept = [vi for vi in graph.value_info if vi.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def _downstream(names: set, nodes) -> set:
    """``names`` and every tensor computed from them."""
    out = set(names)
    for node in nodes:  # a graph's nodes are in topological order
        if any(i in out for i in node.input):
            out.update(o for o in node.output if o)
    return out


def _subgraph_inputs(nodes):
    """Names that subgraph attributes (If/Loop bodies, and the bodies in them) read or
    give as outputs, from outside."""
    names = set()
    for n in nodes:
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                names |= {i for sub in g.node for i in sub.input} | {o.name for o in g.output}
                names |= _subgraph_inputs(g.node)
    return names
