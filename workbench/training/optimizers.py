"""Optimizer updates as ordinary ops, with PyTorch's formulas.

The learning rate and the step count are inputs of the program (rank 0),
so a schedule changes them without a rebuild. AdamW decays the weights
first (``p *= 1 - lr * weight_decay``), then ``p -= lr / (1 - b1^t) * m /
(sqrt(v / (1 - b2^t)) + eps)``, as ``torch.optim.AdamW`` does.
"""
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from workbench.errors import BadInputError

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class OptimizerSettings:
    kind: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8

    def check(self):
        if self.kind not in OPTIMIZERS:
            raise BadInputError(f"optimizer {self.kind!r} is not one of {', '.join(OPTIMIZERS)}")
        if not self.lr > 0:
            raise BadInputError(f"the learning rate must be positive, not {self.lr}")
        return self


def add_update(e, settings: OptimizerSettings, params: list, grads: dict):
    """Write the update; returns (hyper inputs {name: value}, state {input name:
    (next value output, initial numpy value)})."""
    lr = e.fresh("learning_rate")
    e.types[lr] = (TensorProto.FLOAT, ())
    hyper = {lr: settings.lr}
    state = {}
    if settings.kind == "sgd":
        for p in params:
            g = grads[p]
            if settings.weight_decay:
                g = e.add(g, e.mul(p, e.scalar(settings.weight_decay, p)))
            if settings.momentum:
                buf = _state(e, state, p, "momentum")
                nxt = e.add(e.mul(buf, e.scalar(settings.momentum, p)), g)
                state[buf] = (nxt, state[buf][1])
                g = nxt
            state[p] = (e.sub(p, e.mul(g, _lr(e, lr, p))), None)
        return hyper, state
    step = e.fresh("train_step")
    e.types[step] = (TensorProto.FLOAT, ())
    hyper[step] = 1.0
    b1, b2 = settings.betas
    one = e.const(np.float32(1))
    # 1 - b^t, computed once per step for every parameter
    correct1 = e.sub(one, e.binary("Pow", e.const(np.float32(b1)), step))
    correct2 = e.sub(one, e.binary("Pow", e.const(np.float32(b2)), step))
    step_size = e.div(lr, correct1)
    root2 = e.unary("Sqrt", correct2)
    for p in params:
        g = grads[p]
        m, v = _state(e, state, p, "exp_avg"), _state(e, state, p, "exp_avg_sq")
        decayed = e.mul(p, e.sub(one, e.mul(lr, e.const(np.float32(settings.weight_decay))))) \
            if settings.weight_decay else p
        m_next = e.add(e.mul(m, e.scalar(b1, p)), e.mul(g, e.scalar(1 - b1, p)))
        v_next = e.add(e.mul(v, e.scalar(b2, p)), e.mul(e.mul(g, g), e.scalar(1 - b2, p)))
        denom = e.add(e.div(e.unary("Sqrt", v_next), root2), e.scalar(settings.eps, p))
        p_next = e.sub(decayed, e.mul(e.div(m_next, denom), step_size))
        state[m], state[v] = (m_next, state[m][1]), (v_next, state[v][1])
        state[p] = (p_next, None)
    return hyper, state


def _lr(e, lr, p):
    return lr if e.elem_type(p) == TensorProto.FLOAT else e.op("Cast", [lr], like=p, shape=(),
                                                               to=e.elem_type(p))


def _state(e, state, p, kind):
    name = e.fresh(f"{p}_{kind}")
    e.types[name] = e.types[p]
    state[name] = (None, np.zeros(e.shape(p), dtype=e.np_dtype(p)))
    return name
