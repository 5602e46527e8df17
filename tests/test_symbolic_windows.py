"""Sizes after strided windows stay symbolic (issue 30): ``(frames - 1)//2 + 1`` after
Whisper's stride-2 Conv, every stage of a CNN opened with a symbolic height and width.

The forms come from onnxruntime's symbolic shape inference and the probe imports choose
among them (``workbench/importer/size_forms.py``); each program here is built once and
compared with onnxruntime at sizes of every parity, after ``default`` and ``auto``."""
import importlib.util

import numpy as np
import onnx
import pytest
import sympy

import workbench
from workbench.importer import size_forms
from workbench.importer.symbolic import dim_text
from workbench.runtime.reference import run_reference

EXPORTS = "tests/exports"
H = sympy.Symbol("height", integer=True, positive=True)


def _at_any_resolution(name) -> onnx.ModelProto:
    """The committed export of a CNN with its height and width made dynamic axes, as
    torch writes them when asked (``dynamic_axes``): nothing in these graphs depends on
    the resolution but the sizes, so the file is otherwise the same."""
    model = onnx.load(f"{EXPORTS}/{name}.onnx")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param = "batch"
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    del model.graph.value_info[:]
    return model


@pytest.mark.parametrize("recipe", [None, "auto"])
def test_whisper_encoder_at_four_frame_counts_from_one_build(recipe):
    ws = workbench.open(f"{EXPORTS}/whisper_encoder.onnx", symbolic=["frames"],
                        input_shapes={"batch": 1, "frames": 16})
    out = ws.model.outputs[0]
    assert dim_text(out.shape[1]) == "((frames - 1)//2) + 1"
    if recipe:
        ws.optimize(recipe)
    for frames in (16, 33, 64, 101):
        report = ws.verify(sizes={"frames": frames})
        assert report.match, (frames, report)
        assert report.outputs[0].shape == [1, (frames - 1) // 2 + 1, 64]


# residual stages; depthwise stride-2 blocks; pools in ceil mode (DenseNet and EfficientNet
# also verify: BENCHMARKS.md, twenty-third session)
@pytest.mark.parametrize("model", ["resnet", "mobilenetv2", "squeezenet"])
def test_a_cnn_at_any_resolution_from_one_build(model):
    ws = workbench.open(_at_any_resolution(model), symbolic=["height", "width"],
                        input_shapes={"batch": 1})
    ws.optimize("auto")
    for height, width in ((64, 64), (37, 50)):
        report = ws.verify(sizes={"height": height, "width": width})
        assert report.match, (model, height, width, report)


def test_an_exported_program_takes_every_frame_count(tmp_path):
    ws = workbench.open(f"{EXPORTS}/whisper_encoder.onnx", symbolic=["frames"],
                        input_shapes={"batch": 1, "frames": 16})
    ws.optimize("default")
    assert ws.export(tmp_path)["check"]["match"]
    spec = importlib.util.spec_from_file_location("exported_run", tmp_path / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    program = run.Program(tmp_path)
    try:
        for frames in (7, 33, 100):
            inputs = program.random_inputs(seed=frames, sizes={"frames": frames})
            got = program(inputs)
            want, _ = run_reference(ws.model.reference_model, ws.reference_feeds(inputs))
            value = want["last_hidden_state"]
            assert got["last_hidden_state"].shape == value.shape == (1, (frames + 1) // 2, 64)
            np.testing.assert_allclose(got["last_hidden_state"], value, rtol=1e-4, atol=1e-4)
    finally:
        program.close()


def test_a_resolution_the_model_cannot_take_everywhere_is_refused_by_name():
    """U-Net pads its upsampled maps to the skip connection's size, computed from the
    size: the tensors that are not sized at import are named."""
    from workbench.errors import ShapeError
    with pytest.raises(ShapeError, match=r"/ups\.0/"):
        workbench.open(_at_any_resolution("unet"), symbolic=["height", "width"],
                       input_shapes={"batch": 1})


@pytest.mark.parametrize("text, divisor", [
    ("floor(floor(height/2 - 1/2)/2) + 1", 4),                              # conv, pool
    ("ceiling(ceiling(floor(height/2 - 3/2)/2)/2 - 3/2) + 1", 8),           # ceil_mode pools
    ("ceiling(ceiling(ceiling(floor(height/2 - 3/2)/2)/2 - 3/2)/2)", 16),
    ("floor(floor(floor(floor(height/2 - 1/2)/2)/2 - 1/2)/2 - 1/2) + 1", 16),
])
def test_nested_windows_flatten_to_one_floor_of_the_same_value(text, divisor):
    nested = sympy.sympify(text, locals={"height": H})
    flat = size_forms._flatten(nested, [H])
    floors = flat.atoms(sympy.floor)
    assert len(floors) == 1 and not flat.atoms(sympy.ceiling)
    assert sympy.fraction(sympy.together(next(iter(floors)).args[0]))[1] == divisor
    for h in range(3, 600):
        assert int(flat.subs(H, h)) == int(nested.subs(H, h)), h


def test_two_forms_that_meet_at_the_probes_are_told_apart_where_they_differ():
    a = sympy.floor((H - 1) / 4) + 1
    b = 2 * sympy.floor((H - 1) / 8) + 1
    base = {"height": 225}
    assert int(a.subs(H, 225)) == int(b.subs(H, 225))
    where = size_forms.where_differ(a, b, ["height"], base)
    assert where["height"] > 225
    assert int(a.subs(H, where["height"])) != int(b.subs(H, where["height"]))
    assert size_forms.where_differ(sympy.floor((H + 1) / 2), sympy.floor((H - 1) / 2) + 1,
                                   ["height"], base) is None


def test_whisper_forms_come_from_symbolic_inference():
    from workbench.importer.shapes import fix_input_shapes
    model = fix_input_shapes(onnx.load(f"{EXPORTS}/whisper_encoder.onnx"), {"batch": 1},
                             keep=("frames",))
    frames = sympy.Symbol("frames", integer=True, positive=True)
    found = size_forms.forms(model, ("frames",))
    assert any(all(int(f.subs(frames, v)) == (v - 1) // 2 + 1 for v in range(1, 300))
               for f in found), found
