"""ConvTranspose on oneDNN's deconvolution primitive: strided with output padding (a
negative right pad for the library), grouped, dilated 1-D, auto_pad, with and without
bias, equal to onnxruntime; weights a training program updates are packed every call."""
import pytest

import workbench
from fusion_helpers import F32, graph_model, node, rand

ON_ONEDNN = [{"transformation": "OnOneDNN", "all": True, "level": "local"}]

CASES = {
    "3x3 stride 2, output padding, bias": (
        (2, 32, 7, 7), (32, 16, 3, 3),
        dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), True),
    "1x1 stride 2 (negative right pad)": (
        (2, 32, 7, 7), (32, 16, 1, 1), dict(strides=[2, 2], output_padding=[1, 1]), False),
    "grouped, bias": (
        (2, 32, 7, 7), (32, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=4), True),
    "depthwise": ((2, 16, 8, 8), (16, 1, 2, 2), dict(strides=[2, 2], group=16), False),
    "1-D dilated, stride 3": ((2, 16, 9), (16, 8, 4), dict(strides=[3], pads=[1, 2],
                                                          dilations=[2]), True),
    "auto_pad SAME_UPPER": ((1, 8, 5, 5), (8, 8, 3, 3), dict(strides=[2, 2],
                                                            auto_pad="SAME_UPPER"), False),
}


def transposed_conv(x_shape, w_shape, attrs, bias):
    inits = {"w": rand(*w_shape, seed=2)}
    if bias:
        inits["b"] = rand(w_shape[1] * attrs.get("group", 1), seed=3)
    return graph_model([node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"],
                             **attrs)], {"x": (list(x_shape), F32)}, ["y"], inits)


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_transpose_on_onednn_equals_onnxruntime(case):
    ws = workbench.open(transposed_conv(*CASES[case]))
    applied = ws.optimize(ON_ONEDNN)
    assert len(applied) == 1 and "oneDNN" in applied[0]["description"], applied.skipped
    conv = next(n for s in ws.sdfg.states() for n in s.nodes()
                if getattr(n, "op_type", None) == "ConvTranspose")
    assert conv.implementation == "onednn" and conv.constant_weights
    report = ws.verify()
    assert report.match, report


def test_a_strided_convs_input_gradient_trains_on_the_library():
    """The training rule writes a strided Conv's input gradient as a ConvTranspose of dY
    with the Conv's weights, a parameter: on the library it is packed every step, and
    the losses of the steps equal the untuned program's."""
    model = graph_model([node("Conv", ["x", "w"], ["h"], strides=[2, 2], pads=[1, 1, 1, 1]),
                         node("Relu", ["h"], ["r"]),
                         node("Conv", ["r", "w2"], ["y"], strides=[2, 2])],
                        {"x": ([2, 8, 12, 12], F32)}, ["y"],
                        {"w": rand(16, 8, 3, 3, seed=1) * 0.3, "w2": rand(4, 16, 1, 1, seed=2)})
    steps = []
    for recipe in (None, ON_ONEDNN):
        tr = workbench.open(model).training(loss="mse", optimizer="sgd", lr=0.01)
        batch = tr.random_batch()
        if recipe:
            tr.optimize(recipe)
            back = [n for s in tr.sdfg.states() for n in s.nodes()
                    if getattr(n, "op_type", None) == "ConvTranspose"]
            assert back and all(n.implementation == "onednn" and not n.constant_weights
                                for n in back)
        steps.append([tr.step(batch) for _ in range(3)])
    assert steps[0][-1] < steps[0][0]
    assert steps[1] == pytest.approx(steps[0], rel=1e-4)


def test_one_build_serves_every_image_size(tmp_path):
    """The descriptor's sizes are expressions of the program's symbols, filled per call."""
    import onnx
    model = transposed_conv(*CASES["3x3 stride 2, output padding, bias"])
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "h"
    out = model.graph.output[0].type.tensor_type.shape.dim
    out[2].dim_param, out[3].dim_param = "2h", "2h"
    path = tmp_path / "deconv.onnx"
    onnx.save(model, path)
    ws = workbench.open(str(path), symbolic=["h"], input_shapes={"h": 7})
    assert len(ws.optimize(ON_ONEDNN)) == 1
    for size in (3, 7, 10):
        report = ws.verify(sizes={"h": size})
        assert report.match, (size, report)
