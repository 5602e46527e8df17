"""AffineGrid: the sampling grid of an affine transform, for GridSample.

``grid[n, (d,) h, w, c] = sum_k theta[n, c, k] * base_k + theta[n, c, last]``
with base = (x along w, y along h[, z along d]) in [-1, 1]: pixel centres
(``align_corners=0``, ``-1 + (2j + 1) / size``) or corners (``-1 + 2j / (size
- 1)``). One map over the grid, in double as the spec's reference computes.
"""
import dace

from workbench.ops.index_maps import op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


def base(j: str, size: int, align_corners: bool) -> str:
    """The normalized coordinate of index ``j`` along a dim of ``size``."""
    if align_corners:
        return "-1.0" if size == 1 else f"(-1.0 + 2.0 * {j} / {size - 1})"
    return f"(-1.0 + (2.0 * {j} + 1.0) / {size})"


@implements("AffineGrid")
def affine_grid(call):
    theta, y = call.input(0), call.output(0)
    if np_dtype(call.dtype(theta)).kind != "f":
        raise call.fail("AffineGrid is defined for floating-point theta only")
    size = [int(s) for s in call.require_const(1, "size").ravel()]
    spatial = size[2:]
    dims = len(spatial)
    n = size[0]
    if dims not in (2, 3) or call.shape(theta) != (n, dims, dims + 1):
        raise call.fail(f"theta {call.shape(theta)} and size {size}: need (N, 2, 3) with "
                        f"[N, C, H, W] or (N, 3, 4) with [N, C, D, H, W]")
    expected = (n, *spatial, dims)
    if call.shape(y) != expected:
        raise call.fail(f"output was given shape {call.shape(y)} at import, but the spec "
                        f"gives {expected}")
    sdfg, state = op_sdfg(call, "affine_grid")
    if not n * dims * (1 if 0 not in spatial else 0):
        return sdfg
    align = bool(call.attr("align_corners", 0))
    ps = [f"s{k}" for k in range(dims)]  # (d,) h, w
    coords = [base(p, s, align) for p, s in zip(ps, spatial)][::-1]  # x, y(, z)
    terms = " + ".join(f"t[{k}] * {c}" for k, c in enumerate(coords))
    mapped_tasklet(state, "affine_grid",
                   {"b": f"0:{n}", **{p: f"0:{s}" for p, s in zip(ps, spatial)}, "c": f"0:{dims}"},
                   {"t": dace.Memlet(f"{theta}[b, c, 0:{dims + 1}]")},
                   f"g = {terms} + t[{dims}]",
                   {"g": dace.Memlet(f"{y}[b, {', '.join(ps)}, c]")})
    return sdfg
