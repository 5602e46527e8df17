"""A training program: one ONNX model holding the forward pass, the loss,
the backward pass and the optimizer update (or the gradients, without an
optimizer), built from a model whose every tensor has a static shape."""
import fnmatch
import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workbench.errors import BadInputError
from workbench.importer.pieces import copy_model
from workbench.training.backward import add_backward, differentiable
from workbench.training.emit import Emitter
from workbench.training.forward import add_loss, training_forward
from workbench.training.naming import LOSS, OPTIMIZER
from workbench.training.optimizers import OptimizerSettings, add_update

MIN_OPSET = 13   # axes as inputs, Softmax over one axis: what the rules write


@dataclass
class TrainingProgram:
    model: onnx.ModelProto
    loss: str                                  # the loss output (rank 0)
    params: list                               # parameters, inputs of the program
    state: dict                                # every state input -> its initial value
    next_state: dict                           # state input -> the output with its next value
    gradients: dict = field(default_factory=dict)   # param -> gradient output (no optimizer)
    hyper: dict = field(default_factory=dict)       # learning_rate / train_step -> value
    labels: tuple = None                       # (name, elem_type, shape) or None
    masks: list = field(default_factory=list)  # Dropout masks: (name, shape, ratio)
    data: list = field(default_factory=list)   # the model's own inputs
    loss_kind: str = "output"
    classes: int = 0                           # cross entropy: the size of axis 1
    forward: onnx.ModelProto = None            # the folded forward pass, parameters as inputs
    output: str = None                         # the model output the loss reads
    optimizer: OptimizerSettings = None


def default_params(model: onnx.ModelProto, output: str) -> list:
    """Every float initializer of more than one element that ``output`` depends on
    where a gradient can flow (not through shapes, indices or fixed statistics)."""
    e = Emitter(model)
    needed = {output}
    for node in reversed(model.graph.node):
        if any(y in needed and e.is_float(y) for y in node.output):
            needed.update(x for i, x in enumerate(node.input) if differentiable(node, i))
    return [t.name for t in model.graph.initializer
            if t.name in needed and e.is_float(t.name) and int(np.prod(t.dims)) > 1]


def pick_params(model: onnx.ModelProto, params, output: str) -> list:
    candidates = default_params(model, output)
    if params is None:
        chosen = candidates
    elif isinstance(params, str):
        chosen = [p for p in candidates if fnmatch.fnmatchcase(p, params)
                  or re.search(params, p)]
    else:
        inits = {t.name for t in model.graph.initializer}
        unknown = [p for p in params if p not in inits]
        if unknown:
            raise BadInputError(f"{', '.join(map(repr, unknown))} are not initializers of the "
                                f"model; its parameters are: {', '.join(candidates[:20])}"
                                f"{' ...' if len(candidates) > 20 else ''}")
        chosen = list(params)
    if not chosen and params is None:
        raise BadInputError("the model has no float parameters its loss depends on (no float "
                            "initializer of more than one element that a gradient reaches; a "
                            "quantized model keeps its weights as integers): nothing to train.")
    if not chosen:
        raise BadInputError(f"no parameter matches {params!r}; the model's parameters are: "
                            f"{', '.join(candidates[:20]) or 'none'}")
    return chosen


def build_training(model: onnx.ModelProto, loss: str = "output", output: str = None,
                   params=None, optimizer: OptimizerSettings = None, batchnorm: str = "batch",
                   dropout: bool = False, labels: str = "labels") -> TrainingProgram:
    """``model``: the imported model with its input shapes fixed (not folded: folding
    would turn values computed from parameters, an embedding row picked by a
    constant index, into constants). The parameters become inputs first, then
    the importer's shape inference and folding run, so nothing they reach folds."""
    if not isinstance(labels, str) or not labels.isidentifier():
        raise BadInputError(f"labels names the program's labels input; {labels!r} is not a "
                            f"name (letters, digits and '_')")
    if batchnorm not in ("batch", "running"):
        raise BadInputError(f"batchnorm must be 'batch' or 'running', not {batchnorm!r}")
    from workbench.importer import settle_shapes
    from workbench.importer.shapes import infer_shapes
    model = infer_shapes(_at_least(copy_model(model), MIN_OPSET))
    outputs = [o.name for o in model.graph.output]
    output = output or outputs[0]
    if output not in outputs:
        raise BadInputError(f"'{output}' is not an output of the model; its outputs are "
                            f"{', '.join(outputs)}")
    chosen = pick_params(model, params, output)
    values = _as_inputs(model, chosen)
    model = settle_shapes(model)[0]
    forward = copy_model(model)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    data = [i.name for i in graph.input if i.name not in inits and i.name not in values]
    e = Emitter(model)
    nodes, buffers, masks = training_forward(e, list(graph.node), batchnorm, dropout)
    del graph.node[:]
    graph.node.extend(nodes)
    e.scope = LOSS
    loss_name, labels = add_loss(e, loss, output, labels)
    classes = e.shape(output)[1] if loss == "cross_entropy" else 0
    grads = add_backward(e, list(graph.node) + e.nodes, loss_name, chosen)
    program = TrainingProgram(model, "loss", chosen, {}, {}, labels=labels, masks=masks,
                              data=data, loss_kind=loss, optimizer=optimizer,
                              classes=classes, forward=forward,
                              output=output)
    e.scope = ""
    outs = [_rename(e, loss_name, "loss")]
    if optimizer is None:
        for p in chosen:
            program.gradients[p] = _rename(e, grads[p], f"grad__{p}")
        outs += [program.gradients[p] for p in chosen]
    else:
        e.scope = OPTIMIZER
        program.hyper, updates = add_update(e, optimizer, chosen, grads)
        for name, (nxt, initial) in updates.items():
            program.state[name] = initial
            program.next_state[name] = _rename(e, nxt, f"next__{name}")
    for name, nxt in buffers.items():
        program.state[name] = None
        program.next_state[name] = _rename(e, nxt, f"next__{name}")
    outs += list(program.next_state.values())
    e.finish()
    program.state.update(values)
    _make_inputs(e, program, inits)
    del graph.output[:]
    for name in outs:
        elem_type, shape = e.types[name]
        graph.output.append(helper.make_tensor_value_info(name, elem_type, shape))
    return program


def _as_inputs(model, names) -> dict:
    """Move the initializers ``names`` to graph inputs; returns their values."""
    graph = model.graph
    values, keep = {}, []
    for t in graph.initializer:
        if t.name in names:
            values[t.name] = numpy_helper.to_array(t).copy()
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return values


def _rename(e, name: str, wanted: str) -> str:
    """An Identity to a readable output name (outputs are named for the user)."""
    out = e.fresh(wanted)
    e.nodes.append(helper.make_node("Identity", [name], [out], name=e.fresh(f"{out}_node")))
    e.types[out] = e.types[name]
    return out


def _make_inputs(e, program, inits):
    """Parameters and state become inputs; their values go to ``program.state``."""
    graph = program.model.graph
    moved = {n for n, v in program.state.items() if v is None}
    for name in moved:
        program.state[name] = numpy_helper.to_array(inits[name]).copy()
    keep = [t for t in graph.initializer if t.name not in moved]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    extra = [n for n in program.state if n not in moved]   # optimizer moments
    new_inputs = list(program.params) + [n for n in program.state if n not in program.params
                                         and n in moved] + extra + list(program.hyper)
    if program.labels:
        new_inputs.append(program.labels[0])
    new_inputs += [m[0] for m in program.masks]
    existing = {i.name for i in graph.input}
    for name in new_inputs:
        if name in existing:
            continue
        elem_type, shape = e.types[name]
        graph.input.append(helper.make_tensor_value_info(name, elem_type, shape))
    # an input listed as an initializer too would be a default value: not any more
    kept = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in kept or i.name not in moved]
    del graph.input[:]
    graph.input.extend(inputs)


def _at_least(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if current is None or current >= version:
        return model
    from onnx import version_converter
    try:
        converted = version_converter.convert_version(model, version)
    except Exception as err:  # noqa: BLE001 (the converter raises many kinds)
        raise BadInputError(f"the model is opset {current}; the training program needs opset "
                            f"{version} or later, and onnx's converter failed: {err}. Export "
                            f"the model at opset {version} or later.") from err
    from workbench.importer.shapes import infer_shapes
    return infer_shapes(converted)
