"""Convolutions in training programs on oneDNN: a correlation whose kernel is larger than
its result (a weight gradient) runs on the backward-weights primitive and equals
onnxruntime, grouped and dilated too; weights the program writes (a training program's
parameters) are packed again on every call, where a sample of them would not show that
they changed."""
import ctypes

import numpy as np
import pytest

import workbench
from fusion_helpers import F32, graph_model, node, rand
from workbench.build import onednn
from workbench.errors import UnsupportedCaseError
from workbench.ops.conv_onednn import library_desc
from workbench.ops.registry import make_call

ON_ONEDNN = [{"transformation": "OnOneDNN", "all": True, "level": "local"}]

# (x, kernel, attributes): the shapes a training program's weight gradients have
CORRELATIONS = {
    "stride 1": ((16, 8, 14, 14), (32, 8, 14, 14), dict(pads=[1, 1, 1, 1])),
    "stride 2 (dilated)": ((16, 8, 14, 14), (32, 8, 7, 7), dict(pads=[1, 1, 1, 1],
                                                               dilations=[2, 2])),
    "1x1 stride 2": ((16, 8, 14, 14), (32, 8, 7, 7), dict(dilations=[2, 2])),
    "depthwise": ((1, 8 * 16, 14, 14), (16, 8, 14, 14), dict(pads=[1, 1, 1, 1], group=16)),
    "1-D": ((6, 4, 30), (10, 4, 28), dict(pads=[1, 1])),
}


def correlation(x_shape, w_shape, attrs):
    return graph_model([node("Conv", ["x", "w"], ["y"], **attrs)],
                       {"x": (list(x_shape), F32), "w": (list(w_shape), F32)}, ["y"])


def conv_desc_of(ws):
    """The shim's descriptor and function for the model's one Conv."""
    conv, state = next((n, s) for s in ws.sdfg.states() for n in s.nodes()
                       if getattr(n, "op_type", None) == "Conv")
    call = make_call(conv, state, ws.sdfg)
    return library_desc(call, call.input(0), call.input(1), call.output(0), False)


@pytest.mark.parametrize("case", sorted(CORRELATIONS))
def test_a_correlation_runs_on_the_backward_weights_primitive(case):
    ws = workbench.open(correlation(*CORRELATIONS[case]))
    applied = ws.optimize(ON_ONEDNN)
    assert len(applied) == 1, applied.skipped
    desc, function = conv_desc_of(ws)
    assert function == "wb_dnnl_wgrad" and isinstance(desc, onednn.WGradDesc)
    ok, kernel = onednn.check(desc)
    assert ok and not kernel.startswith("ref"), kernel
    report = ws.verify()
    assert report.match, report


def test_a_grouped_correlation_with_several_channels_per_group_keeps_the_forward_form():
    ws = workbench.open(correlation((2, 8 * 4, 10, 10), (8, 8, 10, 10),
                                    dict(pads=[1, 1, 1, 1], group=4)))
    with pytest.raises(UnsupportedCaseError, match="several channels"):
        conv_desc_of(ws)
    ws.optimize(ON_ONEDNN)
    assert ws.verify().match


def test_a_convolution_with_an_ordinary_kernel_keeps_the_forward_primitive():
    ws = workbench.open(correlation((2, 8, 14, 14), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])))
    desc, function = conv_desc_of(ws)
    assert function == "wb_dnnl_conv" and isinstance(desc, onednn.ConvDesc)


def shim_conv(lib, ctx, d, x, w, y):
    assert lib.wb_dnnl_conv(ctx, ctypes.byref(d), x.ctypes.data, w.ctypes.data, None, None,
                            y.ctypes.data) == 0
    return y.copy()


def conv_3x3(x, w):
    """Conv(x, w) with pads 1 in numpy."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0]) + x.shape[2:], np.float32)
    for i in range(3):
        for j in range(3):
            window = padded[:, :, i:i + x.shape[2], j:j + x.shape[3]]
            out += np.einsum("nchw,mc->nmhw", window, w[:, :, i, j])
    return out


@pytest.mark.parametrize("vary", [0, 1])
def test_weights_that_vary_are_packed_again_even_where_the_sample_is_unchanged(vary):
    """64 filters of 4 x 3 x 3: the shim's 64-value sample reads tap (0, 0) of input
    channel 0 of each filter, which a dead input channel's gradient never moves."""
    lib = onednn._lib()
    ctx = lib.wb_dnnl_context_new()
    d = onednn.ConvDesc()
    d.nsp, d.n, d.c, d.m, d.groups, d.weights_vary = 2, 2, 4, 64, 1, vary
    for i in range(2):
        d.in_[i], d.out[i], d.k[i], d.stride[i], d.dil[i] = 6, 6, 3, 1, 1
        d.pad_l[i] = d.pad_r[i] = 1
    for i, s in enumerate((144, 36, 6, 1)):
        d.src_strides[i] = s
    for i, s in enumerate((2304, 36, 6, 1)):
        d.dst_strides[i] = s
    x, w = rand(2, 4, 6, 6, seed=1), rand(64, 4, 3, 3, seed=2)
    y = np.zeros((2, 64, 6, 6), np.float32)
    try:
        first = shim_conv(lib, ctx, d, x, w, y)
        w[:, 1:] *= 0.5   # an update that leaves input channel 0 alone, in place
        second = shim_conv(lib, ctx, d, x, w, y)
    finally:
        lib.wb_dnnl_context_free(ctx)
    np.testing.assert_allclose(first, conv_3x3(x, w * np.r_[1, 2, 2, 2].reshape(1, 4, 1, 1)),
                               rtol=1e-4, atol=1e-4)
    if vary:
        np.testing.assert_allclose(second, conv_3x3(x, w), rtol=1e-4, atol=1e-4)
    else:   # what a constant's packing cannot see: why a training program sets the flag
        np.testing.assert_array_equal(second, first)


def test_only_an_inference_programs_weights_are_packed_once():
    model = graph_model([node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                        {"x": ([2, 4, 6, 6], F32)}, ["y"], {"w": rand(8, 4, 3, 3, seed=3)})
    inference = workbench.open(model)
    training = workbench.open(model).training(loss="mse", optimizer="sgd")
    for ws, vary in ((inference, 0), (training, 1)):
        ws.optimize(ON_ONEDNN)
        conv, state = next((n, s) for s in ws.sdfg.states() for n in s.nodes()
                           if getattr(n, "op_type", None) == "Conv" and n.onnx_name == "/y/Conv")
        assert conv.implementation == "onednn" and conv.constant_weights == (not vary)
        call = make_call(conv, state, ws.sdfg)
        desc, function = library_desc(call, call.input(0), call.input(1), call.output(0), False)
        assert function == "wb_dnnl_conv" and desc.weights_vary == vary


FOLD = [{"transformation": "OnOneDNN", "all": True, "level": "local"},
        {"transformation": "FoldTransposeIntoConsumer", "all": True, "level": "layout"}]


@pytest.mark.parametrize("kernel_shape, x_shape, folds", [
    ((8, 32, 14, 14), (16, 8, 14, 14), True),     # a correlation: backward-weights reads it
    ((8, 16, 3, 3), (2, 8, 6, 6), False),         # a forward kernel: packed row-major
])
def test_a_transposed_kernel_is_read_in_place_only_by_a_correlation(kernel_shape, x_shape, folds):
    model = graph_model([node("Transpose", ["k"], ["w"], perm=[1, 0, 2, 3]),
                         node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                        {"x": (list(x_shape), F32), "k": (list(kernel_shape), F32)}, ["y"])
    ws = workbench.open(model)
    ws.optimize(FOLD)
    left = [n for s in ws.sdfg.states() for n in s.nodes()
            if getattr(n, "op_type", None) == "Transpose"]
    assert (not left) == folds
    assert ws.verify().match


def test_resnet_training_after_auto_equals_onnxruntime():
    """Small spatial sizes put some weight gradients in the forward form (the kernel, dY,
    covers fewer positions than the result): their transposed dY must not be folded."""
    tr = workbench.open("zoo:resnet", input_shapes={"batch": 2}).training(
        loss="cross_entropy", optimizer="sgd", lr=0.01)
    tr.optimize("auto")
    report = tr.verify()
    assert report.match, [o.name for o in report.outputs if not o.match]
