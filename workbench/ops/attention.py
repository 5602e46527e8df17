"""Attention (opset 23+) and RotaryEmbedding, decomposed into maps.

Attention, per (batch b, query head h, query i, key j), with g = h / (Hq / Hkv):

    S[b, h, i, j] = scale * sum_d Q[b, h, i, d] * K[b, g, j, d]   (qk_matmul_output mode 0)
    S = softcap * tanh(S / softcap)                              (mode 1, when softcap > 0)
    S = S + bias(b, h, i, j)                                     (mode 2)
    P = softmax_j(S), a zero row where every key is masked       (mode 3)
    Y[b, h, i, v] = sum_j P[b, h, i, j] * V[b, g, j, v]

K and V follow past_key/past_value when given (present = their concatenation).
The bias adds a float attn_mask, or -inf where a bool attn_mask is False,
a key lies past the causal frontier or outside the local window, or past
nonpad_kv_seqlen. Scores and softmax run in float32 for float16 inputs.
3-D Q/K/V/Y (batch, seq, heads * size) are seen as (batch, seq, heads, size).
"""
import dace
import numpy as np

from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.index_maps import whole
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype

_SUM, _MAX = "lambda a, b: a + b", "lambda a, b: max(a, b)"
_S = "scores[b, h, i, j]"
_PRECISION = {1: dace.float32, 11: dace.float64}  # softmax_precision (ONNX dtype codes)


class _Layout:
    """Where element (b, head, position, d) of a 3-D or 4-D attention tensor lives.

    A 3-D tensor (batch, seq, heads * size) holds head h's entries at h * size + d.
    """

    def __init__(self, conn, shape, heads):
        self.conn = conn
        self.split = len(shape) == 3
        if self.split:
            if not heads or shape[2] % heads:
                raise ValueError(f"{shape[2]} hidden entries do not split into {heads} heads")
            self.batch, self.seq, self.heads = shape[0], shape[1], heads
            self.size = shape[2] // heads
        else:
            self.batch, self.heads, self.seq, self.size = shape

    def at(self, b, h, s, d) -> str:
        if self.split:
            return f"{self.conn}[{b}, {s}, ({h}) * {self.size} + {d}]"
        return f"{self.conn}[{b}, {h}, {s}, {d}]"


@implements("Attention")
def attention(call):
    refuse_float16(call)
    q, k, v, y = call.input(0), call.input(1), call.input(2), call.output(0)
    mask, past_k, past_v, nonpad = call.input(3), call.input(4), call.input(5), call.input(6)
    present_k, present_v, qk_out = call.output(1), call.output(2), call.output(3)
    if np_dtype(call.dtype(q)).kind != "f":
        raise call.fail(f"attention over {np_dtype(call.dtype(q))} is not supported")
    try:
        Q = _Layout(q, call.shape(q), call.attr("q_num_heads", 0))
        K = _Layout(k, call.shape(k), call.attr("kv_num_heads", 0))
        V = _Layout(v, call.shape(v), call.attr("kv_num_heads", 0))
        Y = _Layout(y, call.shape(y), Q.heads)
    except ValueError as e:
        raise call.fail(str(e)) from None
    past = call.shape(past_k)[2] if past_k is not None else 0
    T = past + K.seq
    sdfg, state = connector_sdfg(call, "attention")
    acc = dace.float64 if dace.float64 in (call.dtype(q), _PRECISION.get(
        call.attr("softmax_precision"))) else dace.float32
    sdfg.add_transient("scores", (Q.batch, Q.heads, Q.seq, T), acc)
    for name in ("row_max", "row_sum"):
        sdfg.add_transient(name, (Q.batch, Q.heads, Q.seq), acc)
    # Keys and values over the total sequence: the past ones, then the new ones.
    keys = _concat(sdfg, state, past_k, K, present_k, "keys", T)
    values = _concat(sdfg, state, past_v, V, present_v, "values", T)
    group = f"int(h / {Q.heads // K.heads})"
    rows = {"b": f"0:{Q.batch}", "h": f"0:{Q.heads}", "i": f"0:{Q.seq}"}
    scores = {**rows, "j": f"0:{T}"}
    mode = call.attr("qk_matmul_output_mode", 0)
    qk_at = dace.Memlet(f"{qk_out}[b, h, i, j]") if qk_out is not None else None

    state = _zero(sdfg, state, "qk", scores, _S)
    mapped_reduction(state, "qk", scores, {"d": f"0:{Q.size}"}, {
        "a": dace.Memlet(Q.at("b", "h", "i", "d")),
        "c": dace.Memlet(keys.at("b", group, "j", "d"))}, "s = a * c",
        {"s": dace.Memlet(_S, wcr=_SUM)})

    # Scale, softcap and bias in one pass; qk_matmul_output taps the stage its mode names.
    scale, softcap = call.attr("scale") or 1.0 / np.sqrt(Q.size), call.attr("softcap", 0.0)
    bias, reads = _bias(call, mask, nonpad, Q, T, past)
    stages = [f"t0 = {scale} * s",
              f"t1 = {softcap} * tanh(t0 / {softcap})" if softcap > 0 else "t1 = t0",
              f"t2 = t1 + ({bias})", "o = t2"]
    outs = {"o": dace.Memlet(_S)}
    if qk_at is not None and mode < 3:
        outs["qk"], stages = qk_at, stages + [f"qk = t{mode}"]
    state = sdfg.add_state_after(state, "bias")
    parallel(mapped_tasklet(state, "bias", scores, {"s": dace.Memlet(_S), **reads},
                            "\n".join(stages), outs))

    state = _softmax(sdfg, state, rows, scores, qk_at if mode == 3 else None)

    state = _zero(sdfg, state, "pv", {**rows, "c": f"0:{V.size}"}, Y.at("b", "h", "i", "c"))
    mapped_reduction(state, "pv", {**rows, "c": f"0:{V.size}"}, {"j": f"0:{T}"}, {
        "p": dace.Memlet(_S), "x": dace.Memlet(values.at("b", group, "j", "c"))},
        "o = p * x", {"o": dace.Memlet(Y.at("b", "h", "i", "c"), wcr=_SUM)})
    return sdfg


def _softmax(sdfg, state, rows: dict, scores: dict, probabilities_out):
    """Softmax of the scores over j, in place; a row whose max is -inf (no key may be
    attended) becomes zeros."""
    row_max, row_sum = "row_max[b, h, i]", "row_sum[b, h, i]"
    state = sdfg.add_state_after(state, "max_init")
    parallel(mapped_tasklet(state, "max_init", rows, {}, "m = -inf",
                            {"m": dace.Memlet(row_max)}))
    state = sdfg.add_state_after(state, "max")
    mapped_reduction(state, "max", rows, {"j": scores["j"]}, {"s": dace.Memlet(_S)}, "m = s",
                     {"m": dace.Memlet(row_max, wcr=_MAX)})
    state = _zero(sdfg, state, "exp", rows, row_sum)
    mapped_reduction(state, "exp", rows, {"j": scores["j"]},
                     {"s": dace.Memlet(_S), "m": dace.Memlet(row_max)},
                     "e = exp(s - m) if m > -inf else 0\nz = e",
                     {"e": dace.Memlet(_S), "z": dace.Memlet(row_sum, wcr=_SUM)})
    state = sdfg.add_state_after(state, "normalize")
    outs, code = {"p": dace.Memlet(_S)}, "p = e / z if z > 0 else 0"
    if probabilities_out is not None:
        outs["qk"], code = probabilities_out, code + "\nqk = p"
    parallel(mapped_tasklet(state, "normalize", scores,
                            {"e": dace.Memlet(_S), "z": dace.Memlet(row_sum)}, code, outs))
    return state


def _zero(sdfg, state, label: str, ranges: dict, at: str):
    """A new state after ``state`` that zeroes ``at`` over ``ranges``, then one for the sum."""
    state = sdfg.add_state_after(state, f"{label}_init")
    parallel(mapped_tasklet(state, f"{label}_init", ranges, {}, "o = 0", {"o": dace.Memlet(at)}))
    return sdfg.add_state_after(state, label)


def _concat(sdfg, state, past, new: _Layout, present, name, total) -> _Layout:
    """Where (batch, kv head, total position, d) lives: present, a copy, or the new data."""
    if past is None and present is None:
        return new
    target = present
    if target is None:
        target = name
        sdfg.add_transient(name, (new.batch, new.heads, total, new.size),
                           sdfg.arrays[new.conn].dtype)
    n_past = total - new.seq
    ranges = {"b": f"0:{new.batch}", "h": f"0:{new.heads}", "d": f"0:{new.size}"}
    if n_past:
        parallel(mapped_tasklet(state, f"{name}_past", {**ranges, "t": f"0:{n_past}"},
                                {"v": dace.Memlet(f"{past}[b, h, t, d]")}, "o = v",
                                {"o": dace.Memlet(f"{target}[b, h, t, d]")}))
    parallel(mapped_tasklet(state, f"{name}_new", {**ranges, "t": f"0:{new.seq}"},
                            {"v": dace.Memlet(new.at("b", "h", "t", "d"))}, "o = v",
                            {"o": dace.Memlet(f"{target}[b, h, t + {n_past}, d]")}))
    return _Layout(target, (new.batch, new.heads, total, new.size), new.heads)


def _bias(call, mask, nonpad, Q: _Layout, T: int, past: int):
    """Tasklet code for the additive bias at (b, h, i, j), and the reads it needs."""
    terms, reads, disallowed = [], {}, []
    if nonpad is not None:
        reads["kv_len"] = dace.Memlet(f"{nonpad}[b]")
        disallowed.append("j >= kv_len")
    # The query's absolute position: past keys, or the keys before the block in an external cache.
    pos = f"i + {past}" if nonpad is None or past else f"i + kv_len - {Q.seq}"
    if call.attr("is_causal", 0):
        disallowed.append(f"j > {pos}")
    left, right = call.attr("left_window_size", -1), call.attr("right_window_size", -1)
    if left >= 0:
        disallowed.append(f"j < {pos} - {left}")
    if right >= 0:
        disallowed.append(f"j > {pos} + {right}")
    if mask is not None:
        shape = call.shape(mask)
        full = (Q.batch, Q.heads, Q.seq, T)[-len(shape):] if len(shape) <= 4 else None
        index = [("0" if n == 1 and n != f else p)
                 for n, f, p in zip(shape, full, ("b", "h", "i", "j")[-len(shape):])]
        if shape[-1] < T:  # opset 24: a short mask is padded with -inf
            disallowed.append(f"j >= {shape[-1]}")
        reads["mask"] = whole(mask, shape)
        value = f"mask[{', '.join(index)}]"
        if call.dtype(mask) == dace.bool_:
            disallowed.append(f"not {value}")
        else:
            terms.append(value)
    code = " + ".join(terms) or "0"
    if disallowed:
        code = f"-inf if ({' or '.join(f'({c})' for c in disallowed)}) else {code}"
    return code, reads


@implements("RotaryEmbedding")
def rotary_embedding(call):
    """Rotate pairs (x1, x2) of each head's first rotary_embedding_dim entries by the angle
    at the token's position: (x1 cos - x2 sin, x2 cos + x1 sin); the rest passes through."""
    refuse_float16(call)
    x, cos, sin, pos, y = (call.input(0), call.input(1), call.input(2), call.input(3),
                           call.output(0))
    xs = call.shape(x)
    heads = xs[1] if len(xs) == 4 else call.attr("num_heads", 0)  # 4-D: (b, heads, seq, size)
    try:
        X, Y = _Layout(x, xs, heads), _Layout(y, xs, heads)
    except ValueError as e:
        raise call.fail(str(e)) from None
    rot = call.attr("rotary_embedding_dim", 0) or X.size
    half = rot // 2
    sdfg, state = connector_sdfg(call, "rotary")
    ranges = {"b": f"0:{X.batch}", "h": f"0:{X.heads}", "s": f"0:{X.seq}"}
    first, second = ("2 * j", "2 * j + 1") if call.attr("interleaved", 0) else ("j", f"j + {half}")
    if pos is not None:
        rows = call.shape(cos)[0]
        reads = {"p": dace.Memlet(f"{pos}[b, s]"),
                 "cv": dace.Memlet(f"{cos}[0:{rows}, j]", volume=1),
                 "sv": dace.Memlet(f"{sin}[0:{rows}, j]", volume=1)}
        c, s_ = "cv[p]", "sv[p]"
    else:
        reads = {"cv": dace.Memlet(f"{cos}[b, s, j]"), "sv": dace.Memlet(f"{sin}[b, s, j]")}
        c, s_ = "cv", "sv"
    parallel(mapped_tasklet(state, "rotate", {**ranges, "j": f"0:{half}"}, {
        "x1": dace.Memlet(X.at("b", "h", "s", first)),
        "x2": dace.Memlet(X.at("b", "h", "s", second)), **reads},
        f"y1 = x1 * {c} - x2 * {s_}\ny2 = x2 * {c} + x1 * {s_}",
        {"y1": dace.Memlet(Y.at("b", "h", "s", first)),
         "y2": dace.Memlet(Y.at("b", "h", "s", second))}))
    if rot < X.size:
        parallel(mapped_tasklet(state, "pass", {**ranges, "d": f"{rot}:{X.size}"},
                                {"v": dace.Memlet(X.at("b", "h", "s", "d"))}, "o = v",
                                {"o": dace.Memlet(Y.at("b", "h", "s", "d"))}))
    return sdfg
