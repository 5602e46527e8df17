"""The gradient of a training program against the model file alone:
directional derivatives of the loss, by central differences on onnxruntime
running the user's model (its parameters fed as inputs, the loss computed
here in float64 from its outputs).

A random direction over millions of parameters is nearly orthogonal to the
gradient, so its derivative drowns in float32 rounding. Each direction is
the program's gradient with every element scaled by a random factor in
[0, 2] (a fresh factor per element and direction) plus a random component:
an element with the wrong sign or size changes the derivative. Directions
over all parameters at once are dominated by the largest gradients, so
each parameter tensor (up to ``per_tensor``, spread over the model) also
gets a direction of its own. The step is
chosen so the loss moves by about 1e-3 of itself without moving the
parameters by more than 1e-2 of their size; of three steps (h, h/4, h/16)
the one whose estimates at h and h/2 agree best is taken, the two combined
by Richardson extrapolation (cancelling the h^2 error). A derivative below
what float32 differences of the loss can resolve is reported, not judged.
"""
from dataclasses import dataclass, field

import numpy as np

from workbench.importer.pieces import copy_model

# float32 differences of a float32 loss through a deep network's kinks: U-Net's right
# gradients came within 6e-3, a Relu rule leaking 10 % of its gradient is off by > 0.1
DEFAULT_RTOL = 1e-2


@dataclass
class DirectionCheck:
    along: str           # "all parameters" or one parameter's name
    analytic: float
    numeric: float
    rel_err: float
    resolved: bool = True   # False: the derivative is below what float32 differences resolve


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
    def unresolved(self) -> int:
        return sum(not d.resolved for d in self.directions)

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
        for d in self.directions:
            verdict = (f"relative error {d.rel_err:.2e}" if d.resolved else
                       "below float32 resolution, not judged")
            lines.append(f"  {d.along}: program {d.analytic:.7g}, central differences "
                         f"{d.numeric:.7g}, {verdict}")
        lines.append(f"worst relative error {self.worst:.2e} (rtol {self.rtol:g}"
                     f"{f'; {self.unresolved} direction(s) below resolution' if self.unresolved else ''}"
                     f"): {'match' if self.match else 'MISMATCH'}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"model": self.model, "loss": self.loss, "loss_value": self.loss_value,
                "reference_loss": self.reference_loss, "match": self.match,
                "worst_rel_err": self.worst, "rtol": self.rtol, "params": self.params,
                "unresolved": self.unresolved,
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
                    rtol: float = DEFAULT_RTOL, reference_model=None,
                    per_tensor: int = 24) -> GradientReport:
    """``tr``: a TrainingSession built without an optimizer. ``reference_model``:
    the user's model with its input shapes fixed (default: the one the session's
    program was built from)."""
    prog = tr.program
    got = tr.gradients(batch)
    model = reference_model if reference_model is not None else tr.reference_source
    output = prog.output
    labels = batch.get(prog.labels[0]) if prog.labels else None
    data = {k: v for k, v in batch.items() if k in prog.data}
    theta = {p: prog.state[p].astype(np.float64) for p in prog.params}
    loss_at = reference_loss_fn(model, set(prog.params), output, prog.loss_kind, labels)
    report = GradientReport(tr.name, prog.loss_kind, got["loss"], loss_at(theta, data),
                            rtol=rtol, params=len(prog.params),
                            elements=int(sum(v.size for v in theta.values())))
    rng = np.random.default_rng(seed)
    grads = {p: np.asarray(got[p], np.float64) for p in prog.params}
    scale_l = max(abs(report.reference_loss), 1e-3)

    def central(u, step):
        plus = loss_at({p: theta[p] + step * u.get(p, 0) for p in theta}, data)
        minus = loss_at({p: theta[p] - step * u.get(p, 0) for p in theta}, data)
        return (plus - minus) / (2 * step)

    def check(along, names):
        norm = np.sqrt(sum(float((grads[p] ** 2).sum()) for p in names))
        size = sum(grads[p].size for p in names)
        u = {p: grads[p] * rng.uniform(0.0, 2.0, grads[p].shape) + rng.standard_normal(
            grads[p].shape) * (norm / np.sqrt(max(size, 1)) * 0.5) for p in names}
        if norm == 0.0:   # the loss does not depend on these: the differences must say 0
            u = {p: rng.standard_normal(grads[p].shape) for p in names}
        analytic = sum(float((grads[p] * u[p]).sum()) for p in names)
        u_norm = np.sqrt(sum(float((u[p] ** 2).sum()) for p in names))
        theta_norm = np.sqrt(sum(float((theta[p] ** 2).sum()) for p in names))
        # the loss moves by about 1e-3 of itself, but the parameters by at most 1e-2 of
        # their size: a layer with a tiny gradient would otherwise be pushed far into
        # the network's kinks (U-Net's deep layers: 20 % "errors" on right gradients)
        h = 1e-3 * scale_l / max(abs(analytic), 1e-30)
        h = min(h, 1e-2 * max(theta_norm, 1e-3) / max(u_norm, 1e-30))
        best = None
        for step in (h, h / 4, h / 16):   # the step whose two estimates agree best
            coarse, fine = central(u, step), central(u, step / 2)
            spread = abs(coarse - fine)
            if best is None or spread < best[0]:
                best = (spread, (4 * fine - coarse) / 3, step)
        _, numeric, step = best
        # float32 rounding of the loss (about 1e-7 of it) over the step: the smallest
        # derivative these differences can tell from zero
        noise = 1e-7 * scale_l / step
        resolved = bool(abs(analytic) > 10 * noise or abs(numeric) > 10 * noise)
        err = abs(analytic - numeric) / max(abs(numeric), abs(analytic), noise, 1e-6 * scale_l)
        report.directions.append(DirectionCheck(along, float(analytic), float(numeric),
                                                float(err) if resolved else 0.0, resolved))

    for _ in range(directions):
        check("all parameters", list(grads))
    names = list(prog.params)
    if len(names) > per_tensor:   # spread over the model: first, last and between
        names = [names[i] for i in np.linspace(0, len(names) - 1, per_tensor).astype(int)]
    for p in names:
        check(p, [p])
    return report
