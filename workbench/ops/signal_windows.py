"""The spectral windows (Hann, Hamming, Blackman) and MelWeightMatrix.

Their sizes are inputs that shape the output, so they must be constants
known at import (the backend binds small inputs as such); the values are
then computed by one parallel map over the output, in double precision,
and stored in the output's type (``output_datatype``).

A window of size N is w[n] = f(2 pi n / M), M = N when ``periodic``
(the default) and N - 1 otherwise, as in the spec and torch.
MelWeightMatrix (num_spectrogram_bins = dft_length/2 + 1, num_mel_bins)
holds one triangle per mel bin between three frequency bins spaced evenly
on the mel scale (2595 log10(1 + f / 700)), each rounded down to an index
of the DFT.
"""
import dace

from workbench.ops.index_maps import check_shape, index_map, op_sdfg
from workbench.ops.registry import implements, np_dtype

WINDOWS = {
    "HannWindow": "sin(__t / 2.0) * sin(__t / 2.0)",
    "HammingWindow": f"{25.0 / 46.0!r} - {21.0 / 46.0!r} * cos(__t)",
    "BlackmanWindow": "0.42 - 0.5 * cos(__t) + 0.08 * cos(2.0 * __t)",
}


def _int_const(call, position: int, what: str) -> int:
    value = call.require_const(position, what)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise call.fail(f"{what} must be one integer, got {value.dtype} of shape "
                        f"{list(value.shape)}")
    return int(value.ravel()[0])


def _float_output(call, conn):
    if np_dtype(call.dtype(conn)).kind != "f":
        raise call.fail(f"output type {np_dtype(call.dtype(conn))}: only floating-point "
                        "outputs are supported")


@implements(*WINDOWS)
def window(call):
    y = call.output(0)
    size = _int_const(call, 0, "size")
    if size < 1:
        raise call.fail(f"window size {size} is not positive")
    _float_output(call, y)
    check_shape(call, y, (size,))
    period = size if call.attr("periodic", 1) else size - 1
    sdfg, state = op_sdfg(call, call.op_type.lower())
    # A symmetric window of one sample divides 0 by 0 (NaN), as the spec's formula does.
    index_map(state, "window", (size,), {},
              f"__t = 6.283185307179586 * i0 / {float(period)!r}\no = {WINDOWS[call.op_type]}",
              {"o": dace.Memlet(f"{y}[i0]")})
    return sdfg


@implements("MelWeightMatrix")
def mel_weight_matrix(call):
    y = call.output(0)
    mels = _int_const(call, 0, "num_mel_bins")
    length = _int_const(call, 1, "dft_length")
    rate = _int_const(call, 2, "sample_rate")
    if mels < 1 or length < 1 or rate < 1:
        raise call.fail(f"num_mel_bins {mels}, dft_length {length}, sample_rate {rate}: "
                        "all must be positive")
    _float_output(call, y)
    bins = length // 2 + 1
    check_shape(call, y, (bins, mels))
    low, high = call.input(3), call.input(4)
    sdfg, state = op_sdfg(call, "mel_weight_matrix")
    ln10 = repr(2.302585092994046)

    def edge(k: str) -> str:
        """Frequency bin k of the num_mel_bins + 2 spaced evenly on the mel scale."""
        hertz = f"700.0 * expm1((__lo + {k} * __step) / 2595.0 * {ln10})"
        return f"floor({length + 1} * ({hertz}) / {rate})"

    # i0: spectrogram bin, i1: mel bin; the triangle rises over [f0, f1], falls over [f1, f2).
    code = f"""\
__lo = 2595.0 * log1p(low / 700.0) / {ln10}
__hi = 2595.0 * log1p(high / 700.0) / {ln10}
__step = (__hi - __lo) / {mels + 2}
__f0 = {edge('i1')}
__f1 = {edge('(i1 + 1)')}
__f2 = {edge('(i1 + 2)')}
__v = 0.0
if i0 >= __f0 and i0 <= __f1:
    __v = 1.0 if __f1 == __f0 else (i0 - __f0) / (__f1 - __f0)
if i0 >= __f1 and i0 < __f2:
    __v = (__f2 - i0) / (__f2 - __f1)
o = __v"""
    index_map(state, "mel_weight_matrix", (bins, mels),
              {"low": dace.Memlet(f"{low}[0]"), "high": dace.Memlet(f"{high}[0]")}, code,
              {"o": dace.Memlet(f"{y}[i0, i1]")})
    return sdfg
