"""float16 tensors computed in float32 (why: workbench/ops/half.py).

After folding, a model with float16 tensors is rewritten so that only its
own inputs and outputs stay float16:
- a float16 graph input is cast to float32 once, where the program starts;
- a float16 graph output is cast from float32 where it is produced;
- every other float16 tensor (weights included: exactly) becomes float32;
- an operator that produces one may leave a value float16 cannot hold, so
  ``RoundToHalf`` rounds its output, except where the operator only moves,
  picks or compares values (a Transpose, a Relu, a MaxPool);
- ``Cast``/``CastLike`` to float16 become ``RoundToHalf``, and any ``dtype``
  or ``to`` attribute naming float16 names float32.
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
ROUND = "RoundToHalf"
DOMAIN = "workbench"

# Their outputs are values of their inputs (or comparisons of them): float16 stays exact.
VALUE_PRESERVING = {
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat",
    "Split", "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad",
    "Relu", "Neg", "Abs", "Max", "Min", "MaxPool", "GlobalMaxPool", "Where",
    "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin", "Sign", "Dropout",
    "ScatterElements", "ScatterND", "TopK", "ReverseSequence", "Compress", "Trilu",
    "Ceil", "Floor", "Round", "Clip",
}




def compute_half_in_float(model: onnx.ModelProto, types: dict) -> onnx.ModelProto:
    """``model`` (folded, ``types``: name -> (elem, shape) of every tensor) rewritten so
    that float16 is only on its inputs and outputs. A model without float16 is returned."""
    if not any(elem == F16 for elem, _ in types.values()):
        return model
    graph = model.graph
    taken = set(types) | {o for n in graph.node for o in n.output}
    renamed = {}   # a float16 graph input -> its float32 copy

    def fresh(base):
        name, k = f"{base}__f32", 1
        while name in taken:
            name, k = f"{base}__f32_{k}", k + 1
        taken.add(name)
        return name

    new = onnx.ModelProto()
    new.CopyFrom(model)
    g = new.graph
    del g.node[:]
    value_info = []
    for inp in graph.input:
        if types.get(inp.name, (None,))[0] == F16 and \
                inp.name not in {t.name for t in graph.initializer}:
            renamed[inp.name] = fresh(inp.name)
            g.node.append(helper.make_node("Cast", [inp.name], [renamed[inp.name]], to=F32,
                                           name=f"{inp.name}/to_float32"))
            value_info.append((renamed[inp.name], types[inp.name][1]))
    outputs = {o.name for o in graph.output if types.get(o.name, (None,))[0] == F16}
    # a value nothing reads needs no rounding (and DaCe cannot drop a dead C++ tasklet)
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for node in graph.node:
        node = _copy_node(node)
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
        for attr in node.attribute:
            if attr.name in ("to", "dtype") and attr.type == onnx.AttributeProto.INT \
                    and attr.i == F16:
                attr.i = F32
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == F16:
                attr.t.CopyFrom(_to_float(attr.t))
        casts_to_half = node.op_type in ("Cast", "CastLike") and any(
            types.get(o, (None,))[0] == F16 for o in node.output)
        if casts_to_half:
            node = helper.make_node(ROUND, [node.input[0]], list(node.output), name=node.name,
                                    domain=DOMAIN)
        after = []
        for k, out in enumerate(node.output):
            if not out or types.get(out, (None,))[0] != F16 or out not in read:
                continue
            exact = casts_to_half or node.op_type in VALUE_PRESERVING
            # the float32 tensor that holds the value for the nodes that read it
            inner = fresh(out) if out in outputs else out
            if exact:
                node.output[k] = inner
            else:
                raw = fresh(out)
                node.output[k] = raw
                value_info.append((raw, types[out][1]))
                after.append(helper.make_node(ROUND, [raw], [inner], domain=DOMAIN,
                                              name=f"{node.name or out}/round_to_float16"))
            if out in outputs:   # the program's own float16 output, written from it
                renamed[out] = inner
                value_info.append((inner, types[out][1]))
                after.append(helper.make_node("Cast", [inner], [out], to=F16,
                                              name=f"{node.name or out}/to_float16"))
        g.node.append(node)
        g.node.extend(after)
    del g.initializer[:]
    g.initializer.extend(_to_float(t) if t.data_type == F16 else t for t in graph.initializer)
    inits = {t.name for t in graph.initializer}
    for vi in list(g.value_info) + [i for i in g.input if i.name in inits]:
        if vi.type.tensor_type.elem_type == F16:
            vi.type.tensor_type.elem_type = F32
    for name, shape in value_info:
        g.value_info.append(helper.make_tensor_value_info(name, F32, shape))
    known = {vi.name for vi in g.value_info} | {i.name for i in g.input} | \
        {o.name for o in g.output}
    for name, (elem, shape) in types.items():   # float16 tensors the model left undeclared
        if elem == F16 and name not in known and shape is not None:
            g.value_info.append(helper.make_tensor_value_info(name, F32, shape))
    if not any(o.domain == DOMAIN for o in new.opset_import):
        new.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return new


def _copy_node(node):
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _to_float(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)
