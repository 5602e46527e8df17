"""Buffer sharing on tensors that live long: skip connections (U-Net), dense blocks
(DenseNet), an encoder output read by every decoder layer, tensors read through
Views. After ``auto`` (TransientReuse and InPlaceElementwise included) the
program must still match onnxruntime, and TransientReuse must still share
buffers where it is safe."""
import dace
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from sdfg_models import zoo
from transforms.global_ import transient_reuse
from workbench import transformation_api as transform
from workbench.ops import whole


def _model(nodes, inputs, outputs, inits=None):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _const(name, values, dtype=np.int64):
    return name, np.asarray(values, dtype=dtype)


def _pools(ws):
    return transient_reuse.plan(ws.sdfg, ws.sdfg.states()[0])


def _step(ws, name):
    return transform.find_matches(transform.get(name), ws.sdfg, ws.model.weights)


def _auto_and_verify(ws):
    applied = ws.optimize("auto")
    report = ws.verify()
    assert report.match, report.text()
    return [e.get("description", "") for e in applied
            if e.get("transformation") == "TransientReuse"]


def _skip_then_slice():
    """A U-Net decoder stage: the skip ``e`` waits while a deeper map is upsampled,
    sliced and concatenated after it. The concatenation ``c`` has the shape of the
    upsampled map ``r``, whose last reader is the Slice: ``c`` may take ``r``'s
    memory, but the Concat's copy of ``e`` must not start before the Slice is done."""
    nodes = [
        helper.make_node("Relu", ["x"], ["e"], name="enc"),
        helper.make_node("MaxPool", ["e"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
        helper.make_node("Sigmoid", ["p"], ["q"], name="deep"),
        helper.make_node("Resize", ["q", "", "scales"], ["r"], mode="nearest", name="up"),
        helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"], name="slice"),
        helper.make_node("Concat", ["e", "s"], ["c"], axis=1, name="cat"),
        helper.make_node("Tanh", ["c"], ["t"], name="dec"),
        helper.make_node("Mul", ["t", "c"], ["y"], name="out"),
    ]
    inits = dict([_const("scales", [1, 2, 2, 2], np.float32), _const("starts", [0]),
                  _const("ends", [4]), _const("axes", [1])])
    return _model(nodes, {"x": [1, 4, 8, 8]}, {"y": [1, 8, 8, 8]}, inits)


def test_concat_after_a_slice_keeps_the_upsampled_map_alive():
    ws = workbench.open(_skip_then_slice())
    assert ["r", "c"] in _pools(ws)  # safe to share once the Concat runs as one step
    assert _auto_and_verify(ws)


def test_the_state_keeps_operators_whole_once_buffers_are_shared():
    """The cause of the U-Net mismatch: DaCe inlines a Concat's expansion as one copy
    per operand, and the copy of the skip then no longer waits for the Slice."""
    ws = workbench.open(_skip_then_slice())
    state = ws.sdfg.states()[0]
    assert not whole.shares_memory(ws.sdfg, state)
    ws.apply(_step(ws, "TransientReuse")[0])
    assert whole.shares_memory(ws.sdfg, ws.sdfg.states()[0])
    build = ws.build(whole=True)   # expanded as one program, where DaCe's inliner runs
    nested = [n for n, _ in build.sdfg.all_nodes_recursive()
              if type(n).__name__ == "NestedSDFG" and "cat" in n.label]
    assert nested and all(n.no_inline for n in nested)
    report = ws.verify()
    assert report.match, report.text()


def _encoder_read_by_every_decoder_layer(layers=4):
    """``enc`` is read by every decoder layer: it must keep its own memory to the end,
    while the decoder's intermediates can take turns in two buffers."""
    nodes = [helper.make_node("Tanh", ["x"], ["enc"], name="encoder")]
    prev = "x2"
    for k in range(layers):
        nodes += [helper.make_node("Sigmoid", [prev], [f"h{k}"], name=f"act{k}"),
                  helper.make_node("Add", [f"h{k}", "enc"], [f"d{k}"], name=f"skip{k}")]
        prev = f"d{k}"
    nodes.append(helper.make_node("Mul", [prev, "enc"], ["y"], name="head"))
    return _model(nodes, {"x": [2, 16], "x2": [2, 16]}, {"y": [2, 16]})


def test_an_encoder_output_read_by_every_decoder_layer_keeps_its_buffer():
    ws = workbench.open(_encoder_read_by_every_decoder_layer())
    pools = _pools(ws)
    assert pools and all("enc" not in pool for pool in pools)
    assert sum(len(p) - 1 for p in pools) >= 4  # the decoder's buffers are shared
    ws.apply(_step(ws, "TransientReuse")[0])
    report = ws.verify()
    assert report.match, report.text()


def test_an_encoder_output_read_by_every_decoder_layer_after_auto():
    _auto_and_verify(workbench.open(_encoder_read_by_every_decoder_layer()))  # fused: no reuse


def _dense_block(layers=3):
    """DenseNet: layer k reads the concatenation of the block input and all earlier
    layers' outputs; every feature map lives until the block's last Concat."""
    nodes, features, inits = [], ["x"], {}
    for k in range(layers):
        cat = f"cat{k}"
        nodes.append(helper.make_node("Concat", list(features), [cat], axis=1, name=cat))
        width = 4 * (k + 1)
        inits[f"w{k}"] = np.random.default_rng(k).normal(
            0, 0.3, (4, width, 1, 1)).astype(np.float32)
        nodes += [helper.make_node("Relu", [cat], [f"a{k}"], name=f"relu{k}"),
                  helper.make_node("Conv", [f"a{k}", f"w{k}"], [f"f{k}"], name=f"conv{k}"),
                  helper.make_node("Sigmoid", [f"f{k}"], [f"g{k}"], name=f"act{k}")]
        features.append(f"g{k}")
    nodes.append(helper.make_node("Concat", features, ["y"], axis=1, name="out"))
    return _model(nodes, {"x": [1, 4, 6, 6]}, {"y": [1, 4 * (layers + 1), 6, 6]}, inits)


def test_dense_block_features_live_until_the_last_concat(monkeypatch):
    # Row-major throughout, so auto's TransientReuse has buffers to share: on oneDNN,
    # ChannelsLast stores the convolutions' outputs channels-last through the Concats,
    # and a block this small then has nothing of one layout left to share.
    monkeypatch.setenv("WORKBENCH_ONEDNN", "0")
    ws = workbench.open(_dense_block())
    pools = _pools(ws)
    assert pools
    for pool in pools:  # a feature map read by every later Concat is never given away
        assert not {"g0", "g1"} & set(pool[:-1])
    assert _auto_and_verify(ws)


def test_a_view_extends_the_lifetime_of_the_array_it_views():
    """After ReshapeAsView, ``v`` is a View of ``a``: Add reads ``a``'s memory after
    Sigmoid wrote ``b``. Counting only ``a``'s own access node, ``b`` would take
    ``a``'s memory and Add would read ``b`` twice."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Reshape", ["a", "shape"], ["v"], name="reshape"),
             helper.make_node("Sigmoid", ["v"], ["b"], name="sig"),
             helper.make_node("Add", ["v", "b"], ["y"], name="add")]
    ws = workbench.open(_model(nodes, {"x": [4, 4]}, {"y": [4, 4]},
                               dict([_const("shape", [4, 4])])))
    ws.apply(next(m for m in _step(ws, "ReshapeAsView") if "reshape" in m.description))
    assert isinstance(ws.sdfg.arrays["v"], dace.data.View)
    assert all(not {"a", "b"} <= set(pool) for pool in _pools(ws))
    report = ws.verify()
    assert report.match, report.text()


def test_an_elementwise_chain_shares_two_buffers():
    """Where sharing is obviously safe it still happens: a chain of six same-shape
    operators needs two buffers, not five."""
    ops = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"]
    names = ["x"] + [f"t{k}" for k in range(len(ops) - 1)] + ["y"]
    nodes = [helper.make_node(op, [names[k]], [names[k + 1]], name=f"op{k}")
             for k, op in enumerate(ops)]
    ws = workbench.open(_model(nodes, {"x": [8, 32]}, {"y": [8, 32]}))
    found = _step(ws, "TransientReuse")
    assert len(found) == 1 and "5 buffers share 2" in found[0].description
    ws.apply(found[0])
    transients = {n.data for n in ws.sdfg.states()[0].data_nodes()
                  if ws.sdfg.arrays[n.data].transient}
    assert len(transients) == 2
    report = ws.verify()
    assert report.match, report.text()


@pytest.mark.parametrize("name", ["unet", "densenet", "bert"])
def test_real_exports_after_auto(name):
    assert zoo.get(name).available()
    ws = workbench.open(f"zoo:{name}")
    assert _auto_and_verify(ws)  # TransientReuse applied, and the answer is right
