"""Shape contracts onnx's inference leaves unchecked, checked once shapes are static.

The compiled program indexes arrays with these sizes and no bounds checks,
so a model that breaks one would read or write out of bounds. Rules, each
an ``InvalidGraphError`` naming the node:

1. Conv: ``group >= 1``; input channels = weight channels x group; output
   channels divisible by group. ConvTranspose: input channels = weight's
   first dim, divisible by group.
2. Conv/ConvTranspose: ``kernel_shape``, when given, equals the weight's
   spatial dims; strides and dilations are >= 1 and pads >= 0, one per
   spatial dim (pads two); a bias has one value per output channel.
3. An ``axis`` attribute lies in ``[-r, r)`` for the rank ``r`` of the input
   it indexes (``[-r, r]`` for Flatten).
"""
import onnx
from onnx import helper

from workbench.errors import InvalidGraphError
from workbench.importer.validate import node_label


def check_contracts(model: onnx.ModelProto, types: dict) -> None:
    """``types``: tensor name -> (elem type, static shape or None)."""
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("Conv", "ConvTranspose"):
            _check_conv(node, i, types)
        if node.op_type in _AXIS_OPS:
            _check_axis(node, i, types)


# Ops whose ``axis`` attribute indexes their first input's dims; the number is
# how far past the last dim it may point (Flatten splits before dim ``axis``).
_AXIS_OPS = {op: 0 for op in (
    "Gather", "GatherElements", "ScatterElements", "Concat", "Softmax", "LogSoftmax",
    "Hardmax", "Split", "LayerNormalization", "ArgMax", "ArgMin", "Compress", "TopK")}
_AXIS_OPS["Flatten"] = 1


def _check_axis(node, i, types):
    axis = next((a.i for a in node.attribute if a.name == "axis"
                 and a.type == onnx.AttributeProto.INT), None)
    shape = types.get(node.input[0], (None, None))[1] if node.input else None
    if axis is None or shape is None:
        return
    low, high = -len(shape), len(shape) - 1 + _AXIS_OPS[node.op_type]
    if high >= 0 and not low <= axis <= high:
        _fail(node, i, f"axis {axis} is outside [{low}, {high}] for its input of shape "
                       f"{list(shape)}")


def _fail(node, i, why):
    raise InvalidGraphError(f"node {node_label(node, i)}: {why}. Fix the model (its weights, "
                            f"attributes or input shapes).", node=node.name)


def _check_conv(node, i, types):
    shapes = [types.get(n, (None, None))[1] if n else None for n in node.input]
    x, w = (shapes + [None, None])[:2]
    if x is None or w is None:
        return
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    group = attrs.get("group", 1)
    nsp = len(x) - 2
    if group < 1:
        _fail(node, i, f"group is {group}; it must be at least 1")
    if len(w) != len(x) or nsp < 1:
        _fail(node, i, f"input shape {list(x)} and weight shape {list(w)} differ in rank")
    if node.op_type == "Conv":
        if x[1] != w[1] * group:
            _fail(node, i, f"the input has {x[1]} channels but the weight {list(w)} with group "
                           f"{group} expects {w[1] * group}")
        if w[0] % group:
            _fail(node, i, f"{w[0]} output channels do not divide into {group} groups")
        out_channels = w[0]
    else:
        if x[1] != w[0] or w[0] % group:
            _fail(node, i, f"the input has {x[1]} channels but the weight {list(w)} with group "
                           f"{group} expects {w[0]}")
        out_channels = w[1] * group
    kernel = attrs.get("kernel_shape")
    if kernel is not None and list(kernel) != list(w[2:]):
        _fail(node, i, f"kernel_shape {list(kernel)} differs from the weight's {list(w[2:])}")
    for key, count, least in (("strides", nsp, 1), ("dilations", nsp, 1), ("pads", 2 * nsp, 0)):
        values = attrs.get(key)
        if values is not None and (len(values) != count or any(v < least for v in values)):
            _fail(node, i, f"{key} {list(values)} must be {count} values of at least {least}")
    if len(shapes) > 2 and shapes[2] is not None and list(shapes[2]) != [out_channels]:
        _fail(node, i, f"the bias has shape {list(shapes[2])}, not [{out_channels}]")
