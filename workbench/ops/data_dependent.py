"""Ops whose output size depends on the data: Unique, NonMaxSuppression, NonZero, and a
Slice of run-time starts and ends.

Each runs as one C++ tasklet over whole arrays. The output arrays hold as
many rows as the import found: the exact count when the inputs are known
at import, or an upper bound (the ``*Bounded`` op types, with a second
output the kernel writes the count to, which the runner trims by; see
importer/data_dependent.py). A kernel writes at most that many rows and
sets the rows it leaves (NMS, NonZero) to -1; it never writes out of bounds.
"""
import dace

from workbench.ops.index_maps import size_of
from workbench.ops.registry import connector_sdfg, implements


def _kernel(call, label: str, code: str):
    """An SDFG with one C++ tasklet that takes every connector as a pointer (``__<conn>``)."""
    sdfg, state = connector_sdfg(call, label)
    ins = [c for c in call.node.onnx_inputs if c]
    outs = [c for c in call.node.onnx_outputs if c]
    tasklet = state.add_tasklet(label, {f"__{c}": dace.pointer(sdfg.arrays[c].dtype) for c in ins},
                                {f"__{c}": dace.pointer(sdfg.arrays[c].dtype) for c in outs},
                                code, language=dace.Language.CPP)
    for c in ins:
        state.add_edge(state.add_read(c), None, tasklet, f"__{c}",
                       dace.Memlet.from_array(c, sdfg.arrays[c]))
    for c in outs:
        state.add_edge(tasklet, f"__{c}", state.add_write(c), None,
                       dace.Memlet.from_array(c, sdfg.arrays[c]))
    return sdfg


def _check_shapes(call, expected: dict) -> None:
    """The kernels index whole arrays by these shapes: anything else is refused."""
    for conn, shape in expected.items():
        if size_of(shape) and tuple(call.shape(conn)) != tuple(shape):
            raise call.fail(f"output '{conn}' has shape {tuple(call.shape(conn))}, not "
                            f"{tuple(shape)}")


def _ctype(call, conn) -> str:
    return call.dtype(conn).ctype


# The reference's IoU test (onnx.reference, onnxruntime): in the boxes' own precision.
_SUPPRESS = """
auto suppress = [&](const T* a, const T* b) -> bool {
    T ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    if (CENTER) {
        ax0 = a[0] - a[2] / 2; ax1 = a[0] + a[2] / 2; ay0 = a[1] - a[3] / 2; ay1 = a[1] + a[3] / 2;
        bx0 = b[0] - b[2] / 2; bx1 = b[0] + b[2] / 2; by0 = b[1] - b[3] / 2; by1 = b[1] + b[3] / 2;
    } else {  // [y1, x1, y2, x2], either diagonal
        ax0 = std::min(a[1], a[3]); ax1 = std::max(a[1], a[3]);
        ay0 = std::min(a[0], a[2]); ay1 = std::max(a[0], a[2]);
        bx0 = std::min(b[1], b[3]); bx1 = std::max(b[1], b[3]);
        by0 = std::min(b[0], b[2]); by1 = std::max(b[0], b[2]);
    }
    T ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1);
    if (ix1 <= ix0) return false;
    T iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
    if (iy1 <= iy0) return false;
    T inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0) return false;
    T area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
    T uni = area_a + area_b - inter;
    if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
    return inter / uni > iou;
};
"""


@implements("NonMaxSuppression")
def non_max_suppression(call):
    """Per batch and class: the boxes above the score threshold by falling score (ties:
    lower index first), each kept unless its IoU with one kept before exceeds the
    threshold, at most ``max_output_boxes_per_class``; rows (batch, class, box)."""
    boxes, scores, y = call.input(0), call.input(1), call.output(0)
    nb, n, _ = call.shape(boxes)
    nc = call.shape(scores)[1]
    rows = call.shape(y)[0] if size_of(call.shape(y)) else 0
    max_out, iou, threshold = call.input(2), call.input(3), call.input(4)
    count = call.output(1)
    _check_shapes(call, {c: s for c, s in {y: (rows, 3), count: (1,)}.items() if c})
    code = f"""
typedef {_ctype(call, boxes)} T;
const bool CENTER = {int(call.attr("center_point_box", 0) == 1)};
long long max_out = {f"__{max_out}[0] > 0 ? __{max_out}[0] : 0" if max_out else "0"};
T iou = {f"__{iou}[0]" if iou else "0"};
{_SUPPRESS}
long long k = 0;
std::vector<int> cand, kept;
for (int b = 0; b < {nb}; ++b) {{
    const T* bx = __{boxes} + (long long)b * {n} * 4;
    for (int c = 0; c < {nc}; ++c) {{
        const T* s = __{scores} + ((long long)b * {nc} + c) * {n};
        cand.clear();
        kept.clear();
        for (int i = 0; i < {n}; ++i)
            if ({f"s[i] > __{threshold}[0]" if threshold else "true"}) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [&](int p, int q) {{  // NaN last
            return s[p] > s[q] || (!std::isnan(s[p]) && std::isnan(s[q])); }});
        for (int i : cand) {{
            if ((long long)kept.size() >= max_out) break;
            bool keep = true;
            for (int j : kept)
                if (suppress(bx + 4 * i, bx + 4 * j)) {{ keep = false; break; }}
            if (!keep) continue;
            kept.push_back(i);
            if (k < {rows}) {{
                __{y}[3 * k] = b; __{y}[3 * k + 1] = c; __{y}[3 * k + 2] = i;
            }}
            ++k;
        }}
    }}
}}
for (long long r = k; r < {rows}; ++r)
    __{y}[3 * r] = __{y}[3 * r + 1] = __{y}[3 * r + 2] = -1;
{f"__{count}[0] = k < {rows} ? k : {rows};" if count else ""}
"""
    return _kernel(call, "non_max_suppression", code)


@implements("NonMaxSuppressionBounded", internal=True)
def non_max_suppression_bounded(call):
    """NonMaxSuppression into as many rows as it can keep at most, and the count it kept
    (output 1): the importer's bound for scores known only at run time (importer/
    data_dependent.py); the runner keeps the first ``count`` rows."""
    return non_max_suppression(call)


@implements("NonZeroBounded", internal=True)
def non_zero_bounded(call):
    """The coordinates of the nonzero elements, in row-major order, into an output with at
    least a column per element of the input, and how many there are (output 1)."""
    x, y, count = call.input(0), call.output(0), call.output(1)
    shape = call.shape(x)
    n = size_of(shape)
    if not shape:
        raise call.fail("a 0-d input")
    cols = call.shape(y)[1] if len(call.shape(y)) == 2 else 0
    _check_shapes(call, {y: (len(shape), max(cols, n)), count: (1,)})
    unravel = "\n".join(f"    __{y}[{d} * {cols} + k] = (i / {size_of(shape[d + 1:])})"
                        f" % {shape[d]};" for d in range(len(shape)))
    code = f"""
long long k = 0;
for (long long i = 0; i < {n}; ++i) {{
    if (!(__{x}[i] != 0)) continue;
{unravel}
    ++k;
}}
for (long long j = k; j < {cols}; ++j)
    for (int d = 0; d < {len(shape)}; ++d) __{y}[d * {cols} + j] = -1;
__{count}[0] = k;
"""
    return _kernel(call, "non_zero", code)


@implements("Unique")
def unique(call):
    """Unique slices along ``axis`` (elements when it is absent), sorted or in order of
    first occurrence, with their first indices, the inverse map and the counts. NaNs
    are one value, after every number, as numpy and onnx.reference have it (onnxruntime
    1.2x leaves them out of Y: the spec says nothing)."""
    x = call.input(0)
    shape = call.shape(x)
    axis = call.attr("axis")
    if axis is None:
        outer, n, inner = 1, size_of(shape), 1
    else:
        axis = axis + len(shape) if axis < 0 else axis
        outer, n, inner = size_of(shape[:axis]), shape[axis], size_of(shape[axis + 1:])
    y, first, inverse, counts, count = (call.output(k) for k in range(5))
    rows = call.shape(y)[axis or 0] if size_of(call.shape(y)) else 0
    y_shape = (rows,) if axis is None else shape[:axis] + (rows,) + shape[axis + 1:]
    expect = {y: y_shape, first: (rows,), counts: (rows,), inverse: (n,), count: (1,)}
    _check_shapes(call, {c: s for c, s in expect.items() if c})
    code = f"""
typedef {_ctype(call, x)} T;
const long long OUTER = {outer}, N = {n}, INNER = {inner}, ROWS = {rows};
auto at = [&](long long o, long long r, long long i) {{ return __{x}[(o * N + r) * INNER + i]; }};
auto less = [&](long long p, long long q) {{  // slice p before slice q, lexicographically
    for (long long o = 0; o < OUTER; ++o)
        for (long long i = 0; i < INNER; ++i) {{
            T a = at(o, p, i), b = at(o, q, i);   // NaN after every number, equal to NaN
            bool na = std::isnan((double)a), nb = std::isnan((double)b);
            if (na || nb) {{ if (na != nb) return nb; continue; }}
            if (a < b) return true;
            if (b < a) return false;
        }}
    return false;
}};
std::vector<long long> order(N), group_of(N), start, count;
for (long long r = 0; r < N; ++r) order[r] = r;
std::stable_sort(order.begin(), order.end(), less);
for (long long k = 0; k < N; ++k) {{   // runs of equal slices; a run's first is its first index
    if (k == 0 || less(order[k - 1], order[k])) {{ start.push_back(order[k]); count.push_back(0); }}
    group_of[order[k]] = (long long)start.size() - 1;
    ++count.back();
}}
std::vector<long long> pos(start.size());   // output position of each run
for (long long g = 0; g < (long long)start.size(); ++g) pos[g] = g;
if (!{int(call.attr("sorted", 1))}) {{
    std::vector<long long> by_first(start.size());
    for (long long g = 0; g < (long long)start.size(); ++g) by_first[g] = g;
    std::sort(by_first.begin(), by_first.end(),
              [&](long long p, long long q) {{ return start[p] < start[q]; }});
    for (long long k = 0; k < (long long)by_first.size(); ++k) pos[by_first[k]] = k;
}}
for (long long g = 0; g < (long long)start.size(); ++g) {{
    long long k = pos[g];
    if (k >= ROWS) continue;
    for (long long o = 0; o < OUTER; ++o)
        for (long long i = 0; i < INNER; ++i)
            __{y}[(o * ROWS + k) * INNER + i] = at(o, start[g], i);
    {f"__{first}[k] = start[g];" if first else ""}
    {f"__{counts}[k] = count[g];" if counts else ""}
}}
{f"for (long long r = 0; r < N; ++r) __{inverse}[r] = pos[group_of[r]];" if inverse else ""}
{f"__{count}[0] = (long long)start.size();" if count else ""}
"""
    return _kernel(call, "unique", code)


@implements("UniqueBounded", internal=True)
def unique_bounded(call):
    """Unique into outputs as long as the input along the axis, and the number of distinct
    slices (output 4): the importer's bound for data known only at run time."""
    return unique(call)


def unique_numpy(attrs: dict, x) -> list:
    """Unique by the spec, for values known at import (importer/fold.py). onnx.reference
    (1.23) gathers the unsorted result along axis 0 whatever the axis, and returns it sorted
    when Y is the only output."""
    import numpy as np
    axis = attrs.get("axis")
    data = x.ravel() if axis is None else x
    # without an axis numpy counts all NaNs as one value, as the kernel does
    _, first, inverse, counts = np.unique(data, True, True, True,
                                          axis=None if axis is None else axis % x.ndim)
    axis = 0 if axis is None else axis % x.ndim
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
    y = np.take(data, first, axis=axis)
    return [y] + [np.asarray(v, dtype=np.int64) for v in (first, inverse, counts)]


@implements("SliceBounded", internal=True)
def slice_bounded(call):
    """Slice of starts and ends known only at run time, along one axis with step 1
    (importer/counted.py checks that): the rows ``clamp(start)..clamp(end)`` of the input
    into the leading rows of an output as long as the bound, and how many (output 1).
    Negative indices count from the end and both are clamped to the axis, as the ONNX spec
    has it; the rows past the count are zeros."""
    x, y, count = call.input(0), call.output(0), call.output(1)
    starts, ends = call.input(1), call.input(2)
    shape, out = tuple(call.shape(x)), tuple(call.shape(y))
    axis = _slice_axis(call, len(shape))
    outer, d, inner = size_of(shape[:axis]), shape[axis], size_of(shape[axis + 1:])
    rows = out[axis] if len(out) == len(shape) else 0
    # without a count output where another Slice of the same bounds counts (importer/counted)
    _check_shapes(call, {y: shape[:axis] + (max(rows, d),) + shape[axis + 1:], count: (1,)}
                  if count else {y: shape[:axis] + (max(rows, d),) + shape[axis + 1:]})
    code = f"""
const long long D = {d}, ROWS = {rows}, OUTER = {outer}, INNER = {inner};
auto clamp = [&](long long v) {{ if (v < 0) v += D; return v < 0 ? 0 : (v > D ? D : v); }};
long long s = clamp((long long)__{starts}[0]), e = clamp((long long)__{ends}[0]);
long long n = e > s ? e - s : 0;
for (long long o = 0; o < OUTER; ++o)
    for (long long r = 0; r < ROWS; ++r)
        for (long long i = 0; i < INNER; ++i)
            __{y}[(o * ROWS + r) * INNER + i] = r < n ? __{x}[(o * D + s + r) * INNER + i] : 0;
{f"__{count}[0] = n;" if count else ""}
"""
    return _kernel(call, "slice_bounded", code)


def _slice_axis(call, rank: int) -> int:
    if call.input(3) is None:
        return 0
    axis = int(call.require_const(3, "axes").ravel()[0])
    return axis + rank if axis < 0 else axis
