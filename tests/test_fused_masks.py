"""ElementwiseChainFusion with comparisons, logic and Where (rule 5): a mask made and used
inside one group is a local of the fused kernel; a bool that comes from or goes to an
operator outside the group keeps its operators apart. Each fused program equals
onnxruntime."""
import numpy as np
import pytest

import workbench
from fusion_helpers import F32, apply_all, graph_model, node, rand
from workbench import transformation_api as transform

ZERO = {"zero": np.array(0, np.float32)}


def op_types(ws) -> list:
    return sorted(n.op_type for s in ws.sdfg.states() for n in s.nodes()
                  if getattr(n, "op_type", None))


def fused(model):
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    apply_all(ws, "ElementwiseChainFusion")
    report = ws.verify()
    assert report.match, report
    return ws, before


def test_a_relu_gradient_is_one_kernel():
    """What the training rule writes for Relu: Where(Greater(x, 0), dY, 0)."""
    model = graph_model([node("Greater", ["x", "zero"], ["m"]),
                         node("Where", ["m", "dy", "zero"], ["dx"])],
                        {"x": ([4, 8, 16], F32), "dy": ([4, 8, 16], F32)}, ["dx"], ZERO)
    ws, before = fused(model)
    assert op_types(ws) == ["FusedElementwise"]
    # the bool mask is neither written nor read (512 bytes, twice), nor the zero twice
    assert ws.data_movement().moved_bytes == before - 2 * 512 - 2 * 4


def test_a_clip_gradient_joins_its_bounds_and_the_product_after_it():
    model = graph_model([node("GreaterOrEqual", ["x", "lo"], ["above"]),
                         node("LessOrEqual", ["x", "hi"], ["below"]),
                         node("And", ["above", "below"], ["inside"]),
                         node("Where", ["inside", "dy", "zero"], ["g"]),
                         node("Mul", ["g", "s"], ["dx"])],
                        {"x": ([3, 40], F32), "dy": ([3, 40], F32), "s": ([3, 40], F32)},
                        ["dx"], {**ZERO, "lo": np.array(-0.5, np.float32),
                                 "hi": np.array(0.5, np.float32)})
    ws, _ = fused(model)
    assert op_types(ws) == ["FusedElementwise"]


@pytest.mark.parametrize("case", ["mask is an output", "mask is an input"])
def test_a_bool_crossing_the_group_keeps_its_operators_apart(case):
    if case == "mask is an output":
        model = graph_model([node("Greater", ["x", "zero"], ["m"]),
                             node("Where", ["m", "dy", "zero"], ["g"]),
                             node("Mul", ["g", "dy"], ["h"]), node("Add", ["h", "dy"], ["dx"])],
                            {"x": ([4, 16], F32), "dy": ([4, 16], F32)}, ["dx", "m"], ZERO)
        kept = ["Greater", "Where"]
    else:
        model = graph_model([node("Where", ["m", "dy", "zero"], ["g"]),
                             node("Mul", ["g", "dy"], ["h"]), node("Add", ["h", "dy"], ["dx"])],
                            {"m": ([4, 16], "bool"), "dy": ([4, 16], F32)}, ["dx"], ZERO)
        kept = ["Where"]
    ws, _ = fused(model)
    assert [t for t in op_types(ws) if t != "FusedElementwise"] == kept
    refusals = [r.reason for r in transform.get("ElementwiseChainFusion").refusals(ws.sdfg)]
    assert any("passes a bool" in r for r in refusals), refusals


def test_masks_between_float_types_are_not_joined():
    model = graph_model([node("Greater", ["x", "y"], ["m"]),
                         node("Where", ["m", "a", "b"], ["g"]),
                         node("Mul", ["g", "a"], ["out"])],
                        {"x": ([8], "float64"), "y": ([8], "float64"), "a": ([8], F32),
                         "b": ([8], F32)}, ["out"])
    ws, _ = fused(model)
    assert "Greater" in op_types(ws) and "Where" in op_types(ws)


def test_the_training_programs_activation_gradients_fuse():
    model = graph_model([node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                         node("Relu", ["c"], ["y"])],
                        {"x": ([2, 4, 8, 8], F32)}, ["y"], {"w": rand(8, 4, 3, 3, seed=1)})
    tr = workbench.open(model).training(loss="mse")
    apply_all(tr, "ElementwiseChainFusion")
    assert "Where" not in op_types(tr) and "Greater" not in op_types(tr)
    assert tr.verify().match
