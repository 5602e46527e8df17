"""Structural checks of an ONNX graph, run before onnx's own checker.

onnx.checker finds most of these too, but names neither the node nor what
to do, and it does not compare a tensor's data with its dims. Rules, each
an ``InvalidGraphError`` naming the node or tensor:

1. Every tensor name is written once: by one graph input, one initializer
   or one node output; no two nodes share a name. The graph has at least
   one output.
2. Every node input and graph output names a tensor that exists.
3. No node depends on itself (a cycle); nodes are in topological order.
4. Every node's domain is imported by the model; the ONNX opset is one this
   onnx knows.
5. Every attribute has a name, a type and the value field its type says;
   no node has an attribute twice.
6. Declared element types are real types; declared dims are not negative;
   a value_info entry for a graph input or output agrees with its
   declaration (onnx's inference does not compare them).
7. A tensor's data (raw bytes or typed values) holds exactly the elements
   its dims declare, dims are not negative, and its type is a real type.
"""
import onnx
from onnx import AttributeProto, TensorProto, helper

from workbench.errors import InvalidGraphError

_DATA_TYPES = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
# Typed-field values per element (complex numbers are stored as pairs).
_VALUES_PER_ELEMENT = {TensorProto.COMPLEX64: 2, TensorProto.COMPLEX128: 2}
# Element types packed two or four to a byte: no simple length rule, left to onnx.
_PACKED = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
           if hasattr(TensorProto, n)}
_ATTRIBUTE_FIELDS = {
    AttributeProto.FLOAT: "f", AttributeProto.INT: "i", AttributeProto.STRING: "s",
    AttributeProto.TENSOR: "t", AttributeProto.GRAPH: "g",
    AttributeProto.SPARSE_TENSOR: "sparse_tensor", AttributeProto.TYPE_PROTO: "tp",
    AttributeProto.FLOATS: "floats", AttributeProto.INTS: "ints",
    AttributeProto.STRINGS: "strings", AttributeProto.TENSORS: "tensors",
    AttributeProto.GRAPHS: "graphs", AttributeProto.SPARSE_TENSORS: "sparse_tensors",
    AttributeProto.TYPE_PROTOS: "type_protos",
}
_SINGULAR = {"f", "i", "s", "t", "g", "sparse_tensor", "tp"}
_FIX = "Re-export the model or repair it with onnx tools."


def node_label(node: onnx.NodeProto, index: int) -> str:
    return f"'{node.name}' ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def validate_graph(model: onnx.ModelProto, where: str = "the model") -> None:
    """Raise ``InvalidGraphError`` on the first rule (see the module doc) the model breaks."""
    try:
        _validate(model)
    except InvalidGraphError as e:
        raise InvalidGraphError(f"{where} fails the model checker: {e}", e.node, e.tensor) \
            from None


def _validate(model):
    graph = model.graph
    _check_domains(model)
    writer = _check_names(graph)
    _check_references(graph, writer)
    _check_order(graph, writer)
    for i, node in enumerate(graph.node):
        _check_attributes(node, i)
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        _check_declared_type(vi)
    _check_value_info_agrees(graph)
    for tensor in _tensors(graph):
        check_tensor_data(tensor)


def _check_domains(model):
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and not 1 <= o.version <= newest:
            raise InvalidGraphError(f"the model imports ONNX opset {o.version}; this "
                                    f"installation knows opsets 1 to {newest}. Re-export the "
                                    f"model at an opset in that range.")
    imported = {o.domain for o in model.opset_import}
    if "" in imported or "ai.onnx" in imported:
        imported |= {"", "ai.onnx"}
    for i, node in enumerate(model.graph.node):
        if node.domain not in imported:
            raise InvalidGraphError(
                f"node {node_label(node, i)} is in domain '{node.domain}', which the model's "
                f"opset_import does not list (it lists "
                f"{', '.join(repr(d) for d in sorted(imported)) or 'nothing'}). {_FIX}",
                node=node.name)


def _check_names(graph) -> dict:
    """tensor name -> who writes it ('graph input', 'initializer' or a node index)."""
    writer = {}

    def claim(name, who, what):
        if not name:
            raise InvalidGraphError(f"{what} has an empty name. {_FIX}")
        if name in writer:
            raise InvalidGraphError(f"tensor '{name}' is written twice: by {_who(graph, writer[name])}"
                                    f" and by {_who(graph, who)}. Every tensor name must be "
                                    f"unique. {_FIX}", tensor=name)
        writer[name] = who

    inits = {t.name for t in graph.initializer}
    for t in graph.initializer:
        claim(t.name, "initializer", "an initializer")
    for inp in graph.input:
        if inp.name in inits and writer.get(inp.name) == "initializer":
            writer[inp.name] = "input+initializer"   # an input with a default value
            continue
        claim(inp.name, "graph input", "a graph input")
    named = {}
    for i, node in enumerate(graph.node):
        if node.name and named.setdefault(node.name, i) != i:
            raise InvalidGraphError(f"two nodes are named '{node.name}' (#{named[node.name]} "
                                    f"and #{i}); node names must be unique. {_FIX}",
                                    node=node.name)
        for name in node.output:
            if name:  # an empty name is an optional output left out
                claim(name, i, f"an output of node {node_label(node, i)}")
    names = [o.name for o in graph.output]
    if not names:
        raise InvalidGraphError(f"the graph has no outputs, so it computes nothing. {_FIX}")
    for name in names:
        if not name:
            raise InvalidGraphError(f"a graph output has an empty name. {_FIX}")
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise InvalidGraphError(f"graph output '{dup}' is listed twice. {_FIX}", tensor=dup)
    return writer


def _who(graph, who) -> str:
    if isinstance(who, int):
        return f"node {node_label(graph.node[who], who)}"
    return "a graph input" if who == "graph input" else "an initializer"


def _check_references(graph, writer):
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in writer:
                raise InvalidGraphError(
                    f"node {node_label(node, i)} reads '{name}', which no node, graph input or "
                    f"initializer writes (a dangling input). {_FIX}", node=node.name, tensor=name)
    for out in graph.output:
        if out.name not in writer:
            raise InvalidGraphError(f"graph output '{out.name}' is written by no node, graph "
                                    f"input or initializer. {_FIX}", tensor=out.name)


def _check_order(graph, writer):
    """A cycle names its nodes; an acyclic graph out of order names the first late edge."""
    deps = [sorted({writer[n] for n in node.input if n and isinstance(writer.get(n), int)})
            for node in graph.node]
    loop = _find_cycle(deps)
    if loop:
        path = " -> ".join(node_label(graph.node[j], j) for j in loop + loop[:1])
        raise InvalidGraphError(f"the graph has a cycle: {path}. ONNX graphs must be acyclic. "
                                f"{_FIX}", node=graph.node[loop[0]].name)
    for i, node in enumerate(graph.node):
        late = next((j for j in deps[i] if j >= i), None)
        if late is not None:
            raise InvalidGraphError(
                f"node {node_label(node, i)} reads the output of node "
                f"{node_label(graph.node[late], late)}, which comes after it: ONNX nodes must "
                f"be in topological order. Sort the nodes (e.g. re-save the model with onnx "
                f"tools) and try again.", node=node.name)


def _find_cycle(deps) -> list:
    """Node indices along one cycle of the dependency lists, or []."""
    state = [0] * len(deps)   # 0 new, 1 on the current path, 2 done
    for start in range(len(deps)):
        if state[start]:
            continue
        path, stack = [], [(start, iter(deps[start]))]
        state[start] = 1
        path.append(start)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:
                return path[path.index(nxt):][::-1]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(deps[nxt])))
    return []


def _check_attributes(node, i):
    seen = set()
    for a in node.attribute:
        where = f"node {node_label(node, i)} attribute '{a.name}'"
        if not a.name:
            raise InvalidGraphError(f"node {node_label(node, i)} has an attribute without a "
                                    f"name. {_FIX}", node=node.name)
        if a.name in seen:
            raise InvalidGraphError(f"{where} is given twice. {_FIX}", node=node.name)
        seen.add(a.name)
        if a.ref_attr_name:
            continue  # refers to a function's attribute; onnx's checker judges it
        field = _ATTRIBUTE_FIELDS.get(a.type)
        if field is None:
            raise InvalidGraphError(f"{where} has no valid type (type code {a.type}). {_FIX}",
                                    node=node.name)
        held = [f for f in _ATTRIBUTE_FIELDS.values()
                if (a.HasField(f) if f in _SINGULAR else len(getattr(a, f)))]
        wrong = [f for f in held if f != field]
        if wrong or (field in _SINGULAR and field not in held):
            kind = AttributeProto.AttributeType.Name(a.type)
            raise InvalidGraphError(f"{where} is declared {kind} but holds "
                                    f"{'a value in ' + ', '.join(wrong) if wrong else 'no value'}"
                                    f". {_FIX}", node=node.name)


def _check_declared_type(vi):
    if not vi.type.HasField("tensor_type"):
        return  # sequences, maps, optionals: the importer refuses them later
    tt = vi.type.tensor_type
    if tt.elem_type not in _DATA_TYPES:
        raise InvalidGraphError(f"tensor '{vi.name}' declares element type {tt.elem_type}, which "
                                f"is no ONNX type. {_FIX}", tensor=vi.name)
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            dims = [x.dim_value if x.HasField("dim_value") else (x.dim_param or "?")
                    for x in tt.shape.dim]
            raise InvalidGraphError(f"tensor '{vi.name}' declares shape {dims} with a negative "
                                    f"dim. {_FIX}", tensor=vi.name)


def _check_value_info_agrees(graph):
    declared = {vi.name: vi for vi in list(graph.input) + list(graph.output)}
    for vi in graph.value_info:
        other = declared.get(vi.name)
        if other is None or not (vi.type.HasField("tensor_type")
                                 and other.type.HasField("tensor_type")):
            continue
        if not _types_agree(vi.type.tensor_type, other.type.tensor_type):
            raise InvalidGraphError(f"tensor '{vi.name}' is declared {_type_text(other)} as a "
                                    f"graph input or output but {_type_text(vi)} in value_info. "
                                    f"{_FIX}", tensor=vi.name)


def _types_agree(a, b) -> bool:
    if a.elem_type != b.elem_type and a.elem_type and b.elem_type:
        return False
    if not (a.HasField("shape") and b.HasField("shape")):
        return True
    if len(a.shape.dim) != len(b.shape.dim):
        return False
    return all(not (x.HasField("dim_value") and y.HasField("dim_value"))
               or x.dim_value == y.dim_value for x, y in zip(a.shape.dim, b.shape.dim))


def _type_text(vi) -> str:
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tt.shape.dim] if tt.HasField("shape") else "of unknown shape"
    elem = TensorProto.DataType.Name(tt.elem_type) if tt.elem_type in _DATA_TYPES else tt.elem_type
    return f"{elem} {dims}"


def _tensors(graph):
    """Initializers and tensor-valued attributes of the top-level graph."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t
            elif a.type == AttributeProto.TENSORS:
                yield from a.tensors


def element_count(tensor: TensorProto) -> int:
    """The number of elements ``tensor``'s dims declare (exact: Python ints)."""
    n = 1
    for d in tensor.dims:
        n *= int(d)
    return n


def itemsize(data_type: int):
    """Bytes per element, or None where elements are not whole bytes (strings, 4-bit)."""
    if data_type == TensorProto.STRING or data_type in _PACKED:
        return None
    try:
        return helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None


def check_tensor_data(tensor: TensorProto) -> None:
    """Dims are not negative, the type is real, and stored data matches the dims."""
    name = tensor.name or "(unnamed)"
    if any(d < 0 for d in tensor.dims):
        raise InvalidGraphError(f"tensor '{name}' has negative dims {list(tensor.dims)}. {_FIX}",
                                tensor=tensor.name)
    if tensor.data_type not in _DATA_TYPES:
        raise InvalidGraphError(f"tensor '{name}' has data type {tensor.data_type}, which is no "
                                f"ONNX type. {_FIX}", tensor=tensor.name)
    if tensor.data_location == TensorProto.EXTERNAL:
        return  # sizes are checked against the data file (load.check_external_data)
    n, size = element_count(tensor), itemsize(tensor.data_type)
    if tensor.HasField("raw_data"):
        if size is not None and len(tensor.raw_data) != n * size:
            raise InvalidGraphError(
                f"tensor '{name}' declares dims {list(tensor.dims)} ({n} elements of "
                f"{size} bytes) but holds {len(tensor.raw_data)} bytes of data. {_FIX}",
                tensor=tensor.name)
        return
    if tensor.data_type in _PACKED:
        return
    field = helper.tensor_dtype_to_field(tensor.data_type)
    have = len(getattr(tensor, field))
    want = n * _VALUES_PER_ELEMENT.get(tensor.data_type, 1)
    if have != want and not (n == 0 and have == 0):
        raise InvalidGraphError(
            f"tensor '{name}' declares dims {list(tensor.dims)} ({n} elements) but holds "
            f"{have} values in {field}. {_FIX}", tensor=tensor.name)
