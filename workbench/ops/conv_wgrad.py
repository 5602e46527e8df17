"""A convolution whose kernel is larger than its result, on oneDNN's backward-weights primitive.

A training program computes a Conv's weight gradient as another Conv
(``workbench/training/rules/pooling.py``): the input, batch and channels
swapped, correlated with dY as the kernel. As a forward convolution that is
a kernel of the activations' size sliding over a few positions, which the
library runs on slow generic loops (and packs the kernel anew each step).
The same sum is what the backward-weights primitive is built for:

    Conv(A, B)[a, b, r] = sum over i, t of A[a, g*N + i, r*sd + t*dd - p] * B[b, i, t]

is ``diff_w`` of a convolution with ``src[i, g*C + a] = A[a, g*N + i]``,
``diff_dst[i, b] = B[b, i]``, stride ``dd`` and dilation ``sd`` (the Conv's
dilation and stride exchanged), and ``diff_w[g, m, a, r] = Y[a, g*M/G + m, r]``.
Each is a view of the Conv's own arrays at other strides, so nothing is
copied around the call beyond the library's own reorders. Grouped
correlations need ``A``'s per-group channels to form one axis: one channel
per group (depthwise) or one group.
"""
import math

import dace

from workbench.build import onednn
from workbench.ops.registry import is_row_major
from workbench.ops.symbolic_sizes import sized
from workbench.ops.window import sliding_window


def is_correlation(call, w, y) -> bool:
    """A Conv whose kernel covers more positions than its result (a weight gradient)."""
    try:
        return bool(math.prod(call.shape(w)[2:]) > math.prod(call.shape(y)[2:]))
    except TypeError:   # symbolic sizes that do not order: leave it to the forward form
        return False


def check_operands(call, x, w, y, packed: bool) -> int:
    """The spatial rank of a convolution the shim can run on these tensors (raises
    call.fail where it cannot): 1 to 3 spatial dimensions, float32, and row-major weights
    where the library ``packed`` them (a correlation's kernel is read at any strides)."""
    nsp = len(call.shape(x)) - 2
    if not 1 <= nsp <= 3:
        raise call.fail(f"oneDNN convolutions have 1 to 3 spatial dimensions, not {nsp}")
    if any(call.dtype(c) != dace.float32 for c in (x, w, y)):
        raise call.fail("the oneDNN implementation is float32 only")
    if packed and not is_row_major(call._desc(w)):
        raise call.fail("the weights are a strided view: the library packs them row-major")
    return nsp


def wgrad_desc(call, x, w, y) -> "onednn.WGradDesc":
    """The Conv(x, w) -> y as the shim's weight-gradient descriptor (raises call.fail where
    it has none)."""
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    nsp = check_operands(call, x, w, y, packed=False)
    groups = int(call.attr("group", 1))
    per_group = xs[0]           # the correlation's ``a``: channels of src per group
    if groups > 1 and per_group != 1:
        raise call.fail("a grouped correlation with several channels per group")
    win = sliding_window(call, xs, ys, ws[2:])
    xst, wst, yst = (tuple(sized(s) for s in call._desc(c).strides) for c in (x, w, y))
    d = onednn.WGradDesc()
    d.nsp, d.groups = nsp, groups
    size = onednn.set_size
    for f, v in (("n", ws[1]), ("c", groups * per_group), ("m", ws[0])):
        size(d, f, v)
    for i in range(nsp):
        dd, sd, begin = win.dilations[i], win.strides[i], win.begin[i]
        # the right pad that the taps actually reach: oneDNN wants the sizes to agree exactly
        end = (ws[2 + i] - 1) * dd + (ys[2 + i] - 1) * sd + 1 - xs[2 + i] - begin
        for f, v in (("in_", xs[2 + i]), ("out", ws[2 + i]), ("k", ys[2 + i]), ("stride", dd),
                     ("dil", sd), ("pad_l", begin), ("pad_r", end)):
            size(d, f, v, i)
    src = (xst[1], ws[1] * xst[1] if groups > 1 else xst[0]) + xst[2:]
    for i, s in enumerate(src):
        size(d, "src_strides", s, i)
    for i, s in enumerate((wst[1], wst[0]) + wst[2:]):
        size(d, "diff_dst_strides", s, i)
    per_out = ws[0] // groups
    for i, s in enumerate((per_out * yst[1], yst[1], yst[0]) + yst[2:]):
        size(d, "diff_w_strides", s, i)
    return d
