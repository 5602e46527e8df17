"""oneDNN kernels: every kind of convolution and pool the zoo has, on the library, with
epilogues as post-ops and channels-last tensors between them, equal to onnxruntime;
the post-op recognizer refuses what is not a chain; row-major code refuses
channels-last data; new weights behind the same program are picked up."""
import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import workbench
from fusion_helpers import F32, graph_model, node, rand, verify
from onnx_helpers import onnx_ops
from workbench import transformation_api as transform
from workbench.build import onednn
from workbench.errors import WorkbenchError
from transforms.local.library_kernels import fast, onednn_kernel
from workbench.ops.conv_onednn import post_ops


def test_onednn_is_installed_by_the_project():
    # pyproject installs onednn-cpu-gomp(-devel) on Linux x86-64, where the suite runs
    assert onednn.available(), "oneDNN not found: run `make setup` (pyproject dependencies)"


def conv_zoo_model():
    """1x1, 3x3, 5x5 asymmetric pads, strided, depthwise, grouped + dilated, 1-D; every
    epilogue kind (ReLU, Clip, SiLU, HardSwish, Sigmoid, residual Add + ReLU); pools."""
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), node("Relu", ["c1"], ["r1"]),
        node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2]),
        node("Clip", ["c2", "lo", "hi"], ["k2"]),
        node("Conv", ["k2", "w3", "b3"], ["c3"], group=16, pads=[1, 1, 1, 1]),
        node("Sigmoid", ["c3"], ["s3"]), node("Mul", ["c3", "s3"], ["silu3"]),
        node("Conv", ["silu3", "w4", "b4"], ["c4"], group=4, dilations=[2, 2],
             pads=[2, 2, 2, 2]),
        node("Add", ["c4", "silu3"], ["a4"]), node("Relu", ["a4"], ["r4"]),
        node("MaxPool", ["r4"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        node("AveragePool", ["p1"], ["p2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
        node("Conv", ["p2", "w5", "b5"], ["c5"], pads=[2, 1, 2, 3]),
        node("HardSwish", ["c5"], ["y"]),
        node("GlobalAveragePool", ["y"], ["g"]),
        node("Conv", ["z", "w6", "b6"], ["c6"], strides=[2]), node("Sigmoid", ["c6"], ["y1d"]),
    ]
    inits = {"w1": rand(16, 8, 3, 3, seed=1), "b1": rand(16, seed=2),
             "w2": rand(16, 16, 1, 1, seed=3), "lo": np.array(0, F32), "hi": np.array(6, F32),
             "w3": rand(16, 1, 3, 3, seed=4), "b3": rand(16, seed=5),
             "w4": rand(16, 4, 3, 3, seed=6), "b4": rand(16, seed=7),
             "w5": rand(8, 16, 5, 5, seed=8), "b5": rand(8, seed=9),
             "w6": rand(6, 4, 3, seed=10), "b6": rand(6, seed=11)}
    return graph_model(nodes, {"x": ([1, 8, 20, 20], F32), "z": ([1, 4, 21], F32)},
                       ["y", "g", "y1d"], inits)


@pytest.fixture(scope="module")
def optimized():
    ws = workbench.open(conv_zoo_model())
    ws.optimize("auto")
    return ws


def _imported_pool_kernel() -> str:
    """oneDNN's kernel for the global pool as imported (on the row-major graph output)."""
    ws = workbench.open(conv_zoo_model())
    [(pool, state)] = [(n, st) for n, st in ws.sdfg.all_nodes_recursive()
                     if getattr(n, "onnx_name", "") == "/g/GlobalAveragePool"]
    return onednn_kernel(ws.sdfg, state, pool)


def test_every_conv_and_pool_runs_on_onednn_and_matches(optimized):
    ws = optimized
    on_library = {n.onnx_name: n.implementation for n in onnx_ops(ws.sdfg)
                  if n.op_type in ("Conv", "ConvEpilogue", "MaxPool", "AveragePool",
                                   "GlobalAveragePool")}
    assert len(on_library) >= 8, on_library
    # the global pool reads y, a graph output (row-major): on AVX2 oneDNN has only its
    # plain-layout loops there (simple_nchw), slower than the workbench's own row kernel,
    # so it stays; with AVX-512 oneDNN has a jit kernel for it and runs it
    assert on_library.pop("/g/GlobalAveragePool") == \
        ("onednn" if fast(_imported_pool_kernel()) else "pure")
    assert set(on_library.values()) == {"onednn"}, on_library
    # every epilogue became post-ops: no element-wise operator is left
    assert not [n.op_type for n in onnx_ops(ws.sdfg)
                if n.op_type in ("Relu", "Clip", "Sigmoid", "Mul", "Add", "HardSwish",
                                 "FusedElementwise")]
    steps = [s["transformation"] for s in ws.history]
    assert "ChannelsLast" in steps
    last = [a for a, d in ws.sdfg.arrays.items()
            if d.transient and len(d.shape) == 4 and d.strides[1] == 1 and d.shape[1] > 1]
    assert len(last) >= 4, last
    verify(ws)


def test_channels_last_data_is_refused_by_row_major_code(optimized):
    ws = optimized
    # c4 reads and writes channels-last tensors: no implementation but oneDNN is offered
    choose = transform.get("ChooseImplementation")
    offered = [m.description for m in choose.find(ws.sdfg)]
    assert any("c6/Conv" in d for d in offered)  # reads and writes graph tensors as they are
    assert not any("c4/Conv" in d for d in offered), offered
    # and an implementation set by other means fails to build, with a typed error,
    # rather than reading the data as row-major
    sdfg = ws.sdfg.to_json()
    c4 = next(n for n in onnx_ops(ws.sdfg) if "c4/Conv" in n.onnx_name)
    c4.implementation = "pure"
    try:
        with pytest.raises(WorkbenchError, match="channels-last"):
            ws.build()
    finally:
        c4.implementation = "onednn"
    assert ws.sdfg.to_json() == sdfg


@pytest.mark.parametrize("code,expect,residual", [
    ("t0 = acc\nt1 = max(t0, 0)\ny0 = t1", [("relu", 0.0, 0.0)], None),
    ("t0 = acc\nt1 = 0 if t0 < 0 else t0\ny0 = t1", [("relu", 0.0, 0.0)], None),   # Relu's
    ("t0 = acc\nt2 = t0 + x0\nt3 = max(t2, 0)\nt1 = t3\ny0 = t1",
     [("add", 0.0, 0.0), ("relu", 0.0, 0.0)], "x0"),
    ("t0 = acc\nt1 = x0 + t0\ny0 = t1", [("add", 0.0, 0.0)], "x0"),
    ("t0 = acc\nt2 = 1 / (1 + exp(-t0))\nt3 = t0 * t2\ny0 = t3", [("swish", 1.0, 0.0)], None),
    ("t0 = acc\nt1 = 1 / (1 + exp(-t0))\ny0 = t1", [("sigmoid", 1.0, 0.0)], None),
    ("t0 = acc\nt1 = t0 * max(0, min(1, t0 / 6 + 0.5))\ny0 = t1",
     [("hardswish", 1 / 6, 0.5)], None),
    ("t0 = acc\nt1 = dace.float32(6.0) if dace.float32(0.0) > dace.float32(6.0) else "
     "(dace.float32(6.0) if t0 > dace.float32(6.0) else (dace.float32(0.0) if "
     "t0 < dace.float32(0.0) else t0))\ny0 = t1", [("clip", 0.0, 6.0)], None),
])
def test_post_op_chains_are_recognized(code, expect, residual):
    post = post_ops(code, {"x0": True})
    assert post is not None and post.ops == expect and post.residual == residual


@pytest.mark.parametrize("code,tensors", [
    ("t0 = acc\nt1 = tanh(t0)\ny0 = t1", {}),                      # no such post-op
    ("t0 = acc\nt1 = t0 + x0\ny0 = t1", {"x0": False}),            # broadcast residual
    ("t0 = acc\nt1 = max(t0, 1)\ny0 = t1", {}),                    # not ReLU
    ("t0 = acc\nt2 = 1 / (1 + exp(-t0))\nt3 = x0 * t2\ny0 = t3", {"x0": True}),  # gate of another
    ("t0 = acc\nt1 = t0 * 2\ny0 = t1", {}),
])
def test_other_epilogues_are_not_post_ops(code, tensors):
    assert post_ops(code, tensors) is None


def test_new_weights_behind_the_same_call_site_are_reordered_again():
    """The shim keeps reordered weights per call site; another weight array (or the same
    address holding other values) must be reordered again, not reused."""
    lib = onednn._lib()
    ctx = lib.wb_dnnl_context_new()
    d = onednn.ConvDesc()
    d.nsp, d.n, d.c, d.m, d.groups = 2, 1, 8, 16, 1
    for i in range(2):
        d.in_[i], d.out[i], d.k[i], d.stride[i], d.dil[i] = 10, 10, 3, 1, 1
        d.pad_l[i] = d.pad_r[i] = 1
    for i, s in enumerate((800, 100, 10, 1)):
        d.src_strides[i] = s
    for i, s in enumerate((1600, 100, 10, 1)):
        d.dst_strides[i] = s
    x = rand(1, 8, 10, 10, seed=1)
    y = np.zeros((1, 16, 10, 10), np.float32)
    try:
        for seed in (2, 3):
            w = rand(16, 8, 3, 3, seed=seed)
            for _ in range(2):  # the second call reuses the reordered weights
                assert lib.wb_dnnl_conv(ctx, ctypes.byref(d), x.ctypes.data, w.ctypes.data,
                                        None, None, y.ctypes.data) == 0
                np.testing.assert_allclose(y, _ort_conv(x, w), rtol=1e-4, atol=1e-4)
            w[:] = rand(16, 8, 3, 3, seed=seed + 10)  # same address, other values
            assert lib.wb_dnnl_conv(ctx, ctypes.byref(d), x.ctypes.data, w.ctypes.data,
                                    None, None, y.ctypes.data) == 0
            np.testing.assert_allclose(y, _ort_conv(x, w), rtol=1e-4, atol=1e-4)
    finally:
        lib.wb_dnnl_context_free(ctx)


def _ort_conv(x, w):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", 1, x.shape)],
        [helper.make_tensor_value_info("y", 1, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]
