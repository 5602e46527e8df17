"""Reads at positions held in another tensor: the Gather family, ReverseSequence, OneHot.

Each is one map over the output; the tasklet reads its index tensor with
an affine memlet and the data at the computed position (``whole``).
Negative indices count from the end, as the spec says.
"""
import dace

from workbench.ops.index_maps import (check_shape, element_map, offset, op_sdfg, params, size_of,
                                      whole, wrap)
from workbench.ops.registry import implements


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@implements("Gather")
def gather(call):
    """Y[pre, idx..., post] = X[pre, indices[idx...], post]."""
    x, ind, y = call.input(0), call.input(1), call.output(0)
    xs = call.shape(x)
    axis = _axis(call.attr("axis", 0), len(xs))
    outer, n, inner = size_of(xs[:axis]), xs[axis], size_of(xs[axis + 1:])
    k = size_of(call.shape(ind))
    sdfg, state = op_sdfg(call, "gather", {x: (outer, n, inner), ind: (k,),
                                                   y: (outer, k, inner)})
    element_map(state, "gather", y, (outer, k, inner), f"src[{wrap('idx', n)}]",
                {"idx": dace.Memlet(f"{ind}[i1]"),
                 "src": dace.Memlet(f"{x}[i0, 0:{n}, i2]", volume=1)})
    return sdfg


@implements("GatherElements")
def gather_elements(call):
    """Y[i] = X[i with its axis entry replaced by indices[i]]."""
    x, ind, y = call.input(0), call.input(1), call.output(0)
    xs, shape = call.shape(x), call.shape(ind)
    axis = _axis(call.attr("axis", 0), len(xs))
    index = params(len(shape))
    index[axis] = wrap("idx", xs[axis])
    sdfg, state = op_sdfg(call, "gather_elements", {x: (size_of(xs),)})
    element_map(state, "gather", y, shape, f"src[{offset(index, xs)}]",
                {"idx": dace.Memlet(f"{ind}[{', '.join(params(len(shape)))}]"),
                 "src": whole(x, (size_of(xs),))})
    return sdfg


@implements("GatherND")
def gather_nd(call):
    """Y[b, i, t] = X[b, indices[b, i, :], t] with ``batch_dims`` leading b axes."""
    x, ind, y = call.input(0), call.input(1), call.output(0)
    xs, ishape = call.shape(x), call.shape(ind)
    batch, depth = call.attr("batch_dims", 0), ishape[-1]
    out_shape = tuple(ishape[:-1]) + tuple(xs[batch + depth:])
    check_shape(call, y, out_shape or (1,))
    lead = len(ishape) - 1
    ps = params(len(out_shape))
    reads = {f"k{j}": dace.Memlet(f"{ind}[{', '.join(ps[:lead] + [str(j)])}]")
             for j in range(depth)}
    index = ps[:batch] + [wrap(f"k{j}", xs[batch + j]) for j in range(depth)] + ps[lead:]
    reads["src"] = whole(x, (size_of(xs),))
    sdfg, state = op_sdfg(call, "gather_nd", {x: (size_of(xs),),
                                                      y: out_shape or (1,)})
    element_map(state, "gather", y, out_shape or (1,), f"src[{offset(index, xs)}]", reads)
    return sdfg


@implements("ReverseSequence")
def reverse_sequence(call):
    """The first sequence_lens[b] steps of each batch entry b are read backwards."""
    x, lens, y = call.input(0), call.input(1), call.output(0)
    shape = call.shape(x)
    ps = params(len(shape))
    t, b = ps[call.attr("time_axis")], ps[call.attr("batch_axis")]
    index = [f"(n - 1 - {t} if {t} < n else {t})" if p == t else p for p in ps]
    sdfg, state = op_sdfg(call, "reverse_sequence", {x: (size_of(shape),)})
    element_map(state, "reverse", y, shape, f"src[{offset(index, shape)}]",
                {"n": dace.Memlet(f"{lens}[{b}]"), "src": whole(x, (size_of(shape),))})
    return sdfg


@implements("OneHot")
def one_hot(call):
    """Y[..., d, ...] = on if indices[...] (negative: + depth) == d else off.

    The depth is the output's extent along ``axis``, fixed at import.
    """
    ind, values, y = call.input(0), call.input(2), call.output(0)
    shape = call.shape(y)
    axis = _axis(call.attr("axis", -1), len(shape))
    ps = params(len(shape))
    depth, d = shape[axis], ps[axis]
    at = ", ".join(ps[:axis] + ps[axis + 1:]) or "0"
    sdfg, state = op_sdfg(call, "one_hot")
    element_map(state, "one_hot", y, shape, f"on if {wrap('int(idx)', depth)} == {d} else off",
                {"idx": dace.Memlet(f"{ind}[{at}]"), "off": dace.Memlet(f"{values}[0]"),
                 "on": dace.Memlet(f"{values}[1]")})
    return sdfg
