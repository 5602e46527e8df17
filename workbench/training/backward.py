"""The reverse pass: walk the forward nodes from the loss back to the
parameters, asking each op's rule for its inputs' gradients and adding up
the gradients of tensors read more than once."""
from collections import defaultdict

import numpy as np

from workbench.errors import NoGradientRuleError
from workbench.training.naming import BACKWARD, backward_scope
from workbench.training.rules import RULES, GradCall

# inputs that carry shapes, indices, masks or fixed statistics: no gradient flows there
NOT_DIFFERENTIABLE = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 2, 3},
    "Gather": {1}, "ReduceSum": {1}, "ReduceMean": {1}, "Squeeze": {1}, "Unsqueeze": {1},
    "Split": {1}, "Where": {0}, "Clip": {1, 2}, "BatchNormalization": {3, 4},
    "ScatterND": {1}, "ScatterElements": {1}, "Resize": {1, 2, 3}, "Dropout": {1, 2},
    "ConstantOfShape": {0}, "Range": {0, 1, 2}, "CastLike": {1}, "OneHot": {0, 1, 2},
}


def differentiable(node, position: int) -> bool:
    return position not in NOT_DIFFERENTIABLE.get(node.op_type, ())


def reached_from(emitter, nodes, sources) -> set:
    """Float tensors that depend differentiably on ``sources``."""
    reach = set(sources)
    for node in nodes:
        if any(x in reach and differentiable(node, i) for i, x in enumerate(node.input)):
            reach.update(y for y in node.output if y and emitter.is_float(y))
    return reach


def leading_to(nodes, target: str) -> set:
    """Tensors the target depends on."""
    needed = {target}
    for node in reversed(nodes):
        if any(y in needed for y in node.output):
            needed.update(x for x in node.input if x)
    return needed


def check_rules(emitter, nodes, loss: str, wrt) -> list:
    """The nodes the backward pass runs through; every op type without a rule
    is refused at once, by name, as the importer refuses unsupported ops."""
    reach, needed = reached_from(emitter, nodes, wrt), leading_to(nodes, loss)
    path = [n for n in nodes if any(y in reach and y in needed for y in n.output)]
    missing = defaultdict(list)
    for node in path:
        if node.op_type not in RULES or node.domain not in ("", "ai.onnx"):
            missing[node.op_type].append(node.name or node.output[0])
    if missing:
        raise NoGradientRuleError(missing)
    return path


def add_backward(emitter, nodes, loss: str, wrt) -> dict:
    """Write the gradient of ``loss`` with respect to each name in ``wrt``;
    returns name -> gradient tensor (zeros for one the loss does not reach)."""
    e = emitter
    path = check_rules(e, nodes, loss, wrt)
    reach = reached_from(e, nodes, wrt)
    grads = defaultdict(list)
    e.scope = f"/{BACKWARD}"
    grads[loss].append(e.const(np.ones(e.shape(loss), dtype=e.np_dtype(loss)), name="dloss"))
    for node in reversed(path):
        dys = [_total(e, grads, y) if y else None for y in node.output]
        if all(d is None for d in dys):
            continue
        wants = [bool(x) and x in reach and e.is_float(x) and differentiable(node, i)
                 for i, x in enumerate(node.input)]
        if not any(wants):
            continue
        e.scope = backward_scope(node.name or node.output[0])
        results = RULES[node.op_type](GradCall(e, node, dys, wants))
        for i, grad in enumerate(results):
            if grad is not None and i < len(wants) and wants[i]:
                grads[node.input[i]].append(grad)
    e.scope = f"/{BACKWARD}"
    totals = {w: (_total(e, grads, w) or e.zeros(w)) for w in wrt}
    e.scope = ""
    return totals


def _total(e, grads, name):
    parts = grads.get(name)
    if not parts:
        return None
    if len(parts) > 1:
        grads[name] = [e.op("Sum", parts, like=name, name=f"grad_{name}_sum")]
    return grads[name][0]
