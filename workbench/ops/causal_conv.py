"""CausalConvWithState: a depthwise causal 1-D convolution that carries its state.

The input (B, C, L) is seen left-padded with ``past_state`` (B, C, K-1),
zeros when absent; output (b, c, t) is the dot product of channel c's K taps
with padded positions t .. t+K-1, plus the bias, optionally through SiLU.
``present_state`` is the last K-1 padded positions. One parallel map over
(b, c, t) each: a padded position p reads ``past_state[p]`` below K-1 and
``input[p - (K-1)]`` from there, so the padded copy is never built.
"""
import dace

from workbench.ops.flat_reads import at, flat_shapes, read_all
from workbench.ops.index_maps import check_shape, index_map, op_sdfg
from workbench.ops.registry import implements, np_dtype

ACTIVATIONS = ("none", "silu", "swish")   # swish is the spec's alias of silu


@implements("CausalConvWithState")
def causal_conv_with_state(call):
    x, w, bias, past = (call.input(i) for i in range(4))
    y, present = call.output(0), call.output(1)
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("CausalConvWithState is defined for floating-point tensors only")
    activation = call.attr("activation", "none")
    if activation not in ACTIVATIONS:
        raise call.fail(f"activation={activation!r} is none of {', '.join(ACTIVATIONS)}")
    if len(call.shape(x)) != 3 or len(call.shape(w)) != 3:
        raise call.fail(f"input {list(call.shape(x))} and weight {list(call.shape(w))}: "
                        "(batch, channels, length) and (channels, 1, kernel) expected")
    nb, nc, length = call.shape(x)
    k = call.shape(w)[2]
    if call.shape(w)[:2] != (nc, 1):
        raise call.fail(f"weight {list(call.shape(w))} is not (channels={nc}, 1, kernel)")
    if bias and call.shape(bias) != (nc,):
        raise call.fail(f"bias {list(call.shape(bias))} is not (channels={nc},)")
    if past and call.shape(past) != (nb, nc, k - 1):
        raise call.fail(f"past_state {list(call.shape(past))} is not {[nb, nc, k - 1]}")
    if y:
        check_shape(call, y, (nb, nc, length))
    if present:
        check_shape(call, present, (nb, nc, k - 1))
    sdfg, state = op_sdfg(call, "causal_conv", flat_shapes(call, x, w, bias, past))

    def padded(p: str) -> str:
        """The padded input at position ``p`` of row (i0, i1)."""
        inside = at(call, x, f"(i0 * {nc} + i1) * {length} + {p} - {k - 1}")
        if k == 1:
            return inside
        before = at(call, past, f"(i0 * {nc} + i1) * {k - 1} + {p}") if past else "0.0"
        return f"({before} if {p} < {k - 1} else {inside})"

    reads = read_all(call, x, past)
    if y:
        lines = ["__s = 0.0",
                 f"for __j in range({k}):",
                 f"    __s = __s + {at(call, w, f'i1 * {k} + __j')} * {padded('i2 + __j')}"]
        if bias:
            lines.append(f"__s = __s + {at(call, bias, 'i1')}")
        if activation != "none":
            lines.append("__s = __s / (1.0 + exp(-__s))")
        lines.append("o = __s")
        index_map(state, "causal_conv", (nb, nc, length), {**reads, **read_all(call, w, bias)},
                  "\n".join(lines), {"o": _element(y)})
    if present:   # its own state: two maps reading one reshaped input trip DaCe's inlining
        state = sdfg.add_state_after(state, "present_state")
        index_map(state, "present_state", (nb, nc, k - 1), read_all(call, x, past),
                  f"o = {padded(f'i2 + {length}')}", {"o": _element(present)})
    return sdfg


def _element(conn):
    return dace.Memlet(f"{conn}[i0, i1, i2]")
