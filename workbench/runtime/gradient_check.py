"""The gradient of a training program against the model file alone:
directional derivatives of the loss, by central differences on onnxruntime
running the user's model (its parameters fed as inputs, the loss computed
here in float64 from its outputs).

A random direction over millions of parameters is nearly orthogonal to the
gradient, so its derivative drowns in float32 rounding. Each direction is
the program's gradient with every element scaled by a random factor in
[0, 2] (a fresh factor per element and direction) plus a random component:
an element with the wrong sign or size changes the derivative. The step is
chosen so the loss moves by about 1e-3 of itself, and two steps (h, h/2)
are combined by Richardson extrapolation, which cancels the h^2 error.
"""
from dataclasses import dataclass, field

import numpy as np

from workbench.importer.pieces import copy_model

DEFAULT_RTOL = 1e-3   # float32 differences of a float32 loss, extrapolated


@dataclass
class DirectionCheck:
    analytic: float
    numeric: float
    rel_err: float


@dataclass
class GradientReport:
    model: str
    loss: str
    loss_value: float
    reference_loss: float
    directions: list = field(default_factory=list)
    rtol: float = DEFAULT_RTOL
    params: int = 0
    elements: int = 0

    @property
    def worst(self) -> float:
        return max((d.rel_err for d in self.directions), default=0.0)

    @property
    def match(self) -> bool:
        # a float32 sum over a whole batch's outputs rounds at about 1e-5 of itself
        loss_ok = abs(self.loss_value - self.reference_loss) <= self.rtol * max(
            1.0, abs(self.reference_loss))
        return loss_ok and self.worst <= self.rtol

    def text(self) -> str:
        lines = [f"{self.model}: loss {self.loss} = {self.loss_value:.7g} (onnxruntime "
                 f"{self.reference_loss:.7g}); gradient of {self.params} parameters "
                 f"({self.elements:,} values) along {len(self.directions)} directions:"]
        for i, d in enumerate(self.directions):
            lines.append(f"  direction {i}: program {d.analytic:.7g}, central differences "
                         f"{d.numeric:.7g}, relative error {d.rel_err:.2e}")
        lines.append(f"worst relative error {self.worst:.2e} (rtol {self.rtol:g}): "
                     f"{'match' if self.match else 'MISMATCH'}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"model": self.model, "loss": self.loss, "loss_value": self.loss_value,
                "reference_loss": self.reference_loss, "match": self.match,
                "worst_rel_err": self.worst, "rtol": self.rtol, "params": self.params,
                "elements": self.elements,
                "directions": [d.__dict__ for d in self.directions]}


def reference_loss_fn(model, params, output: str, loss_kind: str, labels):
    """loss(params) by onnxruntime on ``model`` with ``params`` as inputs, in float64."""
    import onnxruntime as ort
    from onnx import helper
    m = copy_model(model)
    graph = m.graph
    keep = [t for t in graph.initializer if t.name not in params]
    for t in graph.initializer:
        if t.name in params:
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del graph.initializer[:]
    graph.initializer.extend(keep)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])

    def loss(values: dict, data: dict) -> float:
        feeds = {**data, **{k: v.astype(np.float32) for k, v in values.items()}}
        y = np.asarray(session.run([output], feeds)[0], dtype=np.float64)
        return _loss(loss_kind, y, labels)
    return loss


def _loss(kind, y, labels) -> float:
    if kind == "output":
        return float(y.reshape(-1)[0])
    if kind == "mse":
        return float(np.mean((y - labels) ** 2))
    # cross entropy over axis 1
    shifted = y - y.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    picked = np.take_along_axis(log_p, np.expand_dims(labels.astype(np.int64), 1), axis=1)
    return float(-picked.mean())


def check_gradients(tr, batch: dict, directions: int = 4, seed: int = 0,
                    rtol: float = DEFAULT_RTOL, reference_model=None) -> GradientReport:
    """``tr``: a TrainingSession built without an optimizer. ``reference_model``:
    the user's model with its input shapes fixed (default: the one the session's
    program was built from)."""
    prog = tr.program
    got = tr.gradients(batch)
    model = reference_model if reference_model is not None else tr.reference_source
    output = prog.forward.graph.output[0].name if prog.output is None else prog.output
    labels = batch.get(prog.labels[0]) if prog.labels else None
    data = {k: v for k, v in batch.items() if k in prog.data}
    theta = {p: prog.state[p].astype(np.float64) for p in prog.params}
    loss_at = reference_loss_fn(model, set(prog.params), output, prog.loss_kind, labels)
    report = GradientReport(tr.name, prog.loss_kind, got["loss"], loss_at(theta, data),
                            rtol=rtol, params=len(prog.params),
                            elements=int(sum(v.size for v in theta.values())))
    rng = np.random.default_rng(seed)
    grads = {p: np.asarray(got[p], np.float64) for p in prog.params}
    norm = np.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    scale_l = max(abs(report.reference_loss), 1e-3)
    for _ in range(directions):
        u = {p: g * rng.uniform(0.0, 2.0, g.shape) + rng.standard_normal(g.shape) * (
            norm / np.sqrt(max(report.elements, 1)) * 0.5) for p, g in grads.items()}
        analytic = sum(float((grads[p] * u[p]).sum()) for p in grads)
        h = 1e-3 * scale_l / max(abs(analytic), 1e-12)

        def central(step):
            plus = loss_at({p: theta[p] + step * u[p] for p in theta}, data)
            minus = loss_at({p: theta[p] - step * u[p] for p in theta}, data)
            return (plus - minus) / (2 * step)
        coarse, fine = central(h), central(h / 2)
        numeric = (4 * fine - coarse) / 3
        err = abs(analytic - numeric) / max(abs(numeric), 1e-12)
        report.directions.append(DirectionCheck(analytic, numeric, err))
    return report
