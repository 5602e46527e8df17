"""Ops whose output size depends on the data: bounds, counts, and refusals by name.

NonZero, Unique, NonMaxSuppression, Compress and TopK produce as many
elements as their input values decide. The importer runs them when those
values are known at import (constants, or computed from constants: the
output's size is then known too). With values computed at run time,
NonZero, NonMaxSuppression and Unique run into an upper bound with a count:
graph outputs no node reads get a count output on request
(``bound_data_dependent``: the caller keeps the first ``count``,
``keep_counted``; the ONNX backend's way); every other one runs with a count
symbol the program assigns, and the nodes after it run at the count
(``importer/counted.py``). Where neither applies (Compress, TopK of a run-time
k, a count deciding another, a program of symbolic sizes) the node is refused
by name, with what decides its size.
"""
from workbench.errors import ShapeError, UnsupportedCaseError

# op type -> (the inputs whose values decide the output size, what they decide)
DATA_DEPENDENT = {
    "NonZero": ("its input", "the number of nonzero elements"),
    "Unique": ("its input", "the number of distinct values"),
    "NonMaxSuppression": ("its boxes, scores and thresholds", "the number of boxes kept"),
    "Compress": ("its condition", "the number of true conditions"),
    "TopK": ("its input 'k'", "k elements along the axis"),
}


OUTPUTS = {"NonZero": 1, "NonMaxSuppression": 1, "Unique": 4, "Slice": 1}
BOUND_HINT = {op: ", or with an upper bound and a run-time count (importer/counted.py), "
                  "which a program of symbolic sizes does not take yet"
              for op in ("NonZero", "NonMaxSuppression", "Unique")}


def unknown_shape_error(model, missing: list) -> Exception:
    """The error for tensors ``missing`` a static shape: the first data-dependent node
    that produces one, named, else a ShapeError listing the tensors."""
    graph = model.graph
    for i, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in DATA_DEPENDENT:
            continue
        hit = [o for o in node.output if o in missing]
        if hit:
            inputs, decides = DATA_DEPENDENT[node.op_type]
            return UnsupportedCaseError(
                node.name or f"{node.op_type}_{i}", node.op_type,
                f"the size of its output '{hit[0]}' is {decides}, which depends on {inputs}, "
                f"known here only at run time. It runs when {inputs} can be computed at "
                f"import (from constants)" + BOUND_HINT.get(node.op_type, ""))
    return ShapeError(f"{len(missing)} tensor(s) have no static shape after inference and "
                      f"folding, e.g. {', '.join(missing[:5])}. Fix the input shapes "
                      f"(--shape) or simplify the model's shape computation.")


# Op types run with an upper bound and a run-time count where their size is not known at
# import, and the internal op type that does (ops/data_dependent.py).
BOUNDED = {"NonZero": "NonZeroBounded", "NonMaxSuppression": "NonMaxSuppressionBounded",
           "Unique": "UniqueBounded", "Slice": "SliceBounded"}
DOMAIN = "workbench"


def bound_data_dependent(model, types: dict):
    """Give NonZero, NonMaxSuppression and Unique outputs with no static shape an upper
    bound and a count, where each is a graph output no node reads (the caller then keeps the
    first ``count`` along the axis: a reader inside the graph would see the bound).
    Returns (model, {output: (count output, axis)}); other nodes stay for the build to
    refuse by name."""
    from onnx import TensorProto, helper, numpy_helper
    graph = model.graph
    outputs = {o.name for o in graph.output}
    read = {i for n in graph.node for i in n.input}
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    counted, taken = {}, set(types) | {n.name for n in graph.node}
    for pos, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in BOUNDED:
            continue
        bounds = _bounds(node, types, inits)   # output -> (bound shape, axis to trim)
        sized = [o for o in bounds if o and types.get(o, (0, None))[1] is None]
        if not sized or any(o not in outputs or o in read for o in sized):
            continue
        y = node.output[0]
        count = f"{y}__count"
        while count in taken:
            count += "_"
        taken.add(count)
        # the count comes after all of the op's outputs, present or not
        outs = list(node.output) + [""] * (OUTPUTS[node.op_type] - len(node.output))
        bounded = helper.make_node(BOUNDED[node.op_type], list(node.input), outs + [count],
                                   name=node.name, domain=DOMAIN)
        bounded.attribute.extend(node.attribute)
        graph.node[pos].CopyFrom(bounded)
        for name, (shape, axis) in bounds.items():
            if not name or axis is None:
                continue
            target = next(o for o in graph.output if o.name == name)
            elem = target.type.tensor_type.elem_type or TensorProto.INT64
            target.type.CopyFrom(helper.make_tensor_type_proto(elem, shape))
            counted[name] = (count, axis)
        graph.output.append(helper.make_tensor_value_info(count, TensorProto.INT64, [1]))
    if counted and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model, counted


def _bounds(node, types, inits) -> dict:
    """Output name -> (a shape that holds every possible result, the axis the count runs
    along; None: not trimmed), in output order; {} when an input shape is not static."""
    import math
    shapes = [types.get(i, (0, None))[1] if i else None for i in node.input]
    if node.op_type == "Slice":
        axis = slice_axis(node, types, inits)
        return {} if isinstance(axis, str) else {node.output[0]: (tuple(shapes[0]), axis)}
    if node.op_type == "NonZero":
        x = shapes[0]
        return {node.output[0]: ((len(x), math.prod(x)), 1)} if x else {}
    if node.op_type == "Unique":
        x = shapes[0]
        if not x:
            return {}
        attrs = {a.name: helper_value(a) for a in node.attribute}
        axis = attrs.get("axis")
        n = math.prod(x) if axis is None else x[axis % len(x)]
        y = (n,) if axis is None else tuple(n if d == axis % len(x) else s
                                            for d, s in enumerate(x))
        outs = list(node.output) + [""] * (4 - len(node.output))
        return dict(zip(outs, [(y, 0 if axis is None else axis % len(x)), ((n,), 0),
                               ((n,), None), ((n,), 0)]))
    boxes, scores = shapes[0], shapes[1]
    if boxes is None or scores is None or len(boxes) != 3 or len(scores) != 3:
        return {}
    per_class = boxes[1]
    if len(node.input) > 2 and node.input[2] in inits:   # max_output_boxes_per_class
        per_class = min(per_class, max(int(inits[node.input[2]].ravel()[0]), 0))
    return {node.output[0]: ((scores[0] * scores[1] * per_class, 3), 0)}


def slice_axis(node, types, inits):
    """The axis a Slice of run-time starts and ends cuts, or why it is not counted: one
    axis, known at import, step 1 (the count is then clamp(end) - clamp(start))."""
    x = types.get(node.input[0], (0, None))[1]
    if x is None:
        return "its input's size is itself known only at run time"
    bounds = [types.get(i, (0, None))[1] for i in node.input[1:3]]
    if any(b is None or tuple(b) != (1,) for b in bounds):
        return "its starts and ends, known only at run time, cut more than one axis"
    axes = node.input[3] if len(node.input) > 3 else ""
    steps = node.input[4] if len(node.input) > 4 else ""
    if axes and axes not in inits:
        return "its axes are known only at run time"
    if steps and (steps not in inits or int(inits[steps].ravel()[0]) != 1):
        return "its step is not 1 (or known only at run time); only step 1 is counted"
    axis = int(inits[axes].ravel()[0]) if axes else 0
    return axis + len(x) if axis < 0 else axis


def helper_value(attribute):
    from onnx import helper
    return helper.get_attribute_value(attribute)


def keep_counted(outputs: dict, counted: dict) -> dict:
    """``outputs`` with each bounded output cut to the count the program wrote."""
    import numpy as np
    out = dict(outputs)
    for name, (count, axis) in counted.items():
        n = int(np.asarray(outputs[count]).ravel()[0])
        out[name] = np.take(outputs[name], np.arange(n), axis=axis)
    return out
