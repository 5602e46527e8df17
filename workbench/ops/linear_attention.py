"""LinearAttention (opset 27): a recurrent state per (batch, KV head), updated token by token.

Q, K, V (and decay, beta) arrive packed as (B, T, heads * size); the state S
of each (b, kv head) is d_k x d_v. The update rules, with g the log-space
decay and beta the update rate:

- linear:      S = S + k v^T
- gated:       S = exp(g) S + k v^T
- delta:       S = S + k (beta (v - S^T k))^T
- gated_delta: S = exp(g) S, then the delta update on it

and every query head of the KV head's group reads ``scale * q^T S`` after
the token's update. The tokens depend on each other through S, so the
expansion is ONE map over (batch, KV head) whose C++ kernel runs the time
loop, with S in a local buffer of its own (registers and L1 for the sizes
models use) that only touches ``past_state``/``present_state`` at its ends;
no unrolled node per token. Each map point reads and writes only its own
head's columns (precise memlets), which the kernel indexes with the
arrays' strides from the subset's first element.
"""
import math

import dace

from workbench.build.settings import target
from workbench.ops.index_maps import check_shape, index_map, op_sdfg
from workbench.ops.registry import implements

RULES = ("linear", "gated", "delta", "gated_delta")
# States up to this many floats live on the kernel's stack (64 KiB: far below any
# OpenMP thread's stack); larger ones are allocated once per map point.
STACK_STATE_MAX = 16384


@implements("LinearAttention")
def linear_attention(call):
    if target() != "cpu":   # its kernel is a host loop, never built or checked for a device
        raise call.fail("LinearAttention has no GPU implementation yet; build for the CPU")
    query, key, value, past, decay, beta = (call.input(i) for i in range(6))
    out, present = call.output(0), call.output(1)
    rule = call.attr("update_rule", "gated_delta")
    if rule not in RULES:
        raise call.fail(f"update_rule={rule!r} is none of {', '.join(RULES)}")
    for conn in [c for c in (query, key, value, past, decay, beta, out, present) if c]:
        if call.dtype(conn) != dace.float32:
            raise call.fail(f"'{conn}' is {call.dtype(conn).to_string()}: this kernel "
                            "computes float32 tensors only")
    if not out and not present:
        raise call.fail("neither output nor present_state is used")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for name, conn, needed in (("decay", decay, gated), ("beta", beta, delta)):
        if needed and not conn:
            raise call.fail(f"update_rule {rule!r} requires the {name} input")
        if conn and not needed:
            raise call.fail(f"update_rule {rule!r} takes no {name} input")
    dims = _dims(call, query, key, value, decay, beta)
    nb, nt, hq, hkv, dk, dv = dims
    if past and call.shape(past) != (nb, hkv, dk, dv):
        raise call.fail(f"past_state {list(call.shape(past))} is not {[nb, hkv, dk, dv]}")
    if out:
        check_shape(call, out, (nb, nt, hq * dv))
    if present:
        check_shape(call, present, (nb, hkv, dk, dv))
    scale = float(call.attr("scale", 0.0) or 0.0) or 1.0 / math.sqrt(dk)
    group = hq // hkv

    sdfg, state = op_sdfg(call, "linear_attention")
    # Map point (i0, i1) = (batch entry, KV head): its own columns of every tensor.
    reads = {"_q": _rows(query, nt, f"i1 * {group * dk}", group * dk),
             "_k": _rows(key, nt, f"i1 * {dk}", dk),
             "_v": _rows(value, nt, f"i1 * {dv}", dv)}
    if past:
        reads["_p"] = dace.Memlet(f"{past}[i0, i1, 0:{dk}, 0:{dv}]")
    if decay:
        per_dim = call.shape(decay)[2] != hkv or dk == 1
        reads["_g"] = _rows(decay, nt, f"i1 * {dk}" if per_dim else "i1", dk if per_dim else 1)
    if beta:
        reads["_b"] = _rows(beta, nt, "0" if call.shape(beta)[2] == 1 else "i1", 1)
    writes = {}
    if out:
        writes["_o"] = _rows(out, nt, f"i1 * {group * dv}", group * dv)
    if present:
        writes["_s"] = dace.Memlet(f"{present}[i0, i1, 0:{dk}, 0:{dv}]")
    conns = {"_q": query, "_k": key, "_v": value, "_p": past, "_g": decay, "_b": beta,
             "_o": out, "_s": present}
    st = {c: [int(s) for s in call.inputs.get(a, call.outputs.get(a)).strides]
          for c, a in conns.items() if a}
    code = _kernel(st, nt, group, dk, dv, scale, rule,
                   per_dim=bool(decay) and (call.shape(decay)[2] != hkv or dk == 1))
    tasklet, entry, _ = index_map(state, "linear_attention", (nb, hkv), reads, code, writes,
                                  language=dace.Language.CPP)
    entry.map.collapse = 2   # the threads share out the heads even for a single sequence
    # Pointers even where a subset has one element (DaCe would pass that by value).
    for c in list(tasklet.in_connectors):
        tasklet.in_connectors[c] = dace.pointer(dace.float32)
    for c in list(tasklet.out_connectors):
        tasklet.out_connectors[c] = dace.pointer(dace.float32)
    return sdfg


def _dims(call, query, key, value, decay, beta):
    """(B, T, H_q, H_kv, d_k, d_v), every input's shape checked against them."""
    for name, conn in (("query", query), ("key", key), ("value", value)):
        if len(call.shape(conn)) != 3:
            raise call.fail(f"{name} {list(call.shape(conn))} is not (batch, tokens, "
                            "heads * size)")
    hq, hkv = int(call.attr("q_num_heads", 0)), int(call.attr("kv_num_heads", 0))
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise call.fail(f"q_num_heads={hq} is not a positive multiple of kv_num_heads={hkv}")
    nb, nt, qw = call.shape(query)
    if qw % hq or call.shape(value)[2] % hkv:
        raise call.fail(f"query width {qw} or value width {call.shape(value)[2]} does not "
                        f"split into {hq} / {hkv} heads")
    dk, dv = qw // hq, call.shape(value)[2] // hkv
    if call.shape(key) != (nb, nt, hkv * dk) or call.shape(value)[:2] != (nb, nt):
        raise call.fail(f"key {list(call.shape(key))} / value {list(call.shape(value))} do "
                        f"not match query {list(call.shape(query))}: key should be "
                        f"{[nb, nt, hkv * dk]}")
    if 0 in (nb, nt, dk, dv):
        raise call.fail(f"empty tensors (batch {nb}, tokens {nt}, d_k {dk}, d_v {dv})")
    for name, conn, lasts in (("decay", decay, (hkv, hkv * dk)), ("beta", beta, (hkv, 1))):
        if conn and (len(call.shape(conn)) != 3 or call.shape(conn)[:2] != (nb, nt)
                     or call.shape(conn)[2] not in lasts):
            raise call.fail(f"{name} {list(call.shape(conn))} is not "
                            f"{' or '.join(str([nb, nt, n]) for n in lasts)}")
    return nb, nt, hq, hkv, dk, dv


def _rows(conn, nt, start, width):
    """Map point (i0, i1)'s columns ``start .. start + width`` of every token."""
    cols = start if width == 1 else f"{start}:{start} + {width}"
    return dace.Memlet(f"{conn}[i0, 0:{nt}, {cols}]")


def _kernel(st, nt, group, dk, dv, scale, rule, per_dim):
    """C++ of one (batch, KV head): the state S[d][m] at ``S[d * dv + m]``."""
    def at(c, *index):   # element of a subset, through the array's strides
        terms = [i if s == 1 else f"({i}) * {s}" for i, s in zip(index, st[c][-len(index):])
                 if i != "0"]
        return f"{c}[{' + '.join(terms) or '0'}]"

    n = dk * dv
    lines = [f"float S_[{n}];" if n <= STACK_STATE_MAX
             else f"std::vector<float> S_v({n}); float* S_ = S_v.data();",
             f"float u_[{dv}], acc_[{dv}];",
             f"for (int d = 0; d < {dk}; ++d) for (int m = 0; m < {dv}; ++m)",
             f"    S_[d * {dv} + m] = {at('_p', '0', '0', 'd', 'm') if '_p' in st else '0.0f'};",
             f"for (int t = 0; t < {nt}; ++t) {{"]
    if rule in ("gated", "gated_delta"):
        if per_dim:
            lines += [f"    for (int d = 0; d < {dk}; ++d) {{",
                      f"        const float e = expf({at('_g', '0', 't', 'd')});",
                      f"        for (int m = 0; m < {dv}; ++m) S_[d * {dv} + m] *= e;",
                      "    }"]
        else:
            lines += [f"    const float e = expf({at('_g', '0', 't', '0')});",
                      f"    for (int i = 0; i < {n}; ++i) S_[i] *= e;"]
    if rule in ("delta", "gated_delta"):   # u = beta (v - S^T k)
        lines += [f"    for (int m = 0; m < {dv}; ++m) u_[m] = 0.0f;",
                  f"    for (int d = 0; d < {dk}; ++d) {{",
                  f"        const float kd = {at('_k', '0', 't', 'd')};",
                  f"        for (int m = 0; m < {dv}; ++m) u_[m] += S_[d * {dv} + m] * kd;",
                  "    }",
                  f"    const float bt = {at('_b', '0', 't', '0')};",
                  f"    for (int m = 0; m < {dv}; ++m) u_[m] = bt * ({at('_v', '0', 't', 'm')}"
                  " - u_[m]);"]
    else:
        lines.append(f"    for (int m = 0; m < {dv}; ++m) u_[m] = {at('_v', '0', 't', 'm')};")
    lines += [f"    for (int d = 0; d < {dk}; ++d) {{",
              f"        const float kd = {at('_k', '0', 't', 'd')};",
              f"        for (int m = 0; m < {dv}; ++m) S_[d * {dv} + m] += kd * u_[m];",
              "    }"]
    if "_o" in st:   # every query head of the group reads the updated state
        lines += [f"    for (int h = 0; h < {group}; ++h) {{",
                  f"        for (int m = 0; m < {dv}; ++m) acc_[m] = 0.0f;",
                  f"        for (int d = 0; d < {dk}; ++d) {{",
                  f"            const float qd = {at('_q', '0', 't', f'h * {dk} + d')};",
                  f"            for (int m = 0; m < {dv}; ++m) acc_[m] += qd * S_[d * {dv} + m];",
                  "        }",
                  f"        for (int m = 0; m < {dv}; ++m)",
                  f"            {at('_o', '0', 't', f'h * {dv} + m')} = {scale!r}f * acc_[m];",
                  "    }"]
    lines.append("}")
    if "_s" in st:
        lines += [f"for (int d = 0; d < {dk}; ++d) for (int m = 0; m < {dv}; ++m)",
                  f"    {at('_s', '0', '0', 'd', 'm')} = S_[d * {dv} + m];"]
    return "\n".join(lines)
