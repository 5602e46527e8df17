"""Comparing outputs with a reference.

An element matches when ``|out - ref| <= rtol * |ref| + atol * max(1, max|ref|)``:
the absolute part scales with the output's largest value, so outputs that
are near zero by construction do not fail on rounding. float16 outputs are
checked at least as loosely as float16's precision allows, quantized ones to
one step of their scale (see below). ``max_rel_err`` is
the largest error relative to the largest reference value.
"""
from dataclasses import asdict, dataclass, field

import numpy as np

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4
# A float16 output is checked at least this loosely: 4 units of float16's epsilon (2**-10),
# relative and against the output's scale. The workbench rounds every operator's output to
# float16; onnxruntime keeps float32 across the operators it runs through casts (Exp then
# Add: one unit apart; BERT's pooler after two layers: 1.05 units of its scale).
HALF_RTOL = HALF_ATOL = 4 * 2.0 ** -10
# A quantized output (a DequantizeLinear's result, or a QuantizeLinear's integers) may also
# differ by one step of its scale: where a sum lands beside a rounding boundary, an integer
# kernel and a float one round it to neighbouring integers. onnxruntime's own two routes
# (ORT_ENABLE_ALL's integer kernels, ORT_DISABLE_ALL's float ones) differ by one step in 72
# of ResNet-18's 1,000 QDQ logits; more than one step is a real difference. (The slack covers
# the float32 rounding of the two dequantized values, which scales with their size.)
STEP_SLACK = 1.001
# An output that moves when the inputs move by one unit in the last place is
# ill-conditioned: AdamW's first step moves a parameter by lr * g / (|g| + eps), and a
# gradient within a few thousand eps of zero flips on rounding. The workbench sums in
# another order than onnxruntime, which is such a move: an output may differ from the
# reference by this many times what one-ulp moves of the inputs do to onnxruntime's own
# answer (the bundled MLP's AdamW update: 5.6e-4 and 1.3e-3 for half-ulp moves,
# 8.8e-4 and 6.9e-4 for one ulp, the workbench 5.7e-4 and 9.2e-4).
SPREAD_FACTOR = 4.0


@dataclass
class OutputCheck:
    name: str
    match: bool
    max_abs_err: float
    max_rel_err: float
    shape: list
    problem: str = ""  # shape/dtype mismatch or non-finite values
    half: bool = False  # checked with the float16 tolerances
    step: float = 0.0   # a quantized output's step: differences up to it match
    spread: float = 0.0  # one-ulp moves of the inputs move the reference this much


@dataclass
class VerifyReport:
    model: str
    match: bool
    outputs: list
    reference: str = "onnxruntime"
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    timings: dict = field(default_factory=dict)

    def worst(self) -> OutputCheck:
        return max(self.outputs, key=lambda o: (not o.match, o.max_rel_err))

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        half = any(o.half for o in self.outputs)
        lines = [f"{self.model}: {'MATCH' if self.match else 'MISMATCH'} against {self.reference} "
                 f"(rtol {self.rtol:g}, atol {self.atol:g}"
                 + (f"; float16 outputs: rtol {max(self.rtol, HALF_RTOL):g}, "
                    f"atol {max(self.atol, HALF_ATOL):g}" if half else "") + ")"]
        for o in self.outputs:
            status = "ok " if o.match else "BAD"
            extra = f"  {o.problem}" if o.problem else ""
            if o.step:
                extra += f"  (quantized: within one step, {o.step:.3g})"
            if o.spread:
                extra += (f"  (ill-conditioned: inputs moved by one ulp move the reference "
                          f"by up to {o.spread:.3g}; allowed {SPREAD_FACTOR:g}x that)")
            lines.append(f"  {status} {o.name} {tuple(o.shape)}: max abs err {o.max_abs_err:.3g}, "
                         f"max rel err {o.max_rel_err:.3g}{extra}")
        return "\n".join(lines)


def quantization_steps(model) -> dict:
    """Output name -> its quantization step, for the ONNX ``model``'s outputs that a
    DequantizeLinear (its largest constant scale) or a QuantizeLinear (1) writes."""
    outputs = {o.name for o in model.graph.output}
    scales = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] in outputs:
            scales[node.output[0]] = None
        elif node.op_type == "DequantizeLinear" and node.output[0] in outputs:
            scales[node.output[0]] = node.input[1]
    if not scales:
        return {}
    from onnx import numpy_helper
    tensors = {t.name: t for t in model.graph.initializer if t.name in set(scales.values())}
    steps = {}
    for output, scale in scales.items():
        if scale is None:
            steps[output] = 1.0
        elif scale in tensors:
            steps[output] = float(np.abs(numpy_helper.to_array(tensors[scale])).max())
    return steps


def compare(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
            step: float = 0.0, spread: float = 0.0) -> OutputCheck:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return OutputCheck(name, False, float("inf"), float("inf"), list(ref.shape),
                           f"shape {got.shape} != reference {ref.shape}")
    if ref.dtype.kind in "biu" or got.dtype.kind in "biu":
        if ref.dtype.kind != got.dtype.kind and ref.dtype != got.dtype:
            problem = f"dtype {got.dtype} != reference {ref.dtype}"
            return OutputCheck(name, False, float("inf"), float("inf"), list(ref.shape), problem)
    if ref.size == 0:
        return OutputCheck(name, True, 0.0, 0.0, list(ref.shape))
    half = np.float16 in (ref.dtype, got.dtype)
    if half:
        rtol, atol = max(rtol, HALF_RTOL), max(atol, HALF_ATOL)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(r)
    same_inf = np.isinf(r) & (g == r)
    err = np.where(both_nan | same_inf, 0.0, np.abs(g - r))
    err = np.where(np.isnan(err), np.inf, err)
    finite_ref = r[np.isfinite(r)]
    scale = max(1.0, float(np.abs(finite_ref).max())) if finite_ref.size else 1.0
    bound = rtol * np.where(np.isfinite(r), np.abs(r), 0.0) + atol * scale
    ok = bool(np.all(err <= np.maximum(bound, max(step * STEP_SLACK, spread * SPREAD_FACTOR))))
    max_abs = float(err.max())
    largest = float(np.abs(finite_ref).max()) if finite_ref.size else 0.0
    max_rel = max_abs / largest if largest > 0 else (0.0 if max_abs == 0 else float("inf"))
    return OutputCheck(name, ok, max_abs, max_rel, list(ref.shape), half=half, step=step,
                       spread=spread)


def compare_all(model: str, outputs: dict, reference: dict, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL,
                reference_name="onnxruntime", steps: dict = None,
                spreads: dict = None) -> VerifyReport:
    """``steps``: quantized outputs' steps (``quantization_steps``); ``spreads``: how far
    one-ulp moves of the inputs move each output's reference (``spreads_between``)."""
    checks = []
    for name, ref in reference.items():
        if name not in outputs:
            checks.append(OutputCheck(name, False, float("inf"), float("inf"),
                                      list(np.shape(ref)), "output missing"))
        else:
            checks.append(compare(name, outputs[name], ref, rtol, atol,
                                  (steps or {}).get(name, 0.0), (spreads or {}).get(name, 0.0)))
    return VerifyReport(model, all(c.match for c in checks), checks, reference_name, rtol, atol)


def compare_conditioned(model: str, outputs: dict, reference: dict, moved_reference,
                        rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL, reference_name="onnxruntime",
                        steps: dict = None) -> VerifyReport:
    """``compare_all``; where an output fails, the reference on inputs one ulp apart
    (``moved_reference()``, only then computed) widens its bound (``SPREAD_FACTOR``)."""
    report = compare_all(model, outputs, reference, rtol, atol, reference_name, steps)
    bad = [o.name for o in report.outputs if not o.match and not o.problem]
    if report.match or not bad:
        return report
    return compare_all(model, outputs, reference, rtol, atol, reference_name, steps,
                       spreads_between(reference, moved_reference(), bad))


def one_ulp_apart(feeds: dict, seed: int = 0) -> dict:
    """``feeds`` with every float element moved one unit in the last place up or down (at
    random): the reference run on them shows how well-conditioned each output is."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in feeds.items():
        arr = np.asarray(value)
        if arr.dtype.kind != "f" or arr.size == 0:
            out[name] = value
            continue
        toward = np.where(rng.random(arr.shape) < 0.5, -np.inf, np.inf).astype(arr.dtype)
        out[name] = np.nextafter(arr, toward).astype(arr.dtype)
    return out


def spreads_between(reference: dict, moved: dict, names) -> dict:
    """Output -> the largest difference between the reference and its run on moved
    inputs (``one_ulp_apart``), for the float outputs ``names``."""
    out = {}
    for name in names:
        a, b = np.asarray(reference.get(name)), np.asarray(moved.get(name))
        if a.dtype.kind != "f" or a.shape != b.shape or a.size == 0:
            continue
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        diff = diff[np.isfinite(diff)]
        if diff.size and diff.max() > 0:
            out[name] = float(diff.max())
    return out
