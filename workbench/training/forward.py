"""The forward pass as training runs it, and the loss.

BatchNormalization normalizes with the batch's own mean and (biased)
variance, written as ordinary ops so the element-wise rules differentiate
it, and its running statistics become state the step updates (PyTorch's
convention: the running variance is the unbiased one). A Dropout keeps the
elements its mask input says; the host draws the mask, so a step is
deterministic given its inputs and can be checked against onnxruntime.
"""
import numpy as np
from onnx import TensorProto, helper

from workbench.errors import BadInputError
from workbench.training.naming import forward_scope

LOSSES = ("mse", "cross_entropy", "output")


def training_forward(e, nodes: list, batchnorm: str, dropout: bool):
    """Rewrite ``nodes`` for training; returns (nodes, buffer updates {input: next},
    mask inputs [(name, shape)])."""
    out, updates, masks = [], {}, []
    for node in nodes:
        if node.op_type == "BatchNormalization" and batchnorm == "batch":
            out.extend(_batch_statistics(e, node, updates))
        elif node.op_type == "Dropout" and dropout:
            out.extend(_masked(e, node, masks))
        else:
            out.append(node)
    return out, updates, masks


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _batch_statistics(e, node, updates):
    start = len(e.nodes)
    e.scope = forward_scope(node.name)
    x, scale, bias, running_mean, running_var = node.input[:5]
    shape = e.shape(x)
    eps, momentum = float(_attr(node, "epsilon", 1e-5)), float(_attr(node, "momentum", 0.9))
    axes = [0] + list(range(2, len(shape)))
    count = int(np.prod([shape[a] for a in axes]))
    channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    inv_count = e.scalar(1.0 / count, x)
    mean = e.mul(e.reduce_sum(x, axes, keepdims=True), inv_count)
    centred = e.sub(x, mean)
    var = e.mul(e.reduce_sum(e.mul(centred, centred), axes, keepdims=True), inv_count)
    inv_std = e.unary("Reciprocal", e.unary("Sqrt", e.add(var, e.scalar(eps, x))))
    normed = e.mul(centred, inv_std)
    y = e.op("Add", [e.mul(normed, e.reshape(scale, channel)), e.reshape(bias, channel)], like=x)
    e.nodes.append(helper.make_node("Identity", [y], [node.output[0]],
                                    name=e.fresh(f"{node.name}_train")))
    if running_mean and running_var and _is_state(e, running_mean, running_var):
        c = running_mean
        keep = e.scalar(momentum, c)
        take = e.scalar(1.0 - momentum, c)
        unbiased = e.mul(var, e.scalar(count / max(count - 1, 1), x))
        for stat, batch in ((running_mean, mean), (running_var, unbiased)):
            flat = e.reshape(batch, e.shape(stat))
            updates[stat] = e.add(e.mul(stat, keep), e.mul(flat, take))
    written = e.nodes[start:]
    del e.nodes[start:]
    e.scope = ""
    return written


def _is_state(e, *names) -> bool:
    inits = {t.name for t in e.model.graph.initializer}
    return all(n in inits for n in names)


def _masked(e, node, masks):
    x = node.input[0]
    ratio = float(e.constant_value(node.input[1])) if len(node.input) > 1 and node.input[1] \
        else float(_attr(node, "ratio", 0.5))
    start = len(e.nodes)
    e.scope = forward_scope(node.name)
    mask = e.fresh(f"{node.output[0]}_keep")
    e.types[mask] = (e.elem_type(x), e.shape(x))
    masks.append((mask, e.shape(x), ratio))
    kept = e.mul(x, mask)
    e.nodes.append(helper.make_node("Mul", [kept, e.scalar(1.0 / (1.0 - ratio), x)],
                                    [node.output[0]], name=e.fresh(f"{node.name}_train")))
    written = e.nodes[start:]
    del e.nodes[start:]
    e.scope = ""
    return written


def add_loss(e, kind: str, output: str, labels_name: str = "labels"):
    """Write the loss (a scalar, ``[]``); returns (loss, labels input (name, elem_type,
    shape) or None)."""
    if kind not in LOSSES:
        raise BadInputError(f"loss {kind!r} is not one of {', '.join(LOSSES)}")
    shape = e.shape(output)
    if kind == "output":
        if int(np.prod(shape)) != 1:
            raise BadInputError(f"output '{output}' has shape {list(shape)}; 'the output is the "
                                f"loss' needs one element. Pick --loss mse or cross_entropy.")
        return e.reshape(output, ()), None
    if not e.is_float(output):
        raise BadInputError(f"output '{output}' is not a float tensor; it cannot be a loss's "
                            f"input.")
    labels = e.fresh(labels_name)
    if kind == "mse":
        e.types[labels] = (e.elem_type(output), shape)
        diff = e.sub(output, labels)
        total = e.reduce_sum(e.mul(diff, diff), range(len(shape)), keepdims=False)
        loss = e.mul(total, e.scalar(1.0 / int(np.prod(shape)), output))
        return loss, (labels, e.elem_type(output), shape)
    if len(shape) < 2:
        raise BadInputError(f"cross entropy needs scores of shape (N, C, ...); output "
                            f"'{output}' has shape {list(shape)}.")
    # classes on axis 1, as torch.nn.functional.cross_entropy and ONNX's losses take them
    label_shape = (shape[0],) + tuple(shape[2:])
    e.types[labels] = (TensorProto.INT64, label_shape)
    log_p = e.unary("LogSoftmax", output, axis=1)
    classes = shape[1]
    row = e.const(np.arange(classes, dtype=np.int64).reshape((1, classes) + (1,) * (len(shape) - 2)))
    chosen = e.op("Equal", [e.reshape(labels, (shape[0], 1) + tuple(shape[2:])), row],
                  shape=shape, elem_type=TensorProto.BOOL)
    one_hot = e.op("Cast", [chosen], like=output, to=e.elem_type(output))
    picked = e.reduce_sum(e.mul(one_hot, log_p), range(len(shape)), keepdims=False)
    loss = e.mul(picked, e.scalar(-1.0 / int(np.prod(label_shape)), output))
    return loss, (labels, TensorProto.INT64, label_shape)
