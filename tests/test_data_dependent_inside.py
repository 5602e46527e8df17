"""Sizes the run-time data decide, read by further nodes (issue 30, item 5).

NonZero, NonMaxSuppression and Unique of run-time values run into a bound and a
count; the nodes after them run at the count (importer/counted.py). Each model
is built once and run on inputs that give different counts, compared with
onnxruntime; what still has no bound is refused by node name.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench.backend import WorkbenchBackend
from workbench.errors import UnsupportedCaseError
from workbench.importer import import_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
node = helper.make_node


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k)
                                           for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def _check_runs(model, feeds_list, count_of) -> list:
    """Run one session on each feeds, compare every output with onnxruntime; the counts."""
    ws = workbench.open(model)
    reference = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in model.graph.output]
    counts = []
    for feeds in feeds_list:
        got = ws.run(feeds)
        want = dict(zip(names, reference.run(None, feeds)))
        for name in names:
            assert got[name].shape == want[name].shape, (name, got[name].shape)
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5,
                                       err_msg=name)
        counts.append(count_of(want))
    report = ws.verify(feeds_list[0])
    assert report.match, report.text()
    return counts


def _detector():
    """Boxes and scores -> NMS -> the kept boxes, gathered, scaled and summed per box."""
    nodes = [node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "thr"], ["sel"],
                  name="nms"),
             node("Gather", ["sel", "two"], ["box_idx"], axis=1),
             node("Gather", ["sel", "one"], ["cls"], axis=1),
             node("Squeeze", ["boxes", "zero"], ["flat"]),
             node("Gather", ["flat", "box_idx"], ["kept"], axis=0),
             node("Mul", ["kept", "scale"], ["scaled"]),
             node("ReduceSum", ["scaled", "axis1"], ["per_box"], keepdims=0)]
    inits = [("k", np.array([10], np.int64)), ("iou", np.array([0.4], "f4")),
             ("thr", np.array([0.3], "f4")), ("two", np.array(2, np.int64)),
             ("one", np.array(1, np.int64)), ("zero", np.array([0], np.int64)),
             ("axis1", np.array([1], np.int64)),
             ("scale", np.array([2.0, 0.5, 2.0, 0.5], "f4"))]
    return _model(nodes, [("boxes", F, [1, 40, 4]), ("scores", F, [1, 2, 40])],
                  [("scaled", F, ["n", 4]), ("cls", I64, ["n"]), ("per_box", F, ["n"])],
                  inits)


def test_detector_head_keeps_different_numbers_of_boxes_from_one_build():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 20, (1, 40, 2)).astype("f4")
    boxes = np.concatenate([corners, corners + rng.uniform(1, 5, (1, 40, 2))], 2)
    boxes = boxes.astype("f4")
    scores = rng.uniform(0, 1, (1, 2, 40)).astype("f4")
    feeds = [{"boxes": boxes, "scores": scores * s} for s in (1.0, 0.34, 0.2)]
    counts = _check_runs(_detector(), feeds, lambda out: len(out["cls"]))
    assert len(set(counts)) == 3 and 0 in counts, counts


def _nonzero_model(shape=(5, 7)):
    nodes = [node("Greater", ["x", "thr"], ["mask"]),
             node("NonZero", ["mask"], ["nz"], name="where"),
             node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             node("GatherND", ["x", "idx"], ["vals"]),
             node("ReduceSum", ["vals"], ["total"], keepdims=0),
             node("Mul", ["vals", "vals"], ["sq"])]
    return _model(nodes, [("x", F, list(shape))],
                  [("total", F, []), ("sq", F, ["k"]), ("nz", I64, [2, "k"])],
                  [("thr", np.array(0.5, np.float32))])


def test_nonzero_feeding_gathernd_and_reductions_at_several_counts():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7)).astype("f4")
    feeds = [{"x": x * s} for s in (1.0, 0.3, 3.0, -1.0)]
    counts = _check_runs(_nonzero_model(), feeds, lambda out: out["nz"].shape[1])
    assert len(set(counts)) >= 3, counts


def test_a_count_of_0_empties_its_outputs_and_refuses_the_others_by_name():
    """At a count of 0 the nodes after it do not run (their kernels take sizes of at
    least 1): outputs sized by the count come back empty, as onnxruntime's; an output of
    another size computed after it (a sum) is refused naming the node, never guessed."""
    model = _nonzero_model()
    ws = workbench.open(model)
    x = np.full((5, 7), -1, "f4")
    with pytest.raises(UnsupportedCaseError, match=r"'where' \(NonZero\).*count is 0.*"
                       r"output 'total'"):
        ws.run({"x": x})
    only_sized = _model(list(model.graph.node)[:4] + [node("Mul", ["vals", "vals"], ["sq"])],
                        [("x", F, [5, 7])], [("sq", F, ["k"]), ("nz", I64, [2, "k"])],
                        [("thr", np.array(0.5, np.float32))])
    counts = _check_runs(only_sized, [{"x": x}, {"x": -x}], lambda out: out["nz"].shape[1])
    assert counts == [0, 35], counts


def _unique_model():
    nodes = [node("Unique", ["x"], ["y", "first", "inv", "cnt"], name="distinct"),
             node("Mul", ["y", "y"], ["y2"]),
             node("Cast", ["cnt"], ["cntf"], to=F),
             node("Mul", ["y", "cntf"], ["weighted"]),
             node("ReduceSum", ["weighted"], ["total"], keepdims=0),
             node("Gather", ["y", "inv"], ["back"], axis=0),
             node("Add", ["first", "cnt"], ["mixed"])]
    return _model(nodes, [("x", F, [30])],
                  [("y2", F, ["u"]), ("total", F, []), ("back", F, [30]),
                   ("mixed", I64, ["u"])])


def test_unique_feeding_elementwise_work_at_several_counts():
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.integers(0, k, 30).astype("f4")} for k in (3, 9, 30)]
    counts = _check_runs(_unique_model(), feeds, lambda out: len(out["y2"]))
    assert len(set(counts)) == 3, counts


def test_backend_runs_a_nonzero_read_inside_the_graph():
    """The ONNX backend (bounded graph outputs) with a NonZero another node reads; an
    input too big for the backend to bind as a constant."""
    model = _nonzero_model((6, 12))
    rep = WorkbenchBackend.prepare(model)
    reference = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(3)
    for scale in (1.0, 0.2):
        x = (rng.standard_normal((6, 12)) * scale).astype("f4")
        for got, want in zip(rep.run({"x": x}), reference.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_count_deciding_another_count_is_refused_by_name():
    model = _model([node("NonZero", ["x"], ["nz"], name="first"),
                    node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
                    node("GatherND", ["x", "idx"], ["vals"]),
                    node("NonZero", ["vals"], ["again"], name="second"),
                    node("Neg", ["again"], ["y"])],
                   [("x", F, [4, 4])], [("y", I64, [1, "m"])])
    with pytest.raises(UnsupportedCaseError,
                       match=r"'second' \(NonZero\).*input's size is known only at run time"):
        import_model(model)


def test_compress_of_run_time_conditions_is_still_refused_by_name():
    model = _model([node("Compress", ["x", "keep"], ["picked"], name="pick", axis=0),
                    node("Neg", ["picked"], ["y"])],
                   [("x", F, [6, 2]), ("keep", TensorProto.BOOL, [6])], [("y", F, ["m", 2])])
    with pytest.raises(UnsupportedCaseError, match=r"'pick' \(Compress\).*true conditions"):
        import_model(model)


def test_count_sized_arrays_are_allocated_after_the_count_is_assigned():
    """DaCe allocates a transient where its state runs when only that state uses it: the
    arrays sized by the count come after ``count = ...[0]`` in the generated code."""
    imported = import_model(_nonzero_model())
    (symbol, count), = imported.counts.items()
    array = count.array
    assert symbol not in imported.sdfg.free_symbols
    code = imported.sdfg.generate_code()[0].clean_code
    assigned = code.index(f"{symbol} = {array}[0];")
    sized = [i for i, line in enumerate(code.splitlines(keepends=True))
             if "new " in line and symbol in line]
    offsets = [sum(len(x) for x in code.splitlines(keepends=True)[:i]) for i in sized]
    assert offsets and all(o > assigned for o in offsets), (assigned, offsets)


def test_a_count_in_a_program_of_symbolic_sizes_is_refused_by_name():
    model = _model([node("NonZero", ["x"], ["nz"], name="where"), node("Neg", ["nz"], ["y"])],
                   [("x", F, ["b", 6])], [("y", I64, [2, "k"])])
    with pytest.raises(UnsupportedCaseError, match=r"'where' \(NonZero\).*symbolic sizes"):
        import_model(model, symbolic=["b"])


def test_a_size_not_linear_in_the_count_is_refused_naming_the_counted_node():
    """Every count (n x n, flattened) has no linear form: one program cannot hold it."""
    model = _model([node("NonZero", ["x"], ["nz"], name="where"),
                    node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
                    node("GatherND", ["x", "idx"], ["vals"]),
                    node("Unsqueeze", ["vals", "one"], ["col"]),
                    node("Unsqueeze", ["vals", "zero"], ["row"]),
                    node("Mul", ["col", "row"], ["outer"]),
                    node("Reshape", ["outer", "flat"], ["flat_outer"])],
                   [("x", F, [4, 5])], [("flat_outer", F, ["mm"])],
                   [("one", np.array([1], np.int64)), ("zero", np.array([0], np.int64)),
                    ("flat", np.array([-1], np.int64))])
    with pytest.raises(UnsupportedCaseError, match=r"'where' \(NonZero\).*count known at "
                       r"run time.*'flat_outer' axis 0 does not grow linearly"):
        import_model(model)
