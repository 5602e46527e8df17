"""Ops that walk the lines along one axis: ArgMax/ArgMin, Hardmax, TopK, CumSum, CumProd.

The input is seen as (outer, n, inner): a line is ``x[o, 0:n, i]``. A
parallel map runs over the lines (or over their elements, for TopK) and a
tasklet walks one line; the walk is what these ops are defined by (first
or last best element, rank among the line, running sum).
"""
import math

import dace

from workbench.ops.reduce import attr_axis, refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet


def _lines(shape, axis, coerce_2d=False):
    """(outer, n, inner); ``coerce_2d``: everything from ``axis`` on is the line."""
    if coerce_2d:
        return math.prod(shape[:axis]), math.prod(shape[axis:]), 1
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


# ArgMax takes an element that is greater, ArgMin one that is less; with
# select_last_index an equal one too.
BETTER = {"ArgMax": ">", "ArgMin": "<"}


def _best_index(state, x, out, lines, better: str):
    """out[o, 0, i] = index of the best element of line (o, i)."""
    outer, n, inner = lines
    mapped_tasklet(state, "best", {"o": f"0:{outer}", "i": f"0:{inner}"},
                   {"line": dace.Memlet(f"{x}[o, 0:{n}, i]")},
                   f"best = 0\n"
                   f"for j in range(1, {n}):\n"
                   f"    if line[j] {better} line[best]:\n"
                   f"        best = j\n"
                   f"k = best",
                   {"k": dace.Memlet(f"{out}[o, 0, i]")})


@implements("ArgMax", "ArgMin")
def arg_best(call):
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    lines = _lines(shape, attr_axis(call, len(shape), 0))
    sdfg, state = connector_sdfg(call, call.op_type.lower(),
                                 {x: lines, y: (lines[0], 1, lines[2])})
    if math.prod(lines):
        better = BETTER[call.op_type] + ("=" if call.attr("select_last_index", 0) else "")
        _best_index(state, x, y, lines, better)
    return sdfg


@implements("Hardmax")
def hardmax(call):
    """1 at the first maximum of each line, 0 elsewhere (before opset 13 the
    line is everything from ``axis`` on)."""
    refuse_float16(call)
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    old = call.node.opset < 13
    lines = _lines(shape, attr_axis(call, len(shape), 1 if old else -1), coerce_2d=old)
    sdfg, state = connector_sdfg(call, "hardmax", {x: lines, y: lines})
    if not math.prod(lines):
        return sdfg
    sdfg.add_transient("argmax", (lines[0], 1, lines[2]), dace.int64)
    _best_index(state, x, "argmax", lines, ">")
    state = sdfg.add_state_after(state, "one_hot")
    outer, n, inner = lines
    mapped_tasklet(state, "one_hot", {"o": f"0:{outer}", "j": f"0:{n}", "i": f"0:{inner}"},
                   {"k": dace.Memlet(f"argmax[o, 0, i]")}, "v = 1 if j == k else 0",
                   {"v": dace.Memlet(f"{y}[o, j, i]")})
    return sdfg


@implements("TopK")
def top_k(call):
    """The k largest (or smallest) elements of each line, sorted, with their
    indices; equal values keep the lower index first. Each element finds its
    own rank (how many elements precede it) and, if below k, writes itself
    there."""
    x, values, indices = call.input(0), call.output(0), call.output(1)
    shape = call.shape(x)
    axis = attr_axis(call, len(shape), -1)
    outer, n, inner = _lines(shape, axis)
    k = call.shape(values)[axis]  # static: the output shape was inferred from K
    sdfg, state = connector_sdfg(call, "topk", {x: (outer, n, inner), values: (outer, k, inner),
                                                indices: (outer, k, inner)})
    if not outer * k * inner:
        return sdfg
    before = ">" if call.attr("largest", 1) else "<"
    mapped_tasklet(state, "rank", {"o": f"0:{outer}", "e": f"0:{n}", "i": f"0:{inner}"},
                   {"line": dace.Memlet(f"{x}[o, 0:{n}, i]"), "v": dace.Memlet(f"{x}[o, e, i]")},
                   f"r = 0\n"
                   f"for j in range({n}):\n"
                   f"    if line[j] {before} v or (line[j] == v and j < e):\n"
                   f"        r = r + 1\n"
                   f"if r < {k}:\n"
                   f"    top[r] = v\n"
                   f"    at[r] = e",
                   {"top": dace.Memlet(f"{values}[o, 0:{k}, i]", dynamic=True),
                    "at": dace.Memlet(f"{indices}[o, 0:{k}, i]", dynamic=True)})
    return sdfg


# Running op type -> (how a step combines, the value of an empty run)
RUNNING = {"CumSum": ("+", "0"), "CumProd": ("*", "1")}


@implements(*RUNNING)
def cumsum(call):
    """Running sums (products) along ``axis``; ``exclusive`` leaves the current
    element out, ``reverse`` runs from the end."""
    refuse_float16(call)
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    axis = int(call.require_const(1, "axis").ravel()[0])
    outer, n, inner = _lines(shape, axis + len(shape) if axis < 0 else axis)
    sdfg, state = connector_sdfg(call, "cumsum", {x: (outer, n, inner), y: (outer, n, inner)})
    if not outer * n * inner:
        return sdfg
    # Where the walk starts, where its t-th step is, and the step before it.
    if call.attr("reverse", 0):
        first, at, prev = n - 1, f"{n - 1} - t", f"{n} - t"
    else:
        first, at, prev = 0, "t", "t - 1"
    exclusive = call.attr("exclusive", 0)
    combine, empty = RUNNING[call.op_type]
    mapped_tasklet(state, "scan", {"o": f"0:{outer}", "i": f"0:{inner}"},
                   {"src": dace.Memlet(f"{x}[o, 0:{n}, i]")},
                   f"dst[{first}] = {empty if exclusive else f'src[{first}]'}\n"
                   f"for t in range(1, {n}):\n"
                   f"    dst[{at}] = dst[{prev}] {combine} src[{prev if exclusive else at}]",
                   {"dst": dace.Memlet(f"{y}[o, 0:{n}, i]")})
    return sdfg
