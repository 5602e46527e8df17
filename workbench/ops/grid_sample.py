"""GridSample: X sampled at the grid's normalized positions (2-D and 3-D).

One map over the output (n, c, spatial...); a C++ tasklet denormalizes the
grid point (``align_corners``), applies the padding mode to the coordinate
(border: clamp; reflection: fold back between the borders), then reads X:
nearest (half to even), linear over the 2^D corners or cubic (Keys, a =
-0.75) over the 4^D taps, each tap read with the padding mode again (zeros:
0 outside). As the spec's reference does, coordinates are kept in float.
Locals carry a ``__gs_`` prefix: after inlining they share a scope with the
model's array names.
"""
import math

import dace

from workbench.ops.index_maps import op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype

MODES = {"bilinear": "linear", "linear": "linear", "bicubic": "cubic", "cubic": "cubic",
         "nearest": "nearest"}
PADDING = ("zeros", "border", "reflection")

_REFLECT = """auto __gs_reflect = [](float __gs_v, float __gs_a, float __gs_b) -> float {
  const float __gs_rng = __gs_b - __gs_a;
  if (__gs_v < __gs_a) {
    const float __gs_dx = __gs_a - __gs_v;
    const int __gs_k = (int)(__gs_dx / __gs_rng);
    const float __gs_r = __gs_dx - __gs_k * __gs_rng;
    return (__gs_k % 2 == 0) ? __gs_a + __gs_r : __gs_b - __gs_r;
  }
  if (__gs_v > __gs_b) {
    const float __gs_dx = __gs_v - __gs_b;
    const int __gs_k = (int)(__gs_dx / __gs_rng);
    const float __gs_r = __gs_dx - __gs_k * __gs_rng;
    return (__gs_k % 2 == 0) ? __gs_b - __gs_r : __gs_a + __gs_r;
  }
  return __gs_v;
};
"""

# How one tap's index along dim __gs_d is made valid (zeros: the tap reads 0).
_TAP = {
    "zeros": "if (__gs_i < 0 || __gs_i >= __gs_sz[__gs_d]) return 0.0;",
    "border": "__gs_i = __gs_i < 0 ? 0 : (__gs_i >= __gs_sz[__gs_d] ? __gs_sz[__gs_d] - 1 "
              ": __gs_i);",
    "reflection": "__gs_i = (long)__gs_reflect((float)__gs_i, __gs_lo[__gs_d], "
                  "__gs_hi[__gs_d]);",
}

# How a coordinate outside the borders is brought back (zeros: left as is).
_COORD = {
    "zeros": "",
    "border": "__gs_x[__gs_d] = __gs_x[__gs_d] < 0 ? 0.0f : (__gs_x[__gs_d] > __gs_sz[__gs_d] "
              "- 1 ? (float)(__gs_sz[__gs_d] - 1) : __gs_x[__gs_d]);",
    "reflection": "__gs_x[__gs_d] = __gs_reflect(__gs_x[__gs_d], __gs_lo[__gs_d], "
                  "__gs_hi[__gs_d]);",
}

_SAMPLE = {
    "nearest": """long __gs_idx[{D}];
for (int __gs_d = 0; __gs_d < {D}; ++__gs_d) __gs_idx[__gs_d] = (long)__gs_x[__gs_d];
out = __gs_pixel(__gs_idx);""",
    "linear": """long __gs_base[{D}]; float __gs_w[{D}];
for (int __gs_d = 0; __gs_d < {D}; ++__gs_d) {{
  __gs_base[__gs_d] = (long)std::floor(__gs_x[__gs_d]);
  __gs_w[__gs_d] = __gs_x[__gs_d] - __gs_base[__gs_d];
}}
double __gs_acc = 0.0;
for (int __gs_t = 0; __gs_t < (1 << {D}); ++__gs_t) {{
  long __gs_idx[{D}]; double __gs_wt = 1.0;
  for (int __gs_d = 0; __gs_d < {D}; ++__gs_d) {{
    const int __gs_b = (__gs_t >> __gs_d) & 1;
    __gs_idx[__gs_d] = __gs_base[__gs_d] + __gs_b;
    __gs_wt *= __gs_b ? __gs_w[__gs_d] : 1.0f - __gs_w[__gs_d];
  }}
  __gs_acc += __gs_wt * __gs_pixel(__gs_idx);
}}
out = __gs_acc;""",
    "cubic": """long __gs_base[{D}]; double __gs_cf[{D}][4];
for (int __gs_d = 0; __gs_d < {D}; ++__gs_d) {{
  __gs_base[__gs_d] = (long)std::floor(__gs_x[__gs_d]);
  const double __gs_s = __gs_x[__gs_d] - __gs_base[__gs_d], __gs_A = -0.75;
  __gs_cf[__gs_d][0] = ((__gs_A * (__gs_s + 1) - 5 * __gs_A) * (__gs_s + 1) + 8 * __gs_A)
                       * (__gs_s + 1) - 4 * __gs_A;
  __gs_cf[__gs_d][1] = ((__gs_A + 2) * __gs_s - (__gs_A + 3)) * __gs_s * __gs_s + 1;
  __gs_cf[__gs_d][2] = ((__gs_A + 2) * (1 - __gs_s) - (__gs_A + 3)) * (1 - __gs_s)
                       * (1 - __gs_s) + 1;
  __gs_cf[__gs_d][3] = ((__gs_A * (2 - __gs_s) - 5 * __gs_A) * (2 - __gs_s) + 8 * __gs_A)
                       * (2 - __gs_s) - 4 * __gs_A;
}}
double __gs_acc = 0.0;
for (int __gs_t = 0; __gs_t < (1 << (2 * {D})); ++__gs_t) {{
  long __gs_idx[{D}]; double __gs_wt = 1.0;
  for (int __gs_d = 0; __gs_d < {D}; ++__gs_d) {{
    const int __gs_b = (__gs_t >> (2 * __gs_d)) & 3;
    __gs_idx[__gs_d] = __gs_base[__gs_d] - 1 + __gs_b;
    __gs_wt *= __gs_cf[__gs_d][__gs_b];
  }}
  __gs_acc += __gs_wt * __gs_pixel(__gs_idx);
}}
out = __gs_acc;""",
}


def _literal_list(values, ctype: str) -> str:
    return "{" + ", ".join(f"({ctype}){v!r}" for v in values) + "}"


@implements("GridSample")
def grid_sample(call):
    x, grid, y = call.input(0), call.input(1), call.output(0)
    xs, gs = call.shape(x), call.shape(grid)
    if np_dtype(call.dtype(x)).kind != "f" or np_dtype(call.dtype(grid)).kind != "f":
        raise call.fail("GridSample is defined for floating-point X and grid here")
    mode = MODES.get(call.attr("mode", "linear" if call.node.opset >= 20 else "bilinear"))
    padding = call.attr("padding_mode", "zeros")
    if mode is None or padding not in PADDING:
        raise call.fail(f"mode={call.attr('mode')!r} padding_mode={padding!r} is not supported")
    dims = len(xs) - 2
    if dims not in (2, 3) or len(gs) != dims + 2 or gs[-1] != dims or gs[0] != xs[0]:
        raise call.fail(f"X {xs} and grid {gs}: need (N, C, H, W) with (N, h, w, 2) or "
                        f"(N, C, D, H, W) with (N, d, h, w, 3)")
    expected = (xs[0], xs[1], *gs[1:-1])
    if call.shape(y) != expected:
        raise call.fail(f"output was given shape {call.shape(y)} at import, but the spec "
                        f"gives {expected}")
    sdfg, state = op_sdfg(call, "grid_sample")
    sizes = xs[2:]
    if not math.prod(expected) or not math.prod(sizes):
        if math.prod(expected):
            raise call.fail(f"X of shape {xs} has nothing to sample")
        return sdfg
    align = bool(call.attr("align_corners", 0))
    lo = [0.0 if align else -0.5 for _ in sizes]
    hi = [float(s - 1) if align else s - 0.5 for s in sizes]
    denorm = ("(__gs_v + 1) / 2.0f * (__gs_sz[__gs_d] - 1)" if align
              else "((__gs_v + 1) * __gs_sz[__gs_d] - 1) / 2.0f")
    rounding = "__gs_x[__gs_d] = std::nearbyint(__gs_x[__gs_d]);" if mode == "nearest" else ""
    code = "\n".join([
        f"const long __gs_sz[{dims}] = {_literal_list(sizes, 'long')};",
        f"const float __gs_lo[{dims}] = {_literal_list(lo, 'float')};",
        f"const float __gs_hi[{dims}] = {_literal_list(hi, 'float')};",
        _REFLECT,
        f"auto __gs_pixel = [&](const long* __gs_at) -> double {{",
        "  long __gs_off = 0;",
        f"  for (int __gs_d = 0; __gs_d < {dims}; ++__gs_d) {{",
        "    long __gs_i = __gs_at[__gs_d];",
        f"    {_TAP[padding]}",
        "    __gs_off = __gs_off * __gs_sz[__gs_d] + __gs_i;",
        "  }",
        "  return src[__gs_off];",
        "};",
        f"float __gs_x[{dims}];",
        f"for (int __gs_d = 0; __gs_d < {dims}; ++__gs_d) {{",
        f"  const float __gs_v = g[{dims - 1} - __gs_d];",  # the grid lists x (w) first
        f"  __gs_x[__gs_d] = {denorm};",
        f"  {rounding}",
        "  if (__gs_x[__gs_d] < __gs_lo[__gs_d] || __gs_x[__gs_d] > __gs_hi[__gs_d]) {",
        f"    {_COORD[padding]}",
        "  }",
        "}",
        _SAMPLE[mode].format(D=dims),
    ])
    out_ps = [f"p{k}" for k in range(dims)]
    mapped_tasklet(
        state, "grid_sample",
        {"n": f"0:{xs[0]}", "c": f"0:{xs[1]}", **{p: f"0:{s}" for p, s in zip(out_ps, gs[1:-1])}},
        {"src": dace.Memlet(f"{x}[n, c, {', '.join(f'0:{s}' for s in sizes)}]"),
         "g": dace.Memlet(f"{grid}[n, {', '.join(out_ps)}, 0:{dims}]")},
        code, {"out": dace.Memlet(f"{y}[n, c, {', '.join(out_ps)}]")},
        language=dace.Language.CPP)
    return sdfg
