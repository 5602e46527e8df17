"""The activation functions of LSTM, GRU and RNN as tasklet code.

Each function is an expression of a variable ``{x}`` (with the spec's default
``alpha``/``beta``); ``activation_code`` turns one into code lines, float32
Sigmoid and Tanh as rational approximations that vectorize.
"""
import re

import dace

# Activation functions the spec lists: (expression of a variable {x}, default alpha, beta).
# A variable, never an expression, is substituted, so repeating {x} costs nothing.
ACTIVATIONS = {
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
_RATIONAL = {ACTIVATIONS["sigmoid"][0]: _LOGISTIC, ACTIVATIONS["tanh"][0]: _TANH}


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


def activation_code(text: str, x: str, dst: str, dtype) -> str:
    """Code lines setting ``dst`` to activation expression ``text`` of variable ``x``."""
    if dtype == dace.float32 and text in _RATIONAL:
        return _rational(_RATIONAL[text], x, dst)
    if dtype == dace.float32:
        # DaCe emits exp(x) unqualified: C's double exp, and a double tanh
        text = re.sub(r"\b(exp|tanh|log)\(", r"\1f(", text)
    return f"{dst} = {text.replace('{x}', x)}"
