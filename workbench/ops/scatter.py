"""Writes at positions held in another tensor: ScatterElements, Scatter, ScatterND.

Y starts as a copy of the data (one state), then one map over the updates
writes each update at its computed position (a second state). A reduction
becomes the write-conflict resolution of that write, so duplicate indices
combine as the spec says; without one, duplicates are undefined (the spec's
words) and the last writer wins.

``ScatterNDOnFill`` and ``ScatterElementsOnFill`` (domain ``workbench``, made by
FillIntoScatter, ``transforms/fusion/fill_scatter.py``) are the same scatters whose
data was one value everywhere (a ConstantOfShape or an Expand of one value): the
data input is absent and Y starts as the attribute ``fill``, written, not copied.
A training program's embedding gradient is such a scatter-add onto zeros as large
as the table.
"""
import dace

from workbench.ops.index_maps import (copy_map, element_map, index_map, literal, offset, op_sdfg,
                                      params, size_of, whole, wrap)
from workbench.ops.registry import implements

DOMAIN = "workbench"
# the scatter onto a fill, per ONNX scatter: the data input absent, Y starts as ``fill``
ON_FILL = {"ScatterND": "ScatterNDOnFill", "ScatterElements": "ScatterElementsOnFill",
           "Scatter": "ScatterElementsOnFill"}
_REDUCTIONS = {"none": None, "add": "lambda a, b: a + b", "mul": "lambda a, b: a * b",
               "max": "lambda a, b: max(a, b)", "min": "lambda a, b: min(a, b)"}


def _scatter(call, upd_shape, target, reads):
    """Y = data; then Y[target(i)] (reduction)= updates[i] for every i of ``upd_shape``."""
    x, upd, y = call.input(0), call.input(2), call.output(0)
    reduction = call.attr("reduction", "none")
    if reduction not in _REDUCTIONS:
        raise call.fail(f"reduction {reduction!r} is not one of {', '.join(_REDUCTIONS)}")
    size = size_of(call.shape(y))
    sdfg, first = op_sdfg(call, call.op_type.lower(), {**({x: (size,)} if x else {}),
                                                        y: (size,)})
    if x:
        copy_map(first, "copy", x, ["i0"], y, (size,))
    else:
        element_map(first, "fill", y, (size,), literal(call.attr("fill", 0.0)))
    if not size or not size_of(upd_shape):
        return sdfg
    then = sdfg.add_state_after(first, "scatter")
    ps = params(len(upd_shape))
    reads = dict(reads, u=dace.Memlet(f"{upd}[{', '.join(ps)}]"))
    write = whole(y, (size,))
    write.wcr = _REDUCTIONS[reduction]
    index_map(then, "scatter", upd_shape, reads, f"o[{target}] = u", {"o": write})
    return sdfg


@implements(ON_FILL["ScatterElements"], internal=True)
@implements("ScatterElements", "Scatter")
def scatter_elements(call):
    """Y[i with its axis entry replaced by indices[i]] = updates[i]."""
    ind, upd = call.input(1), call.input(2)
    xs, shape = call.shape(call.output(0)), call.shape(upd)
    axis = call.attr("axis", 0)
    axis = axis + len(xs) if axis < 0 else axis
    index = params(len(shape))
    reads = {"idx": dace.Memlet(f"{ind}[{', '.join(index)}]")}
    index[axis] = wrap("idx", xs[axis])
    return _scatter(call, shape, offset(index, xs), reads)


@implements(ON_FILL["ScatterND"], internal=True)
@implements("ScatterND")
def scatter_nd(call):
    """Y[indices[i, :], t] = updates[i, t]."""
    ind = call.input(1)
    xs, ishape = call.shape(call.output(0)), call.shape(ind)
    depth, lead = ishape[-1], len(ishape) - 1
    upd_shape = tuple(ishape[:-1]) + tuple(xs[depth:])
    ps = params(len(upd_shape) or 1)
    reads = {f"k{j}": dace.Memlet(f"{ind}[{', '.join(ps[:lead] + [str(j)])}]")
             for j in range(depth)}
    index = [wrap(f"k{j}", xs[j]) for j in range(depth)] + ps[lead:len(upd_shape)]
    return _scatter(call, upd_shape or (1,), offset(index, xs), reads)
