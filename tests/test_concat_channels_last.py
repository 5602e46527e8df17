"""Channels-last through Concat: SqueezeNet's fire modules and DenseNet's blocks keep the
layout oneDNN's kernels want across their Concats (the Concat copies each input into its
strided slice, implementation ``direct``), the pools after them stay on oneDNN, and the
program equals onnxruntime; the strided copy equals the pure one on any axis."""
import numpy as np

import workbench
from fusion_helpers import F32, graph_model, node, rand, verify
from onnx_helpers import onnx_ops
from workbench import transformation_api as transform


def fire_model():
    """A stem, two fire modules (squeeze, then 1x1 and 3x3 expands concatenated), a
    ceil-mode MaxPool after a Concat, and a Concat that also takes a graph input."""
    nodes = [
        node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2]), node("Relu", ["c0"], ["r0"]),
        node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    ]
    inits = {"w0": rand(16, 3, 3, 3, seed=1), "b0": rand(16, seed=2)}
    src = "p0"
    for k, (squeeze, expand) in enumerate(((8, 16), (8, 16))):
        nodes += [
            node("Conv", [src, f"ws{k}", f"bs{k}"], [f"s{k}"]), node("Relu", [f"s{k}"], [f"rs{k}"]),
            node("Conv", [f"rs{k}", f"we{k}", f"be{k}"], [f"e{k}"]),
            node("Relu", [f"e{k}"], [f"re{k}"]),
            node("Conv", [f"rs{k}", f"wf{k}", f"bf{k}"], [f"f{k}"], pads=[1, 1, 1, 1]),
            node("Relu", [f"f{k}"], [f"rf{k}"]),
            node("Concat", [f"re{k}", f"rf{k}"], [f"cat{k}"], axis=1),
        ]
        c_in = 16 if k == 0 else 2 * expand
        inits.update({f"ws{k}": rand(squeeze, c_in, 1, 1, seed=10 + k),
                      f"bs{k}": rand(squeeze, seed=20 + k),
                      f"we{k}": rand(expand, squeeze, 1, 1, seed=30 + k),
                      f"be{k}": rand(expand, seed=40 + k),
                      f"wf{k}": rand(expand, squeeze, 3, 3, seed=50 + k),
                      f"bf{k}": rand(expand, seed=60 + k)})
        src = f"cat{k}"
    nodes += [node("MaxPool", ["cat1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                   ceil_mode=1),
              node("Concat", ["p1", "side"], ["y"], axis=1)]
    return graph_model(nodes, {"x": ([1, 3, 33, 33], F32), "side": ([1, 4, 4, 4], F32)},
                       ["y"], inits)


def test_fire_modules_keep_channels_last_through_their_concats():
    ws = workbench.open(fire_model())
    ws.optimize("auto")
    impl = {n.onnx_name: (n.op_type, n.implementation) for n in onnx_ops(ws.sdfg)}
    concats = {k: v for k, v in impl.items() if v[0] == "Concat"}
    assert set(concats.values()) == {("Concat", "direct")}, concats
    assert {v for v in impl.values() if v[0] == "MaxPool"} == {("MaxPool", "onednn")}, impl
    step = next(s for s in ws.history if s["transformation"] == "ChannelsLast")
    assert "Concats copying strided" in step["description"]
    strided = [a for a, d in ws.sdfg.arrays.items()
               if d.transient and len(d.shape) == 4 and d.strides[1] == 1]
    assert len(strided) >= 6, strided
    verify(ws)


def concat_model(axis):
    nodes = [node("Relu", ["a"], ["ra"]), node("Sigmoid", ["b"], ["sb"]),
             node("Concat", ["ra", "sb", "c"], ["y"], axis=axis)]
    shapes = {"a": [2, 3, 4, 5], "b": [2, 3, 4, 5], "c": [2, 3, 4, 5]}
    for name in ("b", "c"):
        shapes[name][axis] = 2 if name == "b" else 1
    return graph_model(nodes, {k: (v, F32) for k, v in shapes.items()}, ["y"])


def test_the_strided_copy_equals_the_pure_concat_on_every_axis():
    for axis in range(4):
        ws = workbench.open(concat_model(axis))
        t = transform.get("ChooseImplementation")
        match = next(m for m in t.find(ws.sdfg)
                     if "Concat" in m.description and dict(m.options)["implementation"] == "direct")
        ws.apply(match)
        assert [n.implementation for n in onnx_ops(ws.sdfg) if n.op_type == "Concat"] == ["direct"]
        inputs = {i.onnx_name: np.random.default_rng(axis).standard_normal(i.shape).astype(F32)
                  for i in ws.inputs}
        verify(ws, inputs)
