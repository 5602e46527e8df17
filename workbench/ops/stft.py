"""STFT: the short-time Fourier transform of a batch of signals, as direct sums.

The signal (batch, length, 1 real or 2 complex) is cut into frames of
``frame_length`` samples every ``frame_step``; each frame, times the window
(all ones when absent), is transformed by a direct DFT of its length. One
parallel map over (batch, frame, frequency) runs each sum sequentially in
double precision, the angle 2 pi (k n mod L) / L reduced before cos/sin as
in DFT. ``onesided`` (the default) keeps frequencies 0..L/2 (real signals
only). The step and the frame length shape the output: constants at import.
"""
import dace

from workbench.ops.flat_reads import at, flat_shapes, read_all
from workbench.ops.index_maps import check_shape, op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("STFT")
def stft(call):
    x, window, y = call.input(0), call.input(2), call.output(0)
    shape = call.shape(x)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("STFT is defined for floating-point signals only")
    if len(shape) != 3 or shape[2] not in (1, 2):
        raise call.fail(f"signal of shape {list(shape)}: (batch, length, 1 or 2) expected")
    batch, length, c = shape
    step = int(call.require_const(1, "frame_step").ravel()[0])
    frame = None
    if call.input(3):
        frame = int(call.require_const(3, "frame_length").ravel()[0])
    if window:
        if len(call.shape(window)) != 1 or (frame is not None and call.shape(window)[0] != frame):
            raise call.fail(f"window of shape {list(call.shape(window))} does not match "
                            f"frame_length {frame}")
        frame = call.shape(window)[0]
    if frame is None:
        frame = length
    if step < 1 or not 1 <= frame <= length:
        raise call.fail(f"frame_step {step} and frame_length {frame} do not fit a signal of "
                        f"length {length}")
    onesided = bool(call.attr("onesided", 1))
    if onesided and c == 2:
        raise call.fail("onesided output of a complex signal is not defined")
    frames = 1 + (length - frame) // step
    bins = frame // 2 + 1 if onesided else frame
    check_shape(call, y, (batch, frames, bins, 2))
    sdfg, state = op_sdfg(call, "stft", flat_shapes(call, x, window))
    sample = f"(b * {length} + f * {step} + __n) * {c}"
    real = at(call, x, sample)
    imag = at(call, x, f"{sample} + 1") if c == 2 else "0.0"
    weight = at(call, window, "__n") if window else "1.0"
    # (a + ib) e^{-it} = a cos t + b sin t + i (b cos t - a sin t)
    code = (f"__re = 0.0\n__im = 0.0\n"
            f"for __n in range({frame}):\n"
            f"    __t = 6.283185307179586 * ((k * __n) % {frame}) / {frame}\n"
            f"    __w = {weight}\n"
            f"    __xr = {real} * __w\n"
            f"    __xi = {imag} * __w\n"
            f"    __re = __re + __xr * cos(__t) + __xi * sin(__t)\n"
            f"    __im = __im + __xi * cos(__t) - __xr * sin(__t)\n"
            f"re = __re\nim = __im")
    mapped_tasklet(state, "stft", {"b": f"0:{batch}", "f": f"0:{frames}", "k": f"0:{bins}"},
                   read_all(call, x, window), code,
                   {"re": dace.Memlet(f"{y}[b, f, k, 0]"), "im": dace.Memlet(f"{y}[b, f, k, 1]")})
    return sdfg
