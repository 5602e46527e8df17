"""Data movement: reshapes, Transpose, Concat, Gather.

Reshape-like ops are copies here; the layout level's "reshape as view"
transformation removes the copy. Shape-tensor inputs (Reshape's ``shape``,
Unsqueeze's ``axes``) were folded to constants at import and are not read.
"""
import math

import dace

from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet


@implements("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def copy_reshaped(call):
    """Y = X with another shape: a flat element-by-element copy."""
    x, y, mask = call.input(0), call.output(0), call.output(1)
    size = math.prod(call.shape(x))
    shapes = {x: (size,), y: (size,)}
    if mask:  # Dropout at inference keeps everything
        shapes[mask] = (size,)
    sdfg, state = connector_sdfg(call, "reshape", shapes)
    mapped_tasklet(state, "copy", {"i": f"0:{size}"}, {"v": dace.Memlet(f"{x}[i]")}, "o = v",
                             {"o": dace.Memlet(f"{y}[i]")})
    if mask:
        mapped_tasklet(state, "mask", {"i": f"0:{size}"}, {}, "m = True",
                                 {"m": dace.Memlet(f"{mask}[i]")})
    return sdfg


@implements("Transpose")
def transpose(call):
    x, y = call.input(0), call.output(0)
    rank = len(call.shape(x))
    perm = call.attr("perm") or list(range(rank))[::-1]
    out_shape = call.shape(y)
    params = [f"i{k}" for k in range(rank)]
    src = [None] * rank
    for k, p in enumerate(perm):  # output axis k reads input axis perm[k]
        src[p] = params[k]
    sdfg, state = connector_sdfg(call, "transpose")
    mapped_tasklet(state, "transpose", {p: f"0:{n}" for p, n in zip(params, out_shape)},
                             {"v": dace.Memlet(f"{x}[{', '.join(src)}]")}, "o = v",
                             {"o": dace.Memlet(f"{y}[{', '.join(params)}]")})
    return sdfg


@implements("Concat")
def concat(call):
    y = call.output(0)
    out_shape = call.shape(y)
    axis = call.attr("axis")
    axis = axis + len(out_shape) if axis < 0 else axis
    outer, inner = math.prod(out_shape[:axis]), math.prod(out_shape[axis + 1:])
    shapes = {y: (outer, out_shape[axis], inner)}
    for conn in call.inputs:
        shapes[conn] = (outer, call.shape(conn)[axis], inner)
    sdfg, state = connector_sdfg(call, "concat", shapes)
    offset = 0
    write = state.add_write(y)
    for conn in call.inputs:
        n = shapes[conn][1]
        if n:
            mapped_tasklet(state, f"copy_{conn}", {"o": f"0:{outer}", "j": f"0:{n}",
                                                       "i": f"0:{inner}"},
                                     {"v": dace.Memlet(f"{conn}[o, j, i]")}, "w = v",
                                     {"w": dace.Memlet(f"{y}[o, j + {offset}, i]")}, output_nodes={y: write})
        offset += n
    return sdfg


@implements("Gather")
def gather(call):
    """Y[pre, idx..., post] = X[pre, indices[idx...], post]; negative indices wrap."""
    x, ind, y = call.input(0), call.input(1), call.output(0)
    xs = call.shape(x)
    axis = call.attr("axis", 0)
    axis = axis + len(xs) if axis < 0 else axis
    outer, n, inner = math.prod(xs[:axis]), xs[axis], math.prod(xs[axis + 1:])
    k = math.prod(call.shape(ind))
    sdfg, state = connector_sdfg(call, "gather", {x: (outer, n, inner), ind: (k,),
                                                   y: (outer, k, inner)})
    mapped_tasklet(state, "gather", {"o": f"0:{outer}", "j": f"0:{k}", "i": f"0:{inner}"}, {
        "idx": dace.Memlet(f"{ind}[j]"), "src": dace.Memlet(f"{x}[o, 0:{n}, i]")},
        f"w = src[idx + {n} if idx < 0 else idx]", {"w": dace.Memlet(f"{y}[o, j, i]")})
    return sdfg
