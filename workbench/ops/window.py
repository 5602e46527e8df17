"""Sliding-window geometry shared by Conv, ConvTranspose and the pools.

A window op reads, for output position ``o`` and kernel tap ``k`` along a
spatial dim, the input at ``o * stride + k * dilation - begin``. Here the
input is first copied into a padded transient (filled with the op's
neutral value), so the inner maps index it as ``o * stride + k * dilation``
with no bounds checks and memlets that say exactly what is read.
Output shapes always come from the node (shape inference fixed them), so
``ceil_mode`` needs nothing here beyond a padded extent that covers it.
"""
from dataclasses import dataclass

import dace

from workbench.build.settings import transient_storage
from workbench.ops.registry import mapped_tasklet
from workbench.ops.simd import row_loop


@dataclass
class Window:
    kernel: tuple     # kernel extent per spatial dim
    strides: tuple
    dilations: tuple
    begin: tuple      # padding before each spatial dim, auto_pad resolved
    end: tuple        # padding after each spatial dim (for count_include_pad)
    in_shape: tuple   # spatial input extent
    out_shape: tuple  # spatial output extent

    @property
    def nsp(self) -> int:
        return len(self.kernel)

    def padded_shape(self) -> tuple:
        """Extent of the padded input that every window position stays inside."""
        return tuple(_larger(i + b, (o - 1) * s + (k - 1) * d + 1)
                     for i, b, o, s, k, d in zip(self.in_shape, self.begin, self.out_shape,
                                                 self.strides, self.kernel, self.dilations))

    def taps(self, out_vars, ker_vars) -> list:
        """Padded-input coordinate per spatial dim for (output, kernel) variables."""
        return [f"{o} * {s} + {k} * {d}"
                for o, k, s, d in zip(out_vars, ker_vars, self.strides, self.dilations)]

    def inside(self, out_vars, ker_vars, include_pad: bool = False) -> str:
        """Tasklet condition: the tap lies in the input (or in its explicit pads)."""
        terms = []
        for tap, b, e, n in zip(self.taps(out_vars, ker_vars), self.begin, self.end,
                                self.in_shape):
            lo, hi = (0, b + n + e) if include_pad else (b, b + n)
            terms.append(f"({tap} >= {lo}) and ({tap} < {hi})")
        return " and ".join(terms) or "True"


def _larger(a, b):
    """max(a, b) of sizes: decided at import where it can be; a symbolic size after a
    strided window (``int_floor``) may not order, and the generated code then takes the
    larger."""
    try:
        return max(a, b)
    except TypeError:
        import sympy
        return sympy.Max(a, b)


def sliding_window(call, x_shape, y_shape, kernel) -> Window:
    """Strides, dilations and pads of a Conv/pool node, with auto_pad resolved."""
    nsp = len(x_shape) - 2
    strides = tuple(call.attr("strides") or [1] * nsp)
    dil = tuple(call.attr("dilations") or [1] * nsp)
    pads = call.attr("pads") or [0] * (2 * nsp)
    auto = call.attr("auto_pad", "NOTSET")
    ins, outs = tuple(x_shape[2:]), tuple(y_shape[2:])
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (o - 1) * s + (k - 1) * d + 1 - i)
                 for i, o, s, k, d in zip(ins, outs, strides, kernel, dil)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin)]
    elif auto == "VALID":
        begin = end = [0] * nsp
    else:
        begin, end = pads[:nsp], pads[nsp:]
    return Window(tuple(kernel), strides, dil, tuple(begin), tuple(end), ins, outs)


def padded_input(sdfg, state, x: str, x_shape, win: Window, fill: str) -> str:
    """Name of ``x`` seen through ``win``'s padding, filled with ``fill``.

    Adds the states that build a padded transient before ``state`` when the
    window reaches outside ``x``; returns ``x`` itself when it does not.
    """
    padded = win.padded_shape()
    if padded == tuple(x_shape[2:]) and not any(win.begin):
        return x
    name = f"{x}_padded"
    dtype = sdfg.arrays[x].dtype
    sdfg.add_transient(name, (x_shape[0], x_shape[1], *padded), dtype,
                       storage=transient_storage())
    outer = spatial_vars("s", win.nsp - 1)
    fill_state = sdfg.add_state_before(state, "pad_fill")
    row_map(fill_state, "pad_fill", image_ranges(x_shape[:2], outer, padded[:-1]), {},
            {"o": f"{name}[n, c, {', '.join(outer + [f'0:{padded[-1]}'])}]"}, "o[j_]", fill,
            padded[-1], dtype)
    copy_state = sdfg.add_state_after(fill_state, "pad_copy")
    begin, width = win.begin[-1], x_shape[-1]
    shifted = [f"{s} + {b}" for s, b in zip(outer, win.begin)]
    row_map(copy_state, "pad_copy", image_ranges(x_shape[:2], outer, x_shape[2:-1]),
            {"v": f"{x}[n, c, {', '.join(outer + [f'0:{width}'])}]"},
            {"o": f"{name}[n, c, {', '.join(shifted + [f'{begin}:{begin + width}'])}]"},
            "o[j_]", "v[j_]", width, dtype)
    return name


def row_map(state, label, ranges, inputs, outputs, target, expr, n, dtype):
    """OpenMP over ``ranges``; each iteration one vectorized C++ loop ``target = expr``
    over a row of ``n`` (connectors are row pointers or scalars; memlets as text)."""
    if n == 1:  # DaCe passes a one-element memlet as a scalar, not a pointer
        target, expr = target.replace("[j_]", ""), expr.replace("[j_]", "")
    _, entry, _ = mapped_tasklet(
        state, label, ranges, {c: dace.Memlet(m) for c, m in inputs.items()},
        row_loop([(target, expr)], dtype.ctype, n, outputs=set(outputs)),
        {c: dace.Memlet(m) for c, m in outputs.items()}, language=dace.Language.CPP)
    entry.map.collapse = len(ranges)
    return entry


def spatial_vars(prefix: str, n: int) -> list:
    return [f"{prefix}{d}" for d in range(n)]


def ranges(names, extents) -> dict:
    return {v: f"0:{n}" for v, n in zip(names, extents)}


def image_ranges(shape, spatial_names, spatial=None, channel: str = "c") -> dict:
    """Map ranges over (n, channel, spatial...) of ``shape``; ``spatial`` overrides its extents."""
    extents = shape[2:] if spatial is None else spatial
    return {"n": f"0:{shape[0]}", channel: f"0:{shape[1]}", **ranges(spatial_names, extents)}
