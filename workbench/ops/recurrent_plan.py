"""The checked sizes, attributes and index expressions of one LSTM, GRU or RNN node."""
from dataclasses import dataclass

from workbench.ops.recurrent_activations import ACTIVATIONS, activation_code
from workbench.ops.reduce import refuse_float16


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
            if key not in ACTIVATIONS:
                raise call.fail(f"activation {name!r} in attribute 'activations'")
            text, alpha, beta = ACTIVATIONS[key]
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
        return activation_code(text, x, dst, self.dtype)

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
