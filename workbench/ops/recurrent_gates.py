"""One time step of LSTM, GRU and RNN: the recurrent product, then the gates.

Each step's gates are one map over (direction, batch entry) whose C++ kernel
computes a row of hidden units, vectorized; the per-op-type code of one unit
comes from the ``*_code`` builders here.
"""
import dace

from workbench.ops.recurrent_activations import clamp
from workbench.ops.recurrent_products import PARALLEL_MIN_ELEMENTS, recurrent_gemm, scheduled
from workbench.ops.registry import mapped_tasklet
from workbench.ops.simd import SIMD_MATH, row_loop, substitute


def time_step(plan, sdfg, state, blas):
    """The loop body from ``state`` on; returns its last state."""
    call, D, N, H = plan.call, plan.D, plan.N, plan.H
    gh = plan.G if not (call.op_type == "GRU" and not plan.before_reset) else 2 * H
    sdfg.add_array("hr", (D, N, gh), plan.dtype, transient=True)
    state = recurrent_gemm(plan, sdfg, state, "hs", "hr", 0, gh, blas)
    gates = sdfg.add_state_after(state, "gates")
    if call.op_type == "GRU" and not plan.before_reset:
        # r * H first, then (r * H) @ Rh^T, then the candidate and the update
        sdfg.add_array("rh", (D, N, H), plan.dtype, transient=True)
        sdfg.add_array("zs", (D, N, H), plan.dtype, transient=True)
        sdfg.add_array("hrh", (D, N, H), plan.dtype, transient=True)
        gate_map(plan, gates, "reset", ["z", "r"], _gru_reset_code(plan),
                 {"zo": f"zs[d, b, 0:{H}]", "rho": f"rh[d, b, 0:{H}]"})
        second = sdfg.add_state_after(gates, "candidate_gemm")
        second = recurrent_gemm(plan, sdfg, second, "rh", "hrh", 2 * H, H, blas)
        gates = sdfg.add_state_after(second, "update")
        gates = gate_map(plan, gates, "update", ["h"], _gru_update_code(plan),
                         {"ho": f"hs[d, b, 0:{H}]"}, extra={"zz": f"zs[d, b, 0:{H}]"},
                         hr_array="hrh", hr_offset={"h": 0})
        return gates
    code, outs = {"LSTM": _lstm_code, "GRU": _gru_code, "RNN": _rnn_code}[call.op_type](plan)
    names = {"LSTM": ["i", "o", "f", "c"], "GRU": ["z", "r", "h"], "RNN": ["i"]}[call.op_type]
    return gate_map(plan, gates, "gates", names, code, outs)


def gate_map(plan, state, label, gates, code, outputs, extra=None, hr_array="hr",
             hr_offset=None):
    """One map over (direction, batch entry), each a C++ loop over the hidden units
    that the compiler vectorizes (``simd.row_loop``): reads XW, the recurrent product,
    the biases and the old state, runs ``code`` (Python expressions of one unit), writes
    ``outputs`` (connector -> array, indexed [d, b, row]). ``gates`` name the blocks
    of W whose projections the code reads as ``xv_<gate>`` (and ``r_<gate>``,
    ``wb_<gate>``, ``rb_<gate>``)."""
    call, D, N, H, G = plan.call, plan.D, plan.N, plan.H, plan.G
    order = {"LSTM": "iofc", "GRU": "zrh", "RNN": "i"}[call.op_type]
    hr_offset = hr_offset if hr_offset is not None else {g: order.index(g) * H for g in gates}
    ctype = "float" if plan.dtype == dace.float32 else "double"
    row = f"0:{H}"

    def block(g, base=0):
        return f"d * {G} + {base + order.index(g) * H}:d * {G} + {base + order.index(g) * H + H}"

    inputs, rows = {}, {}  # rows: connector -> C++ element expression in j_
    time = plan.step_time()
    for g in gates:
        if plan.masked:  # every time step of this (b, gate) row; tt picks one
            inputs[f"x_{g}"] = dace.Memlet(plan.xw(f"0:{plan.S}", block(g)), dynamic=True)
            rows[f"x_{g}"] = f"x_{g}[tt * {plan.xw_time_stride()} + j_]"
        else:
            inputs[f"x_{g}"] = dace.Memlet(plan.xw(time, block(g)))
        if g in hr_offset:
            inputs[f"r_{g}"] = dace.Memlet(
                f"{hr_array}[d, b, {hr_offset[g]}:{hr_offset[g] + H}]")
        if plan.b:
            at = order.index(g) * H
            inputs[f"wb_{g}"] = dace.Memlet(f"{plan.b}[d, {at}:{at + H}]")
            inputs[f"rb_{g}"] = dace.Memlet(f"{plan.b}[d, {G + at}:{G + at + H}]")
    for name, text in (extra or {}).items():
        inputs[name] = dace.Memlet(text)
    inputs["hp"] = dace.Memlet(f"hs[d, b, {row}]")
    if call.op_type == "LSTM" and "c" in gates:
        inputs["cp"] = dace.Memlet(f"cs[d, b, {row}]")
        if plan.p:
            for n, g in enumerate("iof"):
                inputs[f"p_{g}"] = dace.Memlet(f"{plan.p}[d, {n * H}:{n * H + H}]")
    out_memlets = {name: dace.Memlet(text) for name, text in outputs.items()}
    lines = [f"xv_{g} = x_{g}" for g in gates] + "\n".join(code(inputs)).split("\n")
    names = {c: rows.get(c, f"{c}[j_]") for c in list(inputs) + list(out_memlets)}
    pairs = [(names.get(t, t), substitute(e, names))
             for t, e in (line.split(" = ", 1) for line in lines)]
    cpp = row_loop(pairs, ctype, H, outputs=set(out_memlets))
    if plan.masked:  # past its length a batch entry keeps its state and gets Y = 0
        inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
        kept = {"ho": "hp", "co": "cp", "zo": "0", "rho": "0"}
        held = row_loop([(names[o], substitute(kept[o], names)) for o in out_memlets],
                        ctype, H, outputs=set(out_memlets))
        tt = f"(ts >= lens || {plan.reversed} == 0) ? ts : lens - 1 - ts"
        cpp = (f"const long long tt = {tt};\nif (ts < lens) {{\n{cpp}\n}} else {{\n{held}\n}}")
    tasklet, entry, _ = mapped_tasklet(state, label, {"d": f"0:{D}", "b": f"0:{N}"}, inputs,
                                       cpp, out_memlets, language=dace.Language.CPP)
    tasklet.code_global = dace.properties.CodeBlock(SIMD_MATH, dace.Language.CPP)
    if D * N * H < PARALLEL_MIN_ELEMENTS:
        entry.map.schedule = dace.ScheduleType.Sequential
    else:
        entry.map.collapse = 2
    if plan.y and "ho" in outputs:
        state = state.parent_graph.add_state_after(state, "y")
        _write_y(plan, state)
    return state


def _write_y(plan, state):
    """Y at this step's time index: the new state, or 0 past a batch entry's length.
    Its own map (a Python tasklet) so that DaCe drops it where Y is never read; a dead
    output of the C++ gate kernel would leave it writing through an unset pointer."""
    D, N, H = plan.D, plan.N, plan.H
    inputs = {"v": dace.Memlet("hs[d, b, k]")}
    y = plan.y_at(plan.step_time()).replace(f"0:{H}]", "k]")
    if not plan.masked:
        scheduled(mapped_tasklet(state, "y", {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"},
                                 inputs, "o = v", {"o": dace.Memlet(y)}), copy=True)
        return
    inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
    y = plan.y_at(f"0:{plan.S}").replace(f"0:{H}]", "k]")
    code = (f"tt = ts if (ts >= lens or {plan.reversed} == 0) else lens - 1 - ts\n"
            "o[tt] = v if ts < lens else 0")
    scheduled(mapped_tasklet(state, "y", {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"},
                             inputs, code, {"o": dace.Memlet(y, dynamic=True)}), copy=True)


def _pre(plan, inputs, g, extra="") -> str:
    """The pre-activation ``a_<g>`` of gate ``g`` (clipped when ``clip`` is set)."""
    terms = [f"xv_{g}"] + [f"{p}_{g}" for p in ("r", "wb", "rb") if f"{p}_{g}" in inputs]
    return f"s_{g} = {' + '.join(terms)}{extra}\n" + _clip(plan, f"s_{g}", f"a_{g}")


def _clip(plan, src: str, dst: str) -> str:
    if plan.clip is None:
        return f"{dst} = {src}"
    return clamp(src, dst, plan.clip, lambda v: f"dace.{plan.dtype.to_string()}({v!r})")


def _lstm_code(plan):
    def code(inputs):
        peep = {g: f" + p_{g} * {'cv' if g == 'o' else 'cp'}" if plan.p else "" for g in "iof"}
        lines = [_pre(plan, inputs, "i", peep["i"]), plan.act(0, 'a_i', 'gi')]
        if plan.input_forget:
            lines.append("gf = 1 - gi")
        else:
            lines += [_pre(plan, inputs, "f", peep["f"]), plan.act(0, 'a_f', 'gf')]
        lines += [_pre(plan, inputs, "c"), plan.act(1, 'a_c', 'gc'),
                  "cv = gf * cp + gi * gc",
                  _pre(plan, inputs, "o", peep["o"]), plan.act(0, 'a_o', 'go'),
                  plan.act(2, 'cv', 'hc'), "hv = go * hc", "ho = hv", "co = cv"]
        return lines
    return code, {"ho": f"hs[d, b, 0:{plan.H}]", "co": f"cs[d, b, 0:{plan.H}]"}


def _gru_code(plan):
    """linear_before_reset: h~ = g(x_h + r * (H @ Rh^T + Rbh) + Wbh)."""
    def code(inputs):
        rb_h = " + rb_h" if "rb_h" in inputs else ""
        wb_h = " + wb_h" if "wb_h" in inputs else ""
        lines = [_pre(plan, inputs, "z"), plan.act(0, 'a_z', 'gz'),
                 _pre(plan, inputs, "r"), plan.act(0, 'a_r', 'gr'),
                 f"s_h = xv_h + gr * (r_h{rb_h}){wb_h}", _clip(plan, "s_h", "a_h")]
        lines += [plan.act(1, 'a_h', 'gh'), "hv = (1 - gz) * gh + gz * hp", "ho = hv"]
        return lines
    return code, {"ho": f"hs[d, b, 0:{plan.H}]"}


def _gru_reset_code(plan):
    def code(inputs):
        return [_pre(plan, inputs, "z"), plan.act(0, 'a_z', 'gz'),
                _pre(plan, inputs, "r"), plan.act(0, 'a_r', 'gr'),
                "zo = gz", "rho = gr * hp"]
    return code


def _gru_update_code(plan):
    """h~ = g(x_h + (r * H) @ Rh^T + Rbh + Wbh)."""
    def code(inputs):
        lines = [_pre(plan, inputs, "h"), plan.act(1, 'a_h', 'gh'),
                 "hv = (1 - zz) * gh + zz * hp", "ho = hv"]
        return lines
    return code


def _rnn_code(plan):
    def code(inputs):
        return [_pre(plan, inputs, "i"), plan.act(0, 'a_i', 'hv'), "ho = hv"]
    return code, {"ho": f"hs[d, b, 0:{plan.H}]"}

