"""How verify judges an ill-conditioned output: where inputs moved by one unit in the last
place move onnxruntime's answer, an output may differ from the reference by up to
SPREAD_FACTOR times that move, and the report says so. AdamW's first step is such an
output: it moves a parameter by about lr * sign(g), so a gradient near zero flips on
rounding (the bundled MLP's training program, built with AdamW)."""
import numpy as np

import workbench
from workbench.runtime.verify import SPREAD_FACTOR, compare, one_ulp_apart, spreads_between


def test_an_output_may_differ_as_the_reference_moves_with_its_inputs():
    ref = np.linspace(-1.0, 1.0, 64).astype(np.float32)
    spread = 1e-3
    close = ref + np.float32(0.9 * SPREAD_FACTOR * spread)
    far = ref + np.float32(1.2 * SPREAD_FACTOR * spread)
    assert not compare("w", close, ref, 1e-3, 1e-4).match
    assert compare("w", close, ref, 1e-3, 1e-4, spread=spread).match
    assert not compare("w", far, ref, 1e-3, 1e-4, spread=spread).match


def test_the_spread_is_the_largest_difference_of_float_outputs():
    a = {"x": np.array([1.0, 2.0, 3.0]), "i": np.array([1, 2]), "same": np.ones(3)}
    b = {"x": np.array([1.0, 2.5, 3.0]), "i": np.array([1, 3]), "same": np.ones(3)}
    assert spreads_between(a, b, ["x", "i", "same"]) == {"x": 0.5}


def test_inputs_move_by_exactly_one_ulp_and_integers_stay():
    x = np.array([1.0, -2.5, 0.0, 3e-30], np.float32)
    ids = np.array([3, 4], np.int64)
    moved = one_ulp_apart({"x": x, "ids": ids})
    assert moved["x"].dtype == np.float32 and np.array_equal(moved["ids"], ids)
    ulps = np.abs(moved["x"].view(np.int32).astype(np.int64) - x.view(np.int32))
    assert np.all((ulps == 1) | ((x == 0) & (moved["x"] != 0)))


def test_adamw_training_program_verifies_within_onnxruntimes_own_spread():
    tr = workbench.open("mlp").training(loss="mse", optimizer="adamw")
    report = tr.verify()
    assert report.match, report.text()
    widened = [o for o in report.outputs if o.spread > 0]
    # without the spread some update fails the plain bound: that is what this is for
    assert widened, report.text()
    for o in widened:
        assert o.max_abs_err <= SPREAD_FACTOR * o.spread
        assert o.name.startswith("next_")
    assert "ill-conditioned" in report.text()
