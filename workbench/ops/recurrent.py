"""LSTM, GRU and RNN: one GEMM for the input of all time steps, then a time loop.

The expansion is a small program of states:

1. ``init``: the hidden (and cell) state from ``initial_h``/``initial_c`` or zero.
2. ``project``: ``XW = X @ W^T`` for every time step, batch entry and direction
   at once (one GEMM of ``seq * batch`` rows; BLAS in the ``blas`` expansion).
3. a loop over the time step ``ts`` (an SDFG loop, not one node per step) whose
   body multiplies the hidden state by ``R^T`` (per direction) and then runs one
   map over (direction, batch, hidden unit) that computes all gates of the step
   fused, updates the state in place and writes ``Y``. GRU without
   ``linear_before_reset`` needs ``(r * H) @ Rh^T``, so its step has two GEMMs
   with a map after each.
4. ``final``: ``Y_h``/``Y_c`` from the state.

Directions are a map dimension: a reverse direction reads time step
``S - 1 - ts``. With ``sequence_lens`` each batch entry stops at its length:
past it the state is kept and ``Y`` is 0, and a reverse direction starts at
``len - 1``; the time index then depends on data, so those reads and writes of
``XW`` and ``Y`` are indexed inside the tasklet (dynamic memlets).
"""
import math
from dataclasses import dataclass

import dace

from workbench.build.settings import blas_implementation
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.layout_ops import _ENVIRONMENTS, _environment
from workbench.ops.library_tasklet import library_tasklet
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet

_SUM = "lambda p, q: p + q"
_BLAS = {dace.float32: ("s", "float"), dace.float64: ("d", "double")}

# Activation functions the spec lists: (expression of a variable {x}, default alpha, beta).
# A variable, never an expression, is substituted, so repeating {x} costs nothing.
_ACTIVATIONS = {
    "sigmoid": ("1 / (1 + exp(-{x}))", None, None),
    "tanh": ("tanh({x})", None, None),
    "relu": ("({x} if {x} > 0 else 0)", None, None),
    "affine": ("{alpha} * {x} + {beta}", 1.0, 0.0),
    "leakyrelu": ("({x} if {x} >= 0 else {alpha} * {x})", 0.01, None),
    "thresholdedrelu": ("({x} if {x} > {alpha} else 0)", 1.0, None),
    "scaledtanh": ("{alpha} * tanh({beta} * {x})", 1.0, 1.0),
    "hardsigmoid": ("(0 if {alpha} * {x} + {beta} < 0 else (1 if {alpha} * {x} + {beta} > 1 "
                    "else {alpha} * {x} + {beta}))", 0.2, 0.5),
    "elu": ("({x} if {x} >= 0 else {alpha} * (exp({x}) - 1))", 1.0, None),
    "softsign": ("{x} / (1 + abs({x}))", None, None),
    "softplus": ("log(1 + exp({x}))", None, None),
}


@dataclass(frozen=True)
class Cell:
    """What differs between the three op types."""
    gates: int           # gate blocks in W and R
    functions: tuple     # default activations per direction
    outputs: tuple       # state outputs after Y: ("Y_h",) or ("Y_h", "Y_c")


CELLS = {
    "LSTM": Cell(4, ("Sigmoid", "Tanh", "Tanh"), ("h", "c")),
    "GRU": Cell(3, ("Sigmoid", "Tanh"), ("h",)),
    "RNN": Cell(1, ("Tanh",), ("h",)),
}


class Plan:
    """The node's sizes, attributes and connectors, checked once."""

    def __init__(self, call):
        refuse_float16(call)
        self.call, self.cell = call, CELLS[call.op_type]
        for legacy in ("output_sequence", "is_test", "consumed_inputs"):
            if legacy in call.attrs:
                raise call.fail(f"attribute '{legacy}' (of opsets before 7) is not supported")
        self.x, self.w, self.r, self.b = (call.input(i) for i in range(4))
        self.lens, self.h0 = call.input(4), call.input(5)
        self.c0 = call.input(6) if call.op_type == "LSTM" else None
        self.p = call.input(7) if call.op_type == "LSTM" else None
        self.y, self.yh = call.output(0), call.output(1)
        self.yc = call.output(2) if call.op_type == "LSTM" else None
        self.layout = int(call.attr("layout", 0) or 0)
        if self.layout not in (0, 1):
            raise call.fail(f"attribute 'layout'={self.layout} (0 or 1)")
        x_shape = call.shape(self.x)
        self.S, self.N, self.I = (x_shape if self.layout == 0
                                  else (x_shape[1], x_shape[0], x_shape[2]))
        self.D, gh, _ = call.shape(self.w)
        self.H = call.shape(self.r)[2]
        if call.attr("hidden_size") not in (None, self.H) or gh != self.cell.gates * self.H:
            raise call.fail(f"attribute 'hidden_size'={call.attr('hidden_size')} does not match "
                            f"W {call.shape(self.w)} and R {call.shape(self.r)}")
        self.G = self.cell.gates * self.H
        direction = call.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise call.fail(f"attribute 'direction'={direction!r}")
        if self.D != (2 if direction == "bidirectional" else 1):
            raise call.fail(f"attribute 'direction'={direction!r} with {self.D} direction(s) in W")
        # expression: is direction d reversed (d is the map parameter)
        self.reversed = {"forward": "0", "reverse": "1", "bidirectional": "d"}[direction]
        self.dtype = call.dtype(self.x)
        clip = call.attr("clip")
        self.clip = None if clip is None else float(clip)
        self.input_forget = bool(call.attr("input_forget", 0)) if call.op_type == "LSTM" else False
        self.before_reset = (bool(call.attr("linear_before_reset", 0))
                             if call.op_type == "GRU" else False)
        self.functions = self._activations()
        # lengths that are all S (or absent) need no masking and keep static indices
        lens = call.const(4) if self.lens else None
        self.masked = bool(self.lens) and not (lens is not None and (lens == self.S).all())

    def _activations(self):
        """Per direction, the activation expressions of a variable {x} (ORT's reading of
        activation_alpha/beta: consumed in order by the functions that take one)."""
        call, n = self.call, len(self.cell.functions)
        names = [n.decode() if isinstance(n, bytes) else n  # schema defaults come as bytes
                 for n in call.attr("activations") or list(self.cell.functions) * self.D]
        if len(names) == n and self.D == 2:
            names = list(names) * 2
        if len(names) < n * self.D:
            raise call.fail(f"attribute 'activations' has {len(names)} functions; {n} per "
                            f"direction are needed")
        alphas = list(call.attr("activation_alpha") or [])
        betas = list(call.attr("activation_beta") or [])
        out = []
        for name in names[:n * self.D]:
            key = name.lower()
            if key not in _ACTIVATIONS:
                raise call.fail(f"activation {name!r} in attribute 'activations'")
            text, alpha, beta = _ACTIVATIONS[key]
            if alpha is not None:
                alpha = alphas.pop(0) if alphas else alpha
            if beta is not None:
                beta = betas.pop(0) if betas else beta
            out.append(text.replace("{alpha}", repr(float(alpha or 0)))
                       .replace("{beta}", repr(float(beta or 0))))
        return [out[d * n:(d + 1) * n] for d in range(self.D)]

    def apply(self, k: int, x: str) -> str:
        """Activation ``k`` of the cell on variable ``x`` (per direction when they differ)."""
        per_dir = [f[k].replace("{x}", x) for f in self.functions]
        if len(set(per_dir)) == 1:
            return per_dir[0]
        return f"({per_dir[1]} if d == 1 else {per_dir[0]})"

    # -- indices -------------------------------------------------------------------
    def state_index(self, d="d", b="b", k="k") -> str:
        """initial_h / Y_h: [D, N, H] (layout 0) or [N, D, H] (layout 1)."""
        return f"{d}, {b}, {k}" if self.layout == 0 else f"{b}, {d}, {k}"

    def step_time(self) -> str:
        """The time index the direction reads at loop step ``ts`` (no lengths)."""
        rev = self.reversed
        if rev == "0":
            return "ts"
        if rev == "1":
            return f"{self.S - 1} - ts"
        return f"ts + d * ({self.S - 1} - 2 * ts)"

    def xw(self, time: str, col: str) -> str:
        """XW is seen [S, N, D*G] (layout 0) or [N, S, D*G] (layout 1), X's row order."""
        return f"xw[{time}, b, {col}]" if self.layout == 0 else f"xw[b, {time}, {col}]"

    def y_at(self, time: str) -> str:
        return f"{self.y}[{time}, d, b, k]" if self.layout == 0 else f"{self.y}[b, {time}, d, k]"


def _recurrent(call, use_blas: bool):
    plan = Plan(call)
    blas = blas_implementation() if use_blas else None
    if blas not in _ENVIRONMENTS or plan.dtype not in _BLAS:
        blas = None  # a GPU build's cuBLAS needs device pointers: the maps run there
    S, N, I, D, H, G = plan.S, plan.N, plan.I, plan.D, plan.H, plan.G
    rows = (S, N) if plan.layout == 0 else (N, S)
    sdfg, init = connector_sdfg(call, call.op_type.lower(), {
        plan.w: (D * G, I), plan.x: rows + (I,)})
    dt = plan.dtype
    sdfg.add_array("xw", rows + (D * G,), dt, transient=True)
    sdfg.add_array("hs", (D, N, H), dt, transient=True)
    if call.op_type == "LSTM":
        sdfg.add_array("cs", (D, N, H), dt, transient=True)
    if 0 in (S, N, H):
        raise call.fail(f"an empty dimension (seq {S}, batch {N}, hidden {H})")

    # 1. the state from initial_h / initial_c, or zero
    for state_arr, given in (("hs", plan.h0), ("cs", plan.c0)):
        if state_arr not in sdfg.arrays:
            continue
        inputs = {"v": dace.Memlet(f"{given}[{plan.state_index()}]")} if given else {}
        parallel(mapped_tasklet(init, f"init_{state_arr}",
                                {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"}, inputs,
                                "o = v" if given else "o = 0",
                                {"o": dace.Memlet(f"{state_arr}[d, b, k]")}))

    # 2. the input projection of every time step: one GEMM
    project = sdfg.add_state_after(init, "project")
    if blas:
        project = _blas_gemm(sdfg, project, "project", (plan.x, plan.w), "xw", math.prod(rows), D * G, I,
                   [(0, 0, 0)], blas)
    else:
        project = _map_gemm(sdfg, project, "project", {"r0": f"0:{rows[0]}", "r1": f"0:{rows[1]}",
                                             "n": f"0:{D * G}"},
                  f"{plan.x}[r0, r1, j]", f"{plan.w}[n, j]", "xw[r0, r1, n]", I)

    # 3. the time loop: per step the recurrent GEMM(s), then the gates fused in one map
    first = sdfg.add_state("step")
    last = _step(plan, sdfg, first, blas)
    after = sdfg.add_state("final")
    sdfg.add_loop(project, first, after, "ts", "0", f"ts < {S}", "ts + 1", last)

    # 4. the final state outputs
    for out, state_arr in ((plan.yh, "hs"), (plan.yc, "cs")):
        if out:
            parallel(mapped_tasklet(after, f"final_{state_arr}",
                                    {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"},
                                    {"v": dace.Memlet(f"{state_arr}[d, b, k]")}, "o = v",
                                    {"o": dace.Memlet(f"{out}[{plan.state_index()}]")}))
    return sdfg


def _step(plan, sdfg, state, blas):
    """The loop body from ``state`` on; returns its last state."""
    call, D, N, H = plan.call, plan.D, plan.N, plan.H
    gh = plan.G if not (call.op_type == "GRU" and not plan.before_reset) else 2 * H
    sdfg.add_array("hr", (D, N, gh), plan.dtype, transient=True)
    state = _recurrent_gemm(plan, sdfg, state, "hs", "hr", 0, gh, blas)
    gates = sdfg.add_state_after(state, "gates")
    if call.op_type == "GRU" and not plan.before_reset:
        # r * H first, then (r * H) @ Rh^T, then the candidate and the update
        sdfg.add_array("rh", (D, N, H), plan.dtype, transient=True)
        sdfg.add_array("zs", (D, N, H), plan.dtype, transient=True)
        sdfg.add_array("hrh", (D, N, H), plan.dtype, transient=True)
        _gate_map(plan, gates, "reset", ["z", "r"], _gru_reset_code(plan),
                  {"zo": "zs[d, b, k]", "rho": "rh[d, b, k]"})
        second = sdfg.add_state_after(gates, "candidate_gemm")
        second = _recurrent_gemm(plan, sdfg, second, "rh", "hrh", 2 * H, H, blas)
        gates = sdfg.add_state_after(second, "update")
        _gate_map(plan, gates, "update", ["h"], _gru_update_code(plan),
                  {"ho": "hs[d, b, k]"}, extra={"zz": "zs[d, b, k]"}, hr_array="hrh",
                  hr_offset={"h": 0})
        return gates
    code, outs = {"LSTM": _lstm_code, "GRU": _gru_code, "RNN": _rnn_code}[call.op_type](plan)
    names = {"LSTM": ["i", "o", "f", "c"], "GRU": ["z", "r", "h"], "RNN": ["i"]}[call.op_type]
    _gate_map(plan, gates, "gates", names, code, outs)
    return gates


def _recurrent_gemm(plan, sdfg, state, h_arr, out, row0, rows, blas):
    """out[d, b, n] = sum_j h[d, b, j] * R[d, row0 + n, j]; returns the last state."""
    D, N, H, G = plan.D, plan.N, plan.H, plan.G
    if blas:
        return _blas_gemm(sdfg, state, f"{out}_gemm", (h_arr, plan.r), out, N, rows, H,
                   [(d * N * H, d * G * H + row0 * H, d * N * rows) for d in range(D)], blas)
    return _map_gemm(sdfg, state, f"{out}_gemm", {"d": f"0:{D}", "b": f"0:{N}", "n": f"0:{rows}"},
                  f"{h_arr}[d, b, j]", f"{plan.r}[d, {row0} + n, j]", f"{out}[d, b, n]", H)


def _gate_map(plan, state, label, gates, code, outputs, extra=None, hr_array="hr",
              hr_offset=None):
    """One map over (d, b, k): reads XW, the recurrent product, biases, the old state;
    ``gates`` name the blocks of W (in order) whose projections the code reads as
    ``x_<gate>`` (and ``r_<gate>``, ``wb_<gate>``, ``rb_<gate>``)."""
    call, D, N, H, G = plan.call, plan.D, plan.N, plan.H, plan.G
    order = {"LSTM": "iofc", "GRU": "zrh", "RNN": "i"}[call.op_type]
    hr_offset = hr_offset if hr_offset is not None else {g: order.index(g) * H for g in gates}
    inputs, lines = {}, []
    time = plan.step_time()
    if plan.masked:
        inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
        lines.append(f"tt = ts if (ts >= lens or {plan.reversed} == 0) else lens - 1 - ts")
        span = f"0:{plan.S}"
    for g in gates:
        col = f"d * {G} + {order.index(g) * H} + k"
        if plan.masked:
            inputs[f"x_{g}"] = dace.Memlet(plan.xw(span, col), dynamic=True)
            lines.append(f"xv_{g} = x_{g}[tt]")
        else:
            inputs[f"x_{g}"] = dace.Memlet(plan.xw(time, col))
            lines.append(f"xv_{g} = x_{g}")
        if g in hr_offset:
            inputs[f"r_{g}"] = dace.Memlet(
                f"{hr_array}[d, b, {hr_offset[g]} + k]")
        if plan.b:
            inputs[f"wb_{g}"] = dace.Memlet(f"{plan.b}[d, {order.index(g) * H} + k]")
            inputs[f"rb_{g}"] = dace.Memlet(f"{plan.b}[d, {G + order.index(g) * H} + k]")
    for name, text in (extra or {}).items():
        inputs[name] = dace.Memlet(text)
    inputs["hp"] = dace.Memlet("hs[d, b, k]")
    if call.op_type == "LSTM" and "c" in gates:
        inputs["cp"] = dace.Memlet("cs[d, b, k]")
        if plan.p:
            for n, g in enumerate("iof"):
                inputs[f"p_{g}"] = dace.Memlet(f"{plan.p}[d, {n * H} + k]")
    out_memlets = {name: dace.Memlet(text) for name, text in outputs.items()}
    body = code(inputs)
    if plan.y and "ho" in outputs:
        if plan.masked:
            out_memlets["yo"] = dace.Memlet(plan.y_at(span), dynamic=True)
        else:
            out_memlets["yo"] = dace.Memlet(plan.y_at(time))
    if plan.masked:
        kept = {"ho": "hp", "co": "cp", "zo": "0", "rho": "0"}
        held = [f"{o} = {kept[o]}" for o in outputs if o in kept]
        if "yo" in out_memlets:
            held.append("yo[tt] = 0")
            body.append("yo[tt] = hv")
        lines.append("if ts < lens:")
        lines += ["    " + line for line in body]
        lines.append("else:")
        lines += ["    " + line for line in held or ["pass"]]
    else:
        lines += body
        if "yo" in out_memlets:
            lines.append("yo = hv")
    parallel(mapped_tasklet(state, label, {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"}, inputs,
                            "\n".join(lines), out_memlets))


def _pre(plan, inputs, g, extra="") -> str:
    """The pre-activation of gate ``g`` (clipped when ``clip`` is set) as code lines."""
    terms = [f"xv_{g}"] + [f"{p}_{g}" for p in ("r", "wb", "rb") if f"{p}_{g}" in inputs]
    line = f"a_{g} = {' + '.join(terms)}{extra}"
    if plan.clip is None:
        return line
    c = plan.clip
    return f"{line}\na_{g} = ({-c!r} if a_{g} < {-c!r} else ({c!r} if a_{g} > {c!r} else a_{g}))"


def _lstm_code(plan):
    def code(inputs):
        peep = {g: f" + p_{g} * {'cv' if g == 'o' else 'cp'}" if plan.p else "" for g in "iof"}
        lines = [_pre(plan, inputs, "i", peep["i"]), f"gi = {plan.apply(0, 'a_i')}"]
        if plan.input_forget:
            lines.append("gf = 1 - gi")
        else:
            lines += [_pre(plan, inputs, "f", peep["f"]), f"gf = {plan.apply(0, 'a_f')}"]
        lines += [_pre(plan, inputs, "c"), f"gc = {plan.apply(1, 'a_c')}",
                  "cv = gf * cp + gi * gc",
                  _pre(plan, inputs, "o", peep["o"]), f"go = {plan.apply(0, 'a_o')}",
                  f"hv = go * {plan.apply(2, 'cv')}", "ho = hv", "co = cv"]
        return lines
    return code, {"ho": "hs[d, b, k]", "co": "cs[d, b, k]"}


def _gru_code(plan):
    """linear_before_reset: h~ = g(x_h + r * (H @ Rh^T + Rbh) + Wbh)."""
    def code(inputs):
        rb_h = " + rb_h" if "rb_h" in inputs else ""
        wb_h = " + wb_h" if "wb_h" in inputs else ""
        lines = [_pre(plan, inputs, "z"), f"gz = {plan.apply(0, 'a_z')}",
                 _pre(plan, inputs, "r"), f"gr = {plan.apply(0, 'a_r')}",
                 f"a_h = xv_h + gr * (r_h{rb_h}){wb_h}"]
        lines += _clipped(plan, "a_h")
        lines += [f"gh = {plan.apply(1, 'a_h')}", "hv = (1 - gz) * gh + gz * hp", "ho = hv"]
        return lines
    return code, {"ho": "hs[d, b, k]"}


def _gru_reset_code(plan):
    def code(inputs):
        return [_pre(plan, inputs, "z"), f"gz = {plan.apply(0, 'a_z')}",
                _pre(plan, inputs, "r"), f"gr = {plan.apply(0, 'a_r')}",
                "zo = gz", "rho = gr * hp"]
    return code


def _gru_update_code(plan):
    """h~ = g(x_h + (r * H) @ Rh^T + Rbh + Wbh)."""
    def code(inputs):
        lines = [_pre(plan, inputs, "h"), f"gh = {plan.apply(1, 'a_h')}",
                 "hv = (1 - zz) * gh + zz * hp", "ho = hv"]
        return lines
    return code


def _rnn_code(plan):
    def code(inputs):
        return [_pre(plan, inputs, "i"), f"hv = {plan.apply(0, 'a_i')}", "ho = hv"]
    return code, {"ho": "hs[d, b, k]"}


def _clipped(plan, var):
    if plan.clip is None:
        return []
    c = plan.clip
    return [f"{var} = ({-c!r} if {var} < {-c!r} else ({c!r} if {var} > {c!r} else {var}))"]


def _map_gemm(sdfg, state, label, ranges, a, b, out, K):
    """out = sum over j < K of a * b: a zero fill in ``state``, then a map with a
    sequential reduction in a new state after it, which is returned."""
    parallel(mapped_tasklet(state, f"{label}_zero", ranges, {}, "o = 0",
                            {"o": dace.Memlet(out)}))
    state = sdfg.add_state_after(state, label)
    mapped_reduction(state, label, ranges, {"j": f"0:{K}"},
                     {"x": dace.Memlet(a), "w": dace.Memlet(b)}, "c = x * w",
                     {"c": dace.Memlet(out, wcr=_SUM)})
    return state


def _blas_gemm(sdfg, state, label, operands, out, M, Nc, K, offsets, blas):
    """``out = A @ B^T`` (row-major, A: M x K, B: Nc x K) once per (a, b, out) pointer
    offset in ``offsets``: one cblas_?gemm call each, in one C++ tasklet."""
    prefix, ctype = _BLAS[sdfg.arrays[out].dtype]
    calls = [f"cblas_{prefix}gemm(CblasRowMajor, CblasNoTrans, CblasTrans, {M}, {Nc}, {K}, "
             f"({ctype})1, _a + {oa}, {K}, _b + {ob}, {K}, ({ctype})0, _y + {oy}, {Nc});"
             for oa, ob, oy in offsets]
    library_tasklet(sdfg, state, label, {"_a": operands[0], "_b": operands[1]}, ("_y", out),
                    "\n".join(calls), _environment(blas))
    return state


@implements("LSTM", "GRU", "RNN")
def recurrent_pure(call):
    return _recurrent(call, use_blas=False)


@implements("LSTM", "GRU", "RNN", impl="blas")
def recurrent_blas(call):
    return _recurrent(call, use_blas=True)
