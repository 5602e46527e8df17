"""DFT: the discrete Fourier transform along one axis, as a direct sum.

The signal is seen as (outer, n, inner, c): ``c`` is 1 (real) or 2 (real,
imaginary). One parallel map over the output's (outer, k, inner) runs a
sequential sum over the signal in double precision, with the angle
``2 pi (k n mod L) / L`` reduced before ``cos``/``sin`` so large products
lose nothing. O(L^2) per line: plain and exact, not an FFT.

``dft_length`` L zero-pads or truncates the signal. ``onesided`` keeps
frequencies 0..L/2 of a forward transform; with ``inverse`` it is the
inverse of a real signal's transform (irfft): the input holds frequencies
0..L/2, the rest is their conjugate mirror, the output is real (c = 1)
and, as numpy's irfft, the imaginary parts at 0 and L/2 are ignored.
"""
import math

import dace

from workbench.ops.index_maps import op_sdfg, whole
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("DFT")
def dft(call):
    x, y = call.input(0), call.output(0)
    shape = call.shape(x)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("DFT is defined for floating-point signals only")
    rank = len(shape)
    if call.node.opset >= 20:
        axis = int(call.require_const(2, "axis").ravel()[0]) if call.input(2) else -2
    else:
        axis = int(call.attr("axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise call.fail(f"axis {axis} is outside [-{rank}, -2] and [0, {rank - 2}]")
    axis %= rank
    c_in = shape[-1]
    if c_in not in (1, 2):
        raise call.fail(f"the last dim holds {c_in} values; 1 (real) or 2 (complex) expected")
    inverse, onesided = bool(call.attr("inverse", 0)), bool(call.attr("onesided", 0))
    m = shape[axis]
    length = None
    if call.input(1):
        length = int(call.require_const(1, "dft_length").ravel()[0])
    if length is None:
        length = 2 * (m - 1) if inverse and onesided else m
    if length < 1:
        raise call.fail(f"dft_length {length} is not positive")
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:-1])
    k_out = length // 2 + 1 if onesided and not inverse else length
    c_out = 1 if inverse and onesided else 2
    expected = tuple(shape[:axis]) + (k_out,) + tuple(shape[axis + 1:-1]) + (c_out,)
    if tuple(call.shape(y)) != expected:
        raise call.fail(f"output was given shape {call.shape(y)} at import, but the spec "
                        f"gives {expected}")
    size = outer * m * inner * c_in
    sdfg, state = op_sdfg(call, "dft", {x: (size,), y: (outer, k_out, inner, c_out)})
    if not outer * k_out * inner or not m:
        raise call.fail(f"empty signal or output (input {list(shape)})")
    # Flat positions in the input: DaCe indexes a multi-dim memlet by its non-unit dims,
    # which change with the shape; one flat index does not.
    at = f"((o * {m} + __n) * {inner} + i) * {c_in}"
    real, imag = f"src[{at}]", (f"src[{at} + 1]" if c_in == 2 else "0.0")
    angle = f"6.283185307179586 * ((k * __n) % {length}) / {length}"
    if inverse and onesided:
        code = _irfft(length, m, real, imag, angle)
    else:
        sign = "+" if inverse else "-"
        scale = f" / {length}" if inverse else ""
        # (a + ib) e^{sign i t} = a cos t - sign b sin t + i (b cos t + sign a sin t)
        code = (f"__re = 0.0\n__im = 0.0\n"
                f"for __n in range({min(m, length)}):\n"
                f"    __t = {angle}\n"
                f"    __a = {real}\n"
                f"    __b = {imag}\n"
                f"    __re = __re + __a * cos(__t) {'-' if sign == '+' else '+'} __b * sin(__t)\n"
                f"    __im = __im + __b * cos(__t) {sign} __a * sin(__t)\n"
                f"re = __re{scale}\nim = __im{scale}")
    writes = {"re": dace.Memlet(f"{y}[o, k, i, 0]")}
    if c_out == 2:
        writes["im"] = dace.Memlet(f"{y}[o, k, i, 1]")
    mapped_tasklet(state, "dft", {"o": f"0:{outer}", "k": f"0:{k_out}", "i": f"0:{inner}"},
                   {"src": whole(x, (size,))}, code, writes)
    return sdfg


def _irfft(length: int, m: int, real: str, imag: str, angle: str) -> str:
    """x[k] = (X0 + 2 sum_{0<j<L/2} Re(Xj e^{i t}) + [L even] X_{L/2} (-1)^k) / L, with
    frequencies past the input's ``m`` zero (``k`` is the output position here)."""
    mirrored = min(m, (length + 1) // 2)  # j in 1 .. ceil(L/2) - 1
    lines = [f"__re = {real.replace('__n', '0')}",
             f"for __n in range(1, {mirrored}):",
             f"    __t = {angle}",
             f"    __re = __re + 2.0 * ({real} * cos(__t) - {imag} * sin(__t))"]
    if length % 2 == 0 and length // 2 < m:
        nyquist = real.replace("__n", str(length // 2))
        lines.append(f"__re = __re + {nyquist} * (1.0 if k % 2 == 0 else -1.0)")
    lines.append(f"re = __re / {length}")
    return "\n".join(lines)
