"""LSTM, GRU and RNN: one GEMM for the input of all time steps, then a time loop.

The expansion is a small program of states:

1. ``init``: the hidden (and cell) state from ``initial_h``/``initial_c`` or zero.
2. ``project``: ``XW = X @ W^T`` for every time step, batch entry and direction
   at once (one GEMM of ``seq * batch`` rows; BLAS in the ``blas`` expansion).
3. a loop over the time step ``ts`` (an SDFG loop, not one node per step) whose
   body multiplies the hidden state by ``R^T`` (per direction), then runs one
   map over (direction, batch entry) whose C++ kernel computes all gates of the
   step for a row of hidden units, vectorized, and updates the state in place;
   a last map writes the step's ``Y``. GRU without ``linear_before_reset`` needs
   ``(r * H) @ Rh^T``, so its step has two products with a gate map after each.
4. ``final``: ``Y_h``/``Y_c`` from the state.

Directions are a map dimension: a reverse direction reads time step
``S - 1 - ts``. With ``sequence_lens`` each batch entry stops at its length:
past it the state is kept and ``Y`` is 0, and a reverse direction starts at
``len - 1``; the time index then depends on data, so those reads of ``XW`` and
writes of ``Y`` are indexed inside the tasklets (dynamic memlets).

Activations follow onnxruntime's reading of the spec (``activation_alpha`` and
``activation_beta`` consumed in order by the functions that take them).
"""
import math
import re
from dataclasses import dataclass

import dace

from workbench.build.settings import blas_implementation, target
from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.layout_ops import _ENVIRONMENTS, _environment
from workbench.ops.library_tasklet import library_tasklet
from workbench.ops.reduce import refuse_float16
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, moves_inside
from workbench.ops.simd import SIMD_MATH, row_loop, substitute

_SUM = "lambda p, q: p + q"
# Up to this many batch rows the recurrent product is a vectorized loop over R^T
# rather than a BLAS call (see _recurrent_gemm).
ROW_KERNEL_MAX_BATCH = 16
# Below this many elements a map runs on one thread: a step of a small recurrent layer
# is a few microseconds of work, less than what waking the OpenMP team costs (and on
# a busy machine one descheduled thread stalls every step).
PARALLEL_MIN_ELEMENTS = 8192
COPY_FACTOR = 16
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


# float32 Sigmoid and Tanh as the rational minimax approximations onnxruntime's MLAS
# and Eigen use (their published coefficients): no libm call, so the gate loop
# vectorizes, and the results follow onnxruntime's to float rounding. glibc's scalar
# tanhf (through expm1f) took most of a step. (clamp, odd numerator coefficients from
# x^1 up, even denominator coefficients from x^0 up, constant added)
_TANH = (9.0, (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
               5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
               -2.76076847742355e-16),
         (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
          1.19825839466702e-06), 0.0)
_LOGISTIC = (18.0, (2.48287947061529e-01, 8.51377133304701e-03, 6.08574864600143e-05,
                    1.15627324459942e-07, 4.37031012579801e-11),
             (9.93151921023180e-01, 1.16817656904453e-01, 1.70198817374094e-03,
              6.29106785017040e-06, 5.76102136993427e-09, 6.10247389755681e-13), 0.5)
_RATIONAL = {_ACTIVATIONS["sigmoid"][0]: _LOGISTIC, _ACTIVATIONS["tanh"][0]: _TANH}


def clamp(x: str, dst: str, bound: float, literal=repr) -> str:
    """Code lines: ``dst`` = ``x`` clamped to [-bound, bound] without a comparison:
    min(x, c) = x - relu(x - c), relu(v) = (v + |v|) / 2, which is exactly x below c
    (v + |v| is exactly 0 for v < 0). GCC keeps a float comparison out of a vectorized
    loop under the default -ftrapping-math ("control flow in loop")."""
    hi, lo, half = literal(bound), literal(-bound), literal(0.5)
    return (f"{dst}_hi = {x} - {half} * (({x} - {hi}) + abs({x} - {hi}))\n"
            f"{dst} = {dst}_hi + {half} * (({lo} - {dst}_hi) + abs({lo} - {dst}_hi))")


def _rational(coefficients, x: str, dst: str) -> str:
    """Code lines: dst = x' * P(x'^2) / Q(x'^2) + constant, x' = x clamped, in float32."""
    bound, num, den, add = coefficients

    def f32(v):
        return f"dace.float32({v!r})"

    def horner(coefs, var):
        text = f32(coefs[-1])
        for c in reversed(coefs[:-1]):
            text = f"({text} * {var} + {f32(c)})"
        return text

    lines = [clamp(x, f"{dst}_x", bound, f32),
             f"{dst}_s = {dst}_x * {dst}_x",
             f"{dst} = {dst}_x * {horner(num, dst + '_s')} / {horner(den, dst + '_s')}"]
    if add:
        lines[-1] += f" + {f32(add)}"
    return "\n".join(lines)


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

    def act(self, k: int, x: str, dst: str) -> str:
        """Code lines setting ``dst`` to activation ``k`` of the cell applied to variable
        ``x`` (per direction when the directions' functions differ)."""
        per_dir = [self._activation(f[k], x, f"{dst}{d}" if len(self.functions) > 1 else dst)
                   for d, f in enumerate(self.functions)]
        if len(set(f[k] for f in self.functions)) == 1:
            return self._activation(self.functions[0][k], x, dst)
        return "\n".join(per_dir + [f"{dst} = ({dst}1 if d == 1 else {dst}0)"])

    def _activation(self, text: str, x: str, dst: str) -> str:
        if self.dtype == dace.float32 and text in _RATIONAL:
            return _rational(_RATIONAL[text], x, dst)
        if self.dtype == dace.float32:
            # DaCe emits exp(x) unqualified: C's double exp, and a double tanh
            text = re.sub(r"\b(exp|tanh|log)\(", r"\1f(", text)
        return f"{dst} = {text.replace('{x}', x)}"

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

    def xw_time_stride(self) -> int:
        return self.N * self.D * self.G if self.layout == 0 else self.D * self.G

    def y_time_stride(self) -> int:
        return self.D * self.N * self.H if self.layout == 0 else self.D * self.H

    def y_at(self, time: str) -> str:
        row = f"0:{self.H}"
        return (f"{self.y}[{time}, d, b, {row}]" if self.layout == 0
                else f"{self.y}[b, {time}, d, {row}]")


def _recurrent(call, use_blas: bool):
    if target() != "cpu":   # its gate kernels are C++ with x86 SIMD math, its small maps host loops
        raise call.fail("LSTM, GRU and RNN have no GPU implementation yet; build for the CPU")
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
    units = {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"}
    for state_arr, given in (("hs", plan.h0), ("cs", plan.c0)):
        if state_arr not in sdfg.arrays:
            continue
        inputs = {"v": dace.Memlet(f"{given}[{plan.state_index()}]")} if given else {}
        _scheduled(mapped_tasklet(init, f"init_{state_arr}", units, inputs,
                                  "o = v" if given else "o = 0",
                                  {"o": dace.Memlet(f"{state_arr}[d, b, k]")}), copy=True)

    # 2. the input projection of every time step: one GEMM
    project = sdfg.add_state_after(init, "project")
    if blas:
        project = _blas_gemm(sdfg, project, "project", (plan.x, plan.w), "xw",
                             math.prod(rows), D * G, I, [(0, 0, 0)], blas)
    else:
        project = _map_gemm(sdfg, project, "project",
                            {"r0": f"0:{rows[0]}", "r1": f"0:{rows[1]}", "n": f"0:{D * G}"},
                            f"{plan.x}[r0, r1, j]", f"{plan.w}[n, j]", "xw[r0, r1, n]", I)

    # 3. the time loop: per step the recurrent GEMM(s), then the gates fused in one map
    if uses_row_kernel(plan, blas):  # R^T, once: rows of the recurrent product
        sdfg.add_array("rt", (D, H, G), dt, transient=True)
        project = sdfg.add_state_after(project, "transpose_r")
        _scheduled(mapped_tasklet(project, "transpose_r",
                                  {"d": f"0:{D}", "j": f"0:{H}", "n": f"0:{G}"},
                                  {"v": dace.Memlet(f"{plan.r}[d, n, j]")}, "o = v",
                                  {"o": dace.Memlet("rt[d, j, n]")}), copy=True)
    first = sdfg.add_state("step")
    last = _step(plan, sdfg, first, blas)
    after = sdfg.add_state("final")
    sdfg.add_loop(project, first, after, "ts", "0", f"ts < {S}", "ts + 1", last)

    # 4. the final state outputs; a batch entry of length 0 gets 0, as onnxruntime gives
    for out, state_arr in ((plan.yh, "hs"), (plan.yc, "cs")):
        if out:
            inputs = {"v": dace.Memlet(f"{state_arr}[d, b, k]")}
            if plan.masked:
                inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
            _scheduled(mapped_tasklet(after, f"final_{state_arr}", units, inputs,
                                      "o = v if lens > 0 else 0" if plan.masked else "o = v",
                                      {"o": dace.Memlet(f"{out}[{plan.state_index()}]")}),
                       copy=True)
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
                  {"zo": f"zs[d, b, 0:{H}]", "rho": f"rh[d, b, 0:{H}]"})
        second = sdfg.add_state_after(gates, "candidate_gemm")
        second = _recurrent_gemm(plan, sdfg, second, "rh", "hrh", 2 * H, H, blas)
        gates = sdfg.add_state_after(second, "update")
        gates = _gate_map(plan, gates, "update", ["h"], _gru_update_code(plan),
                  {"ho": f"hs[d, b, 0:{H}]"}, extra={"zz": f"zs[d, b, 0:{H}]"}, hr_array="hrh",
                  hr_offset={"h": 0})
        return gates
    code, outs = {"LSTM": _lstm_code, "GRU": _gru_code, "RNN": _rnn_code}[call.op_type](plan)
    names = {"LSTM": ["i", "o", "f", "c"], "GRU": ["z", "r", "h"], "RNN": ["i"]}[call.op_type]
    return _gate_map(plan, gates, "gates", names, code, outs)


def _recurrent_gemm(plan, sdfg, state, h_arr, out, row0, rows, blas):
    """out[d, b, n] = sum_j h[d, b, j] * R[d, row0 + n, j]; returns the last state.

    A few batch rows: a C++ loop per (d, b) adding h[j] * R^T[j, :] rows (``rt``,
    transposed once before the time loop), vectorized over n. A BLAS call would pack
    R again at every step (OpenBLAS's copy took as long as its kernel); onnxruntime
    packs its weights once. Many rows: one GEMM per direction (BLAS)."""
    D, N, H, G = plan.D, plan.N, plan.H, plan.G
    if blas and N > ROW_KERNEL_MAX_BATCH:
        return _blas_gemm(sdfg, state, f"{out}_gemm", (h_arr, plan.r), out, N, rows, H,
                          [(d * N * H, d * G * H + row0 * H, d * N * rows) for d in range(D)],
                          blas)
    ctype = "float" if plan.dtype == dace.float32 else "double"
    code = (f"for (int n_ = 0; n_ < {rows}; ++n_) o[n_] = 0;\n"
            f"for (int j_ = 0; j_ < {H}; ++j_) {{\n"
            f"    const {ctype} hj = h[j_];\n"
            f"    #pragma omp simd\n"
            f"    for (int n_ = 0; n_ < {rows}; ++n_) o[n_] += hj * rt[j_ * {G} + {row0} + n_];\n"
            f"}}")
    _, entry, _ = mapped_tasklet(state, f"{out}_rows", {"d": f"0:{D}", "b": f"0:{N}"},
                                 {"h": dace.Memlet(f"{h_arr}[d, b, 0:{H}]"),
                                  "rt": dace.Memlet(f"rt[d, 0:{H}, 0:{G}]")}, code,
                                 {"o": dace.Memlet(f"{out}[d, b, 0:{rows}]")},
                                 language=dace.Language.CPP)
    if D * N * rows * H < PARALLEL_MIN_ELEMENTS * 8:
        entry.map.schedule = dace.ScheduleType.Sequential
    else:
        entry.map.collapse = 2
    return state


def uses_row_kernel(plan, blas) -> bool:
    return not (blas and plan.N > ROW_KERNEL_MAX_BATCH)


def _gate_map(plan, state, label, gates, code, outputs, extra=None, hr_array="hr",
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
        _scheduled(mapped_tasklet(state, "y", {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"},
                                  inputs, "o = v", {"o": dace.Memlet(y)}), copy=True)
        return
    inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
    y = plan.y_at(f"0:{plan.S}").replace(f"0:{H}]", "k]")
    code = (f"tt = ts if (ts >= lens or {plan.reversed} == 0) else lens - 1 - ts\n"
            "o[tt] = v if ts < lens else 0")
    _scheduled(mapped_tasklet(state, "y", {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"},
                              inputs, code, {"o": dace.Memlet(y, dynamic=True)}), copy=True)


def _scheduled(mapped, copy: bool = False):
    """A ``mapped_tasklet`` result: parallel over all its parameters when it is large
    enough, else sequential (PARALLEL_MIN_ELEMENTS; a copy, which costs less per
    element than a parallel region's start, needs COPY_FACTOR times more)."""
    _, entry, _ = mapped
    least = PARALLEL_MIN_ELEMENTS * (COPY_FACTOR if copy else 1)
    if entry.map.range.num_elements_exact() < least:
        entry.map.schedule = dace.ScheduleType.Sequential
        return mapped
    return parallel(mapped)


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


def _map_gemm(sdfg, state, label, ranges, a, b, out, K):
    """out = sum over j < K of a * b: a zero fill in ``state``, then a map with a
    sequential reduction in a new state after it, which is returned."""
    _scheduled(mapped_tasklet(state, f"{label}_zero", ranges, {}, "o = 0",
                            {"o": dace.Memlet(out)}))
    state = sdfg.add_state_after(state, label)
    _scheduled(mapped_reduction(state, label, ranges, {"j": f"0:{K}"},
                     {"x": dace.Memlet(a), "w": dace.Memlet(b)}, "c = x * w",
                     {"c": dace.Memlet(out, wcr=_SUM)}))
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


@moves_inside("LSTM", "GRU", "RNN", impl="pure")
@moves_inside("LSTM", "GRU", "RNN", impl="blas")
def buffer_bytes(call) -> int:
    """The expansion's own buffers, each written and read once (the data-movement rule:
    what is moved, not how often the loop re-reads it): the projection XW of every
    step, R^T for the row kernel, the recurrent products and the state."""
    plan = Plan(call)
    S, N, D, H, G = plan.S, plan.N, plan.D, plan.H, plan.G
    elements = S * N * D * G + D * N * G + D * N * H * (2 if call.op_type == "LSTM" else 1)
    if call.op_type == "GRU" and not plan.before_reset:
        elements += 3 * D * N * H  # r * H, z and (r * H) @ Rh^T
    if call.node.implementation == "pure" or N <= ROW_KERNEL_MAX_BATCH:
        elements += D * H * G
    return 2 * elements * plan.dtype.bytes

