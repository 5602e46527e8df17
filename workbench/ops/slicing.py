"""Pieces of tensors: Concat, Split, Slice, Compress and Pad.

Concat, Split and Compress move contiguous runs along one axis: each array
is seen as ``(outer, axis, inner)`` and each run is one copy map. Slice
reads an affine index; Pad computes where each output element comes from.
"""
import math

import dace
import numpy as np

from workbench.ops.index_maps import (check_shape, copy_map, element_map, literal, offset, op_sdfg,
                                      params, size_of, whole)
from workbench.ops.registry import implements, outer_layout_sdfg


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _around(shape, axis: int) -> tuple:
    """``shape`` seen as (outer, shape[axis], inner)."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _runs(call, one, pieces, axis_shape, into_one: bool):
    """Copy runs between array ``one`` and pieces along an axis.

    ``pieces`` lists (connector, start in ``one``, length, start in the
    piece); with ``into_one`` pieces are written into ``one``, else read from it.
    """
    outer, inner = axis_shape[0], axis_shape[2]
    shapes = {conn: (outer, size_of(call.shape(conn)) // (outer * inner) if outer * inner else 0,
                     inner) for conn, *_ in pieces}
    shapes[one] = axis_shape
    sdfg, state = op_sdfg(call, call.op_type.lower(), shapes)
    # One access node per array (InlineSDFG reuses one memlet object for all
    # access nodes of a reshaped array: "Duplicate memlet detected"), and none
    # for empty runs (an access node without edges breaks it too).
    pieces = [p for p in pieces if p[2] * outer * inner]
    nodes = {conn: state.add_access(conn) for conn in {one, *(p[0] for p in pieces)}
             if pieces}
    for k, (conn, at, length, start) in enumerate(pieces):
        if into_one:
            element_map(state, f"copy_{k}", one, (outer, length, inner), "v",
                        {"v": dace.Memlet(f"{conn}[i0, i1 + {start}, i2]")},
                        out_index=f"i0, i1 + {at}, i2", input_nodes=nodes, output_nodes=nodes)
        else:
            copy_map(state, f"copy_{k}", one, ["i0", f"i1 + {at}", "i2"], conn,
                     (outer, length, inner), input_nodes=nodes, output_nodes=nodes)
    return sdfg


@implements("Concat")
def concat(call):
    y = call.output(0)
    out_shape = call.shape(y)
    axis = _axis(call.attr("axis"), len(out_shape))
    pieces, at = [], 0
    for conn in call.inputs:
        n = call.shape(conn)[axis]
        pieces.append((conn, at, n, 0))
        at += n
    return _runs(call, y, pieces, _around(out_shape, axis), into_one=True)


@implements("Concat", impl="direct")
def concat_direct(call):
    """Each input copied into its slice of the output by a map over its own index, the
    arrays at their own strides (channels-last ones after ChannelsLast too; the pure
    implementation reshapes them, which only row-major data allows). The map's last,
    innermost, parameter walks the output's fastest dimension."""
    from workbench.ops.registry import mapped_tasklet
    from workbench.ops.symbolic_sizes import typical
    y = call.output(0)
    shape, strides = call.shape(y), [typical(s) for s in call.outputs[y].strides]
    axis = _axis(call.attr("axis"), len(shape))
    sdfg = outer_layout_sdfg(call, "concat_direct")
    state = sdfg.add_state()
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    out_node, at = state.add_write(y), 0
    for k, conn in enumerate(call.inputs):
        extent = call.shape(conn)
        if 0 not in extent:
            index = [f"i{d}" for d in range(len(shape))]
            target = [f"i{d} + {at}" if d == axis else f"i{d}" for d in range(len(shape))]
            _, entry, _ = mapped_tasklet(
                state, f"copy_{k}", {f"i{d}": f"0:{extent[d]}" for d in order},
                {"v": dace.Memlet(f"{conn}[{', '.join(index)}]")}, "o = v",
                {"o": dace.Memlet(f"{y}[{', '.join(target)}]")},
                input_nodes={conn: state.add_read(conn)}, output_nodes={y: out_node})
            # threads over all but the innermost loop, which stays a plain (vectorizable)
            # run: collapsing it too costs a division per element (SqueezeNet's first
            # Concat, channels-last: 0.62 ms, 0.18 ms without)
            entry.map.collapse = max(1, len(shape) - 1)
        at += extent[axis]
    return sdfg


@implements("Split")
def split(call):
    """The outputs' shapes (from the split sizes or num_outputs) give the runs."""
    x = call.input(0)
    in_shape = call.shape(x)
    axis = _axis(call.attr("axis", 0), len(in_shape))
    pieces, at = [], 0
    for conn, n in zip(call.outputs, _split_sizes(call, in_shape[axis])):
        check_shape(call, conn, in_shape[:axis] + (n,) + in_shape[axis + 1:])
        pieces.append((conn, at, n, 0))
        at += n
    return _runs(call, x, pieces, _around(in_shape, axis), into_one=False)


def _split_sizes(call, n: int) -> list:
    count = len(call.outputs)
    if call.input(1):
        return [int(s) for s in call.require_const(1, "split")]
    if call.attr("split"):  # before opset 13
        return list(call.attr("split"))
    if call.attr("num_outputs"):  # the last chunk may be smaller
        chunk = -(-n // call.attr("num_outputs"))
        return [min(chunk, n - k * chunk) for k in range(count)]
    return [n // count] * count


@implements("Compress")
def compress(call):
    """With a constant condition the kept slices are known: copy each run of them."""
    x, y = call.input(0), call.output(0)
    keep = call.require_const(1, "condition").astype(bool).ravel()
    axis = call.attr("axis")
    shape = call.shape(x) if axis is not None else (size_of(call.shape(x)),)
    axis = _axis(axis or 0, len(shape))
    keep = keep[:shape[axis]]
    pieces, at, pos = [], 0, 0
    while pos < len(keep):
        if not keep[pos]:
            pos += 1
            continue
        end = pos
        while end < len(keep) and keep[end]:
            end += 1
        pieces.append((x, at, end - pos, pos))
        at, pos = at + end - pos, end
    return _runs(call, y, pieces, _around(
        shape[:axis] + (at,) + shape[axis + 1:], axis), into_one=True)


def _slice_bounds(call, shape, out_shape=None):
    """Per axis (start, step, length) after the spec's clamping. Where sizes are
    symbols (``workbench.importer.symbolic``) the ends may be unknown at import and the
    clamping undecided: a forward slice from a start it cannot pass then takes its
    length from the output's shape (``out_shape``), which the import fitted."""
    symbolic = out_shape is not None and any(not isinstance(d, int)
                                             for d in (*shape, *out_shape))
    if call.input(1):
        starts = call.require_const(1, "starts")
        ends = call.const(2) if symbolic else call.require_const(2, "ends")
        if ends is None:
            ends = [None] * len(starts)
        axes = call.require_const(3, "axes") if call.input(3) else range(len(starts))
        steps = call.require_const(4, "steps") if call.input(4) else [1] * len(starts)
    else:  # before opset 10 they are attributes
        starts, ends = call.attr("starts"), call.attr("ends")
        axes, steps = call.attr("axes") or range(len(starts)), [1] * len(starts)
    bounds = [(0, 1, n) for n in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis, start, step = _axis(int(axis), len(shape)), int(start), int(step)
        if step == 0:
            raise call.fail("a slice step is 0")
        n = shape[axis]
        try:
            end = int(end)
            start, end = start + n if start < 0 else start, end + n if end < 0 else end
            if step > 0:
                start, end = min(max(start, 0), n), min(max(end, 0), n)
            else:
                start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            bounds[axis] = (start, step, max(0, -(-(end - start) // step)))
        except TypeError:   # an end or a size that is a symbol
            if not symbolic or step < 0 or start < 0:
                raise call.fail("a slice whose end or size is symbolic must run forward from "
                                "a start of 0 or more") from None
            bounds[axis] = (start, step, out_shape[axis])
    return bounds


@implements("Slice")
def slice_(call):
    """Y[i] = X[start + step * i] per axis."""
    x, y = call.input(0), call.output(0)
    bounds = _slice_bounds(call, call.shape(x), call.shape(y))
    check_shape(call, y, tuple(length for *_, length in bounds))
    index = [f"{start} + {step} * {p}" if step != 1 else f"{p} + {start}"
             for (start, step, _), p in zip(bounds, params(len(bounds)))]
    sdfg, state = op_sdfg(call, "slice")
    copy_map(state, "slice", x, index, y, call.shape(y))
    return sdfg


def _pad_source(mode: str, j: str, n: int) -> str:
    """Where output position ``j`` (an input index, maybe outside 0..n-1) reads from."""
    if mode == "edge":
        return f"min(max({j}, 0), {n - 1})"
    if mode == "reflect":
        return f"min(({j}) if ({j}) >= 0 else -({j}), {2 * (n - 1)} - ({j}))" if n > 1 else "0"
    return f"(({j}) % {n} + {n}) % {n}"  # wrap; both C and Python remainders agree here


def _pads(call, rank):
    """(begin, end) per axis, from the pads input (axes input) or the old attribute."""
    pads = call.require_const(1, "pads") if call.input(1) else call.attr("pads")
    pads = [int(p) for p in np.ravel(pads)]
    axes = [int(a) for a in call.require_const(3, "axes")] if call.input(3) else range(rank)
    out = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        out[_axis(axis, rank)] = (pads[k], pads[k + len(axes)])
    return out


@implements("Pad")
def pad(call):
    x, y = call.input(0), call.output(0)
    in_shape, out_shape = call.shape(x), call.shape(y)
    mode = call.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise call.fail(f"mode {mode!r} is not constant, edge, reflect or wrap")
    pads = _pads(call, len(in_shape))
    value = call.input(2)
    reads = {"cv": dace.Memlet(f"{value}[0]")} if value else {}
    fill = "cv" if value else literal(call.attr("value", 0))
    size = size_of(in_shape)
    sdfg, state = op_sdfg(call, "pad", {x: (size,)})
    source = [f"i{k} - {begin}" if begin else f"i{k}" for k, (begin, _) in enumerate(pads)]
    if size == 0:
        if mode != "constant":
            raise call.fail(f"{mode} padding of an empty tensor has nothing to repeat")
        code = fill
    elif mode == "constant":
        inside = [f"{j} >= 0 and {j} < {n}" for j, n, p in zip(source, in_shape, pads) if any(p)]
        read = f"src[{offset(source, in_shape)}]"
        code = f"({read} if {' and '.join(inside)} else {fill})" if inside else read
    else:
        source = [_pad_source(mode, j, n) if any(p) else j
                  for j, n, p in zip(source, in_shape, pads)]
        code = f"src[{offset(source, in_shape)}]"
    if size:
        reads["src"] = whole(x, (size,))
    element_map(state, "pad", y, out_shape, code, reads)
    return sdfg
