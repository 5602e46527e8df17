"""Sizes a Loop body decides per iteration (issue 30, item 5): a Slice of run-time starts
and ends inside the body, as nn.EmbeddingBag exports it (importer/counted_body.py).

Each model is built once and run on bags of different sizes, empty ones included, and
compared with onnxruntime; what is still not counted is refused naming the node.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import workbench
from workbench.errors import UnsupportedCaseError

pytest.importorskip("torch")
from exports.recommender_models import export_dlrm, export_weighted_bag  # noqa: E402

# (offsets of table 0 over 10 indices, of table 1 over 7): bags of every size, empty first,
# in the middle and last, and one bag holding everything
OFFSETS = [([0, 3, 5, 9], [0, 1, 2, 6]), ([0, 0, 5, 10], [0, 1, 2, 6]),
           ([0, 2, 2, 9], [0, 7, 7, 7]), ([0, 10, 10, 10], [0, 0, 0, 0])]


def _feeds(off0, off1, rng):
    return {"dense": rng.standard_normal((4, 13)).astype(np.float32),
            "idx0": rng.integers(0, 100, 10), "off0": np.array(off0, np.int64),
            "idx1": rng.integers(0, 100, 7), "off1": np.array(off1, np.int64)}


def _check(model: onnx.ModelProto, offsets=OFFSETS, ws=None):
    """One session, every offsets, every output against onnxruntime; the session."""
    ws = ws or workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in model.graph.output]
    rng = np.random.default_rng(0)
    for off0, off1 in offsets:
        feeds = _feeds(off0, off1, rng)
        got = ws.run(feeds)
        for name, want in zip(names, reference.run(None, feeds)):
            assert got[name].shape == want.shape
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} at offsets {off0}, {off1}")
    return ws


def _with_bag_outputs(data: bytes) -> onnx.ModelProto:
    """The model with each EmbeddingBag's Loop output as a graph output too."""
    model = onnx.load_from_string(data)
    for n in model.graph.node:
        if n.op_type == "Loop":
            model.graph.output.append(helper.make_tensor_value_info(n.output[0], T.FLOAT,
                                                                    [4, 16]))
    return model


def test_dlrm_sum_matches_onnxruntime_at_every_bag_size_from_one_build():
    model = _with_bag_outputs(export_dlrm("sum"))
    ws = _check(model)
    # the count is assigned inside each Loop body, on an interstate edge, per iteration
    assigned = [e.data.assignments for sdfg in ws.sdfg.all_sdfgs_recursive()
                if sdfg is not ws.sdfg for e in sdfg.edges() if e.data.assignments]
    assert sum(any(k.endswith("_count") for k in a) for a in assigned) == 2
    # the default recipe (views inside the bodies, epilogues, allocation once) keeps it
    assert ws.optimize("default")
    _check(model, ws=ws)


def test_dlrm_mean_matches_onnxruntime_including_empty_bags():
    """An empty bag's mean is 0 in onnxruntime (and PyTorch), not NaN."""
    _check(_with_bag_outputs(export_dlrm("mean")))


def test_embedding_bag_max_matches_onnxruntime_including_empty_bags():
    """An empty bag's max is -inf in onnxruntime; the MLP after it makes NaN of -inf, which
    Relu keeps (as onnxruntime's does): the bags and the prediction are compared."""
    model = _with_bag_outputs(export_dlrm("max"))
    bags = [o.name for o in model.graph.output[1:]]
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(1)
    for off0, off1 in OFFSETS:
        feeds = _feeds(off0, off1, rng)
        got, want = ws.run(feeds), dict(zip(["p"] + bags, reference.run(None, feeds)))
        for name in ["p"] + bags:   # NaNs in the same places count as equal
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
        assert (np.isneginf(got[bags[0]][:, 0]) == (np.diff(off0 + [10]) == 0)).all()


def test_per_sample_weights_slice_with_the_same_count():
    """The indices and the weights are cut at the same offsets: one count for both, so
    their pieces multiply (two counts would not broadcast)."""
    model = onnx.load_from_string(export_weighted_bag())
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(2)
    for off in ([0, 3, 5, 9], [0, 0, 10, 10], [0, 1, 1, 2]):
        feeds = {"idx": rng.integers(0, 100, 10), "off": np.array(off, np.int64),
                 "w": rng.random(10).astype(np.float32)}
        np.testing.assert_allclose(ws.run(feeds)["y"], reference.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
    counts = {k for sdfg in ws.sdfg.all_sdfgs_recursive() for e in sdfg.edges()
              for k in e.data.assignments if k.endswith("_count")}
    assert len(counts) == 1


def _sliding(step=None, starts_known=False):
    """Loop over i < 4: acc += sum(x[i : i + 2 (: step)]), x of 5 elements (the last window
    holds one element only: Slice clamps)."""
    nodes = [
        helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
        helper.make_node("Add", ["start", "two"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end", "zero"] + (["step"] if step else []),
                         ["piece"], name="window"),
        helper.make_node("ReduceSum", ["piece"], ["s"], keepdims=1),
        helper.make_node("Add", ["acc_in", "s"], ["acc_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ]
    body = helper.make_graph(
        nodes, "sliding", [helper.make_tensor_value_info("i", T.INT64, []),
                           helper.make_tensor_value_info("c_in", T.BOOL, []),
                           helper.make_tensor_value_info("acc_in", T.FLOAT, [1])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("acc_out", T.FLOAT, [1])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], name="windows", body=body)
    inits = [("M", np.array(4, np.int64)), ("zero", np.array([0], np.int64)),
             ("two", np.array([2], np.int64)), ("step", np.array([step or 1], np.int64))]
    graph = helper.make_graph(
        [loop], "g", [helper.make_tensor_value_info("acc0", T.FLOAT, [1]),
                      helper.make_tensor_value_info("x", T.FLOAT, [5])],
        [helper.make_tensor_value_info("acc", T.FLOAT, [1])],
        [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_sliding_window_in_a_loop_body_runs():
    model = _sliding()
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    for seed in range(2):
        feeds = {"acc0": np.array([seed], np.float32),
                 "x": np.random.default_rng(seed).standard_normal(5).astype(np.float32)}
        np.testing.assert_allclose(ws.run(feeds)["acc"], reference.run(None, feeds)[0],
                                   rtol=1e-5)


def test_run_time_bounds_are_clamped_and_negative_ones_count_from_the_end():
    """Per iteration, x[:, starts[i]:ends[i]] summed along axis 1 (a scan output), x of
    3 x 6: negative bounds, bounds past either end, start after end (empty), INT64_MAX."""
    pairs = [(1, 4), (-2, 6), (-9, 2), (4, 2), (5, 100), (0, 2 ** 63 - 1), (6, 7), (-1, -3)]
    body = helper.make_graph([
        helper.make_node("Gather", ["starts", "i"], ["s0"]),
        helper.make_node("Gather", ["ends", "i"], ["e0"]),
        helper.make_node("Unsqueeze", ["s0", "zero"], ["s"]),
        helper.make_node("Unsqueeze", ["e0", "zero"], ["e"]),
        helper.make_node("Slice", ["x", "s", "e", "one"], ["piece"], name="cut"),
        helper.make_node("ReduceSum", ["piece", "one"], ["row"], keepdims=0),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "cuts", [helper.make_tensor_value_info("i", T.INT64, []),
                helper.make_tensor_value_info("c_in", T.BOOL, [])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("row", T.FLOAT, [3])])
    loop = helper.make_node("Loop", ["M", ""], ["rows"], name="cuts_loop", body=body)
    inits = [("M", np.array(len(pairs), np.int64)), ("zero", np.array([0], np.int64)),
             ("one", np.array([1], np.int64))]
    graph = helper.make_graph(
        [loop], "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 6]),
                      helper.make_tensor_value_info("starts", T.INT64, [len(pairs)]),
                      helper.make_tensor_value_info("ends", T.INT64, [len(pairs)])],
        [helper.make_tensor_value_info("rows", T.FLOAT, [len(pairs), 3])],
        [numpy_helper.from_array(v, k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    x = np.arange(18, dtype=np.float32).reshape(3, 6) ** 1.5
    for order in (pairs, pairs[::-1]):
        feeds = {"x": x, "starts": np.array([a for a, _ in order], np.int64),
                 "ends": np.array([b for _, b in order], np.int64)}
        got, want = ws.run(feeds)["rows"], reference.run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert (want[[k for k, (a, b) in enumerate(order) if (a, b) in ((4, 2), (6, 7), (-1, -3))]]
                == 0).all()


def test_a_count_of_0_that_would_change_a_carried_shape_is_refused_at_run_time():
    """acc += x[starts[i]:ends[i]], acc of 1 element (the loop11 pattern, bounds given):
    a window of one element runs; an empty one would make acc empty, which a program of
    fixed shapes cannot give, so that run is refused naming the Slice, and the same
    session still runs the next inputs."""
    body = helper.make_graph([
        helper.make_node("Gather", ["starts", "i"], ["s0"]),
        helper.make_node("Gather", ["ends", "i"], ["e0"]),
        helper.make_node("Unsqueeze", ["s0", "zero"], ["s"]),
        helper.make_node("Unsqueeze", ["e0", "zero"], ["e"]),
        helper.make_node("Slice", ["x", "s", "e"], ["piece"], name="window"),
        helper.make_node("Add", ["acc_in", "piece"], ["acc_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "windows", [helper.make_tensor_value_info("i", T.INT64, []),
                   helper.make_tensor_value_info("c_in", T.BOOL, []),
                   helper.make_tensor_value_info("acc_in", T.FLOAT, [1])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("acc_out", T.FLOAT, [1])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], name="loop", body=body)
    graph = helper.make_graph(
        [loop], "g", [helper.make_tensor_value_info("acc0", T.FLOAT, [1]),
                      helper.make_tensor_value_info("x", T.FLOAT, [5]),
                      helper.make_tensor_value_info("starts", T.INT64, [3]),
                      helper.make_tensor_value_info("ends", T.INT64, [3])],
        [helper.make_tensor_value_info("acc", T.FLOAT, [1])],
        [numpy_helper.from_array(np.array(3, np.int64), "M"),
         numpy_helper.from_array(np.array([0], np.int64), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    x = np.array([1, 2, 4, 8, 16], np.float32)

    def feeds(starts, ends):
        return {"acc0": np.array([0.5], np.float32), "x": x,
                "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}

    ok = feeds([0, 4, -2], [1, 5, -1])
    np.testing.assert_allclose(ws.run(ok)["acc"], reference.run(None, ok)[0])
    with pytest.raises(UnsupportedCaseError, match="window.*count is 0"):
        ws.run(feeds([0, 3, 1], [1, 3, 2]))   # the second window is empty
    ok = feeds([2, 1, 0], [3, 2, 1])
    np.testing.assert_allclose(ws.run(ok)["acc"], reference.run(None, ok)[0])


def test_a_bag_of_a_table_given_at_run_time_is_refused_only_when_empty():
    """EmbeddingBag's body with the table an input: at a count of 0 the Gather of nothing
    from it does not fold (the table is not known at import), and kernels take sizes of
    at least 1, so a run with an empty bag is refused naming the Slice; others match."""
    model = onnx.load_from_string(export_dlrm("sum"))
    graph = model.graph
    table = next(t for t in graph.initializer if t.name == "emb.0.weight")
    graph.input.append(helper.make_tensor_value_info(table.name, T.FLOAT, list(table.dims)))
    kept = [t for t in graph.initializer if t.name != table.name]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((100, 16)).astype(np.float32)
    for off0, off1 in OFFSETS[:2]:
        feeds = {**_feeds(off0, off1, rng), "emb.0.weight": rows}
        if 0 in np.diff(off0 + [10]):
            with pytest.raises(UnsupportedCaseError, match="Slice.*count is 0"):
                ws.run(feeds)
        else:
            np.testing.assert_allclose(ws.run(feeds)["p"], reference.run(None, feeds)[0],
                                       rtol=1e-5, atol=1e-6)


def test_a_run_time_slice_of_step_2_is_refused_naming_the_node():
    with pytest.raises(UnsupportedCaseError, match="window.*step is not 1"):
        workbench.open(_sliding(step=2))
