"""float16 models: computed in float32 between the program's edges, rounded as float16 stores.

The conversions are checked bit for bit against numpy (every one of the 65,536 float16
patterns to float32; float32 and float64 values at the rounding edges to float16), a
hand-made graph against onnx's reference evaluator (which rounds each operator's output,
as the workbench does) and onnxruntime, and the float16 PyTorch exports of the zoo
(ResNet and BERT, ``tests/exports/*_fp16.onnx``) against onnxruntime, as imported and
after ``auto``.
"""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench.importer.half import compute_half_in_float
from workbench.importer.shapes import tensor_types

EXPORTS = Path(__file__).resolve().parent / "exports"


def _cast_model(source, target, n):
    x = helper.make_tensor_value_info("x", source, [n])
    y = helper.make_tensor_value_info("y", target, [n])
    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=target)], "cast",
                              [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, feeds):
    return workbench.open(model).run(feeds)


def test_every_float16_pattern_reads_as_numpy_reads_it():
    bits = np.arange(1 << 16, dtype=np.uint16)
    half = bits.view(np.float16)
    got = _run(_cast_model(TensorProto.FLOAT16, TensorProto.FLOAT, len(half)), {"x": half})["y"]
    want = half.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # -0 too


def _edges(dtype):
    tiny = np.float16(2.0 ** -24)
    values = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6, np.inf, -np.inf,
              float(tiny), float(tiny) / 2, float(tiny) * 1.5, float(tiny) * 2.5, 6.1e-05,
              6.103515625e-05, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2049.0, 2051.0, 0.1,
              3.14159265358979, -2.718281828459045, 1e-30]
    rng = np.random.default_rng(0)
    more = rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 6, 2000)
    return np.concatenate([np.array(values), more]).astype(dtype)


@pytest.mark.parametrize("source, dtype", [(TensorProto.FLOAT, np.float32),
                                           (TensorProto.DOUBLE, np.float64)])
def test_stores_to_float16_round_as_numpy_does(source, dtype):
    values = np.concatenate([_edges(dtype), np.array([np.nan], dtype)])
    got = _run(_cast_model(source, TensorProto.FLOAT16, len(values)), {"x": values})["y"]
    want = values.astype(np.float16)
    assert got.dtype == np.float16
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("source, dtype", [(TensorProto.INT64, np.int64),
                                           (TensorProto.INT32, np.int32),
                                           (TensorProto.BOOL, np.bool_)])
def test_integers_and_booleans_store_to_float16_as_numpy_does(source, dtype):
    values = np.array([0, 1, -1, 2049, 2051, -2051, 4097, 65504, 65519, 65520, 70000, -70000,
                       123456789, 7, -300], np.int64).astype(dtype)
    got = _run(_cast_model(source, TensorProto.FLOAT16, len(values)), {"x": values})["y"]
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def _small_graph():
    """x (float16) * w -> Exp -> + x: the product overflows and underflows float16 in
    places, and the first sum is both an output and read again."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT16, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])
    w = numpy_helper.from_array(np.array([[1e-4, 3.3, 7.7], [65000, -2.5, 1e-7]], np.float16),
                                "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Exp", ["m"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]),
             helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
             helper.make_node("Mul", ["u", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [s, y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_operator_rounds_its_output_like_onnx_reference():
    from onnx.reference import ReferenceEvaluator
    model = _small_graph()
    xv = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float16)
    got = _run(model, {"x": xv})
    with np.errstate(over="ignore"):
        want = dict(zip(("s", "y"), ReferenceEvaluator(model).run(None, {"x": xv})))
    for name in ("s", "y"):
        assert got[name].dtype == np.float16
        assert np.array_equal(got[name].view(np.uint16), want[name].view(np.uint16)), name


def test_only_the_edges_stay_float16_and_values_are_rounded_where_they_can_change():
    model = _small_graph()
    rewritten = compute_half_in_float(model, tensor_types(onnx.shape_inference.infer_shapes(model)))
    types = tensor_types(rewritten)
    half = sorted(n for n, (elem, _) in types.items() if elem == TensorProto.FLOAT16)
    assert half == ["s", "x", "y"]              # the program's own inputs and outputs
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("RoundToHalf") == 4        # after Mul, Exp, Add, Mul: not Transpose
    assert ops.count("Cast") == 3               # x in, s and y out
    assert ops.index("Transpose") > ops.index("Add")
    plain = _cast_model(TensorProto.FLOAT, TensorProto.DOUBLE, 4)
    assert compute_half_in_float(plain, tensor_types(plain)) is plain   # no float16: as it was


@pytest.mark.parametrize("name, shapes", [("resnet_fp16", {"batch": 1}),
                                          ("bert_fp16", {"batch": 1, "sequence": 16})])
def test_float16_exports_match_onnxruntime_before_and_after_auto(name, shapes):
    model = onnx.load(str(EXPORTS / f"{name}.onnx"))
    assert model.graph.input[0].type.tensor_type.elem_type in (TensorProto.FLOAT16,
                                                               TensorProto.INT64)
    assert any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer)
    ws = workbench.open(EXPORTS / f"{name}.onnx", input_shapes=shapes)
    report = ws.verify()
    assert report.match, report.text()
    assert all(o.half for o in report.outputs)
    assert ws.optimize("auto")
    report = ws.verify()
    assert report.match, report.text()
