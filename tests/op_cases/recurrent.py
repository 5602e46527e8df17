"""LSTM, GRU and RNN: directions, initial states, peepholes, sequence lengths.

Small sizes (seq 4, batch 2, input 3, hidden 5); tests/test_recurrent.py holds the
layout=1, activation and clip cases and the exports.
"""
import numpy as np

from op_cases.base import C, rand

S, N, I, H = 4, 2, 3, 5
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _weights(op, directions=1):
    g = _GATES[op]
    return {"w": rand(directions, g * H, I), "r": rand(directions, g * H, H),
            "b": rand(directions, 2 * g * H)}


def _lens(*values):
    return np.array(values, dtype=np.int32)


def _cases(op):
    outs = ("y", "y_h", "y_c") if op == "LSTM" else ("y", "y_h")
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    bidir = {"hidden_size": H, "direction": "bidirectional"}
    cases = [
        C("forward", {"x": rand(S, N, I)}, {"hidden_size": H}, _weights(op), outs,
          ["x", "w", "r", "b"]),
        C("reverse_initial_state", {"x": rand(S, N, I), **{s: rand(1, N, H) for s in states}},
          {"hidden_size": H, "direction": "reverse"}, _weights(op), outs,
          ["x", "w", "r", "b", ""] + states),
        C("bidirectional_lengths", {"x": rand(S, N, I), "lens": _lens(4, 2)}, bidir,
          _weights(op, 2), outs, ["x", "w", "r", "b", "lens"]),
    ]
    if op == "LSTM":
        peep = {**_weights(op, 2), "p": rand(2, 3 * H)}
        cases.append(C("bidirectional_peepholes",
                       {"x": rand(S, N, I), "h0": rand(2, N, H), "c0": rand(2, N, H)}, bidir,
                       peep, outs, ["x", "w", "r", "b", "", "h0", "c0", "p"]))
    if op == "GRU":
        cases.append(C("linear_before_reset", {"x": rand(S, N, I), "lens": _lens(3, 4)},
                       {**bidir, "linear_before_reset": 1}, _weights(op, 2), outs,
                       ["x", "w", "r", "b", "lens"]))
    return cases


CASES = {op: _cases(op) for op in _GATES}
