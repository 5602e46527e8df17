"""Cases for data movement, indexing and shape ops (workbench/ops/movement.py and friends).

Shape-like inputs (axes, pads, starts, repeats) are initializers, as
exporters write them; the data is fed. Each op's cases cover its
attributes, negative axes/indices, 0-d tensors and empty results.
"""
import numpy as np
from onnx import numpy_helper

from op_cases.base import C, ints, rand

I64_MAX = np.iinfo(np.int64).max


def i64(values):
    return np.array(values, dtype=np.int64)


def f32(values):
    return np.array(values, dtype=np.float32)


def scatter(case_id, x, indices, updates, opset=17, **attrs):
    """Data and updates fed, indices constant, in the schema's input order."""
    return C(case_id, {"x": x, "u": updates}, attrs, init={"i": indices},
             node_inputs=["x", "i", "u"], opset=opset)


def tensor(values):
    """A TENSOR attribute (Constant, ConstantOfShape)."""
    return numpy_helper.from_array(np.asarray(values), "value")


CASES = {
    # -- reshapes and permutations -----------------------------------------------
    "Transpose": [C("default_reverse", {"x": rand(2, 3, 4)}),
                  C("swap_last", {"x": rand(2, 3, 4)}, {"perm": [0, 2, 1]}),
                  C("4d", {"x": rand(2, 3, 4, 5)}, {"perm": [2, 0, 3, 1]}),
                  C("int64", {"x": i64([[1, 2, 3], [4, 5, 6]])})],
    "Reshape": [C("infer_dim", {"x": rand(2, 3, 4)}, init={"shape": ints(4, -1)}),
                C("copy_dim", {"x": rand(2, 3, 4)}, init={"shape": ints(0, 2, 6)}),
                C("to_scalar", {"x": rand(1, 1)}, init={"shape": i64([])}),
                C("allowzero_off", {"x": rand(2, 3)}, {"allowzero": 0},
                  init={"shape": ints(0, 3)}, opset=18)],
    "Flatten": [C("default", {"x": rand(2, 3, 4)}),
                C("axis0", {"x": rand(2, 3, 4)}, {"axis": 0}),
                C("axis_minus1", {"x": rand(2, 3, 4)}, {"axis": -1})],
    "Squeeze": [C("axes", {"x": rand(2, 1, 3, 1)}, init={"axes": ints(1)}),
                C("negative_axes", {"x": rand(1, 3, 1, 5)}, init={"axes": ints(-2)}),
                C("all", {"x": rand(1, 3, 1, 4)}),
                C("to_scalar", {"x": rand(1, 1)}),
                C("attribute", {"x": rand(1, 3, 1)}, {"axes": [0, -1]}, opset=11)],
    "Unsqueeze": [C("front_back", {"x": rand(2, 3)}, init={"axes": ints(0, -1)}),
                  C("middle", {"x": rand(2, 3)}, init={"axes": ints(1)}),
                  C("unsorted", {"x": rand(3, 4, 5)}, init={"axes": ints(5, 4, 2)}),
                  C("scalar", {"x": np.array(1.5, "float32")}, init={"axes": ints(0)}),
                  C("attribute", {"x": rand(2, 3)}, {"axes": [0, 3]}, opset=11)],
    "Identity": [C("default", {"x": rand(2, 3)}), C("bool", {"x": np.array([True, False])})],
    "Dropout": [C("default", {"x": rand(2, 3)}),
                C("mask", {"x": rand(2, 3)}, outputs=("y", "mask")),
                C("ratio_not_training", {"x": rand(3, 4)}, outputs=("y", "mask"),
                  init={"r": np.array(0.75, "float32"), "t": np.array(False)}),
                C("training_zero_ratio", {"x": rand(3, 4)}, outputs=("y", "mask"),
                  init={"r": np.array(0.0, "float32"), "t": np.array(True)})],
    "DepthToSpace": [C("dcr", {"x": rand(1, 8, 2, 3)}, {"blocksize": 2}),
                     C("crd", {"x": rand(2, 8, 2, 1)}, {"blocksize": 2, "mode": "CRD"})],
    "SpaceToDepth": [C("b2", {"x": rand(2, 2, 4, 6)}, {"blocksize": 2}),
                     C("b3", {"x": rand(1, 1, 3, 6)}, {"blocksize": 3})],
    "Expand": [C("dim_changed", {"x": rand(3, 1)}, init={"shape": ints(2, 1, 6)}),
               C("dim_unchanged", {"x": rand(3, 1)}, init={"shape": ints(3, 4)}),
               C("shape_smaller", {"x": rand(2, 3)}, init={"shape": ints(1, 3)}),
               C("scalar", {"x": np.array(2.5, "float32")}, init={"shape": ints(2, 2)})],
    "Tile": [C("4d", {"x": rand(2, 3, 1, 2)}, init={"r": ints(2, 1, 3, 2)}),
             C("ones", {"x": rand(2, 2)}, init={"r": ints(1, 1)})],
    # -- pieces ---------------------------------------------------------------------
    "Concat": [C("axis0", {"a": rand(2, 3), "b": rand(1, 3)}, {"axis": 0}),
               C("axis1", {"a": rand(2, 3, 2), "b": rand(2, 1, 2), "c": rand(2, 4, 2)},
                 {"axis": 1}),
               C("axis_minus1", {"a": rand(2, 3)}, {"axis": -1}, init={"b": rand(2, 2)})],
    "Split": [C("equal", {"x": rand(2, 6)}, {"axis": 1}, outputs=("a", "b", "c")),
              C("sizes", {"x": rand(6, 2)}, init={"s": ints(2, 4)}, outputs=("a", "b")),
              C("sizes_negative_axis", {"x": rand(2, 5)}, {"axis": -1},
                init={"s": ints(1, 0, 4)}, outputs=("a", "b", "c")),
              C("attribute", {"x": rand(5, 2)}, {"split": [3, 2]}, outputs=("a", "b"),
                opset=11),
              C("num_outputs", {"x": rand(6, 3)}, {"num_outputs": 2}, outputs=("a", "b"),
                opset=18)],
    "Slice": [C("axes_steps", {"x": rand(6, 5, 4)},
                init={"s": ints(0, 1), "e": ints(3, 5), "a": ints(0, 1), "st": ints(1, 2)}),
              C("negative_end", {"x": rand(6, 5)}, init={"s": ints(0), "e": ints(-1),
                                                        "a": ints(1)}),
              C("default_axes", {"x": rand(4, 5)}, init={"s": ints(1, 2), "e": ints(3, 4)}),
              C("int64_max_end", {"x": rand(6, 5)}, init={"s": ints(2), "e": ints(I64_MAX),
                                                         "a": ints(-1)}),
              C("start_clamped_empty", {"x": rand(4, 5)},
                init={"s": ints(10), "e": ints(20), "a": ints(1)}),
              C("reverse_all", {"x": rand(4, 5)},
                init={"s": ints(-1), "e": i64([np.iinfo(np.int64).min]), "a": ints(0),
                      "st": ints(-1)}),
              C("negative_step", {"x": rand(7, 3)},
                init={"s": ints(5), "e": ints(0), "a": ints(0), "st": ints(-2)}),
              C("attributes", {"x": rand(4, 5)}, {"starts": [1, -3], "ends": [3, 100],
                                                  "axes": [0, 1]}, opset=9)],
    # Compress's output shape depends on the condition's values: shape inference
    # cannot give it, so the cases declare it, as an exporter does.
    "Compress": [C("axis0", {"x": rand(4, 2)}, {"axis": 0},
                   init={"c": np.array([True, False, True, True])}, outputs={"y": ([3, 2], "float32")}),
                 C("flat_short_condition", {"x": rand(2, 3)},
                   init={"c": np.array([False, True, True, False, True])},
                   outputs={"y": ([3], "float32")}),
                 C("negative_axis", {"x": rand(2, 3)}, {"axis": -1},
                   init={"c": np.array([False, True])}, outputs={"y": ([2, 1], "float32")})],
    "Pad": [C("constant_value", {"x": rand(1, 2, 3, 4)},
              {"mode": "constant"}, init={"p": ints(0, 0, 1, 3, 0, 0, 2, 1),
                                          "v": np.array(1.5, "float32")}),
            C("constant_default", {"x": rand(3, 4)}, init={"p": ints(1, 0, 0, 2)}),
            C("edge", {"x": rand(2, 3, 4)}, {"mode": "edge"}, init={"p": ints(0, 2, 1, 0, 1, 3)}),
            C("reflect", {"x": rand(2, 3, 4)}, {"mode": "reflect"},
              init={"p": ints(0, 2, 3, 0, 1, 2)}),
            C("negative_crop", {"x": rand(4, 5)}, init={"p": ints(-1, 2, 0, -2)}),
            C("int32", {"x": np.arange(6, dtype=np.int32).reshape(2, 3)}, {"mode": "edge"},
              init={"p": ints(1, 1, 1, 1)}),
            C("axes", {"x": rand(2, 3, 4)}, init={"p": ints(1, 2, 0, 1), "v": np.array(
                -1.0, "float32"), "a": ints(-1, 0)}, opset=18),
            C("wrap", {"x": rand(2, 3)}, {"mode": "wrap"}, init={"p": ints(1, 4, 2, 2)},
              opset=19),
            C("attribute", {"x": rand(2, 3)}, {"pads": [0, 1, 2, 0], "value": 0.5}, opset=10)],
    # -- reads and writes at indices held in tensors -------------------------------
    "Gather": [C("axis0_2d_indices", {"x": rand(3, 4)}, {"axis": 0},
                 init={"i": np.array([[0, -1], [2, 1]], dtype=np.int64)}),
               C("axis1_negative", {"x": rand(2, 3, 4)}, {"axis": 1}, init={"i": ints(-1, 0, -3)}),
               C("scalar_index", {"x": rand(3, 4)}, {"axis": 0},
                 init={"i": np.array(-1, dtype=np.int64)}),
               C("fed_int32", {"x": rand(2, 5), "i": np.array([4, -5, 0], dtype=np.int32)},
                 {"axis": -1})],
    "GatherElements": [
        C("axis1", {"x": rand(2, 3)}, {"axis": 1}, init={"i": i64([[0, 0], [2, -1]])}),
        C("axis0_negative", {"x": rand(3, 3)}, init={"i": i64([[-1, -2, 0], [2, 0, 0]])}),
        C("fed_int32", {"x": rand(2, 2, 3), "i": np.array([[[1], [0]]], np.int32)},
          {"axis": -1})],
    "GatherND": [C("elements", {"x": np.arange(4, dtype=np.int32).reshape(2, 2)},
                   init={"i": i64([[0, 0], [1, 1]])}),
                 C("slices", {"x": rand(2, 2, 2)}, init={"i": i64([[[0, 1]], [[1, -2]]])}),
                 C("rows", {"x": rand(3, 4)}, init={"i": i64([[2], [0]])})],
    "ReverseSequence": [
        C("time_major", {"x": rand(4, 3, 2), "n": ints(3, 1, 4)}),
        C("batch_major", {"x": rand(3, 4), "n": ints(0, 2, 4)}, {"batch_axis": 0,
                                                                 "time_axis": 1})],
    "OneHot": [C("default_axis", {"i": ints(0, 7, -2)},
                 init={"d": np.array(9, np.int64), "v": f32([0.5, 2.0])}),
               C("axis0_out_of_range", {"i": ints(4, -5, 5)}, {"axis": 0},
                 init={"d": np.array(5.0, np.float32), "v": i64([-1, 3])}),
               # Integral float indices: for 2.7 the spec casts to 2, while
               # onnx.reference (the oracle here; onnxruntime refuses) compares 2.7.
               C("float_indices_2d", {"i": f32([[1.0, 2.0], [0.0, 3.0]])}, {"axis": 1},
                 init={"d": np.array(4, np.int32), "v": f32([0.0, 1.0])})],
    "ScatterElements": [
        scatter("axis0", rand(3, 3), i64([[1, 0, 2], [0, 2, 1]]), rand(2, 3)),
        scatter("negative_indices", rand(1, 5), i64([[1, -3]]), rand(1, 2), axis=1),
        scatter("add_duplicates", rand(1, 5), i64([[1, 1, 4]]), rand(1, 3), axis=-1,
                reduction="add"),
        scatter("mul", rand(2, 3), i64([[0, 0], [2, 2]]), rand(2, 2), axis=1, reduction="mul"),
        scatter("max", rand(2, 3), i64([[0, 0], [2, 2]]), rand(2, 2), axis=1, reduction="max",
                opset=18),
        scatter("min", rand(2, 3), i64([[0, 0], [2, 2]]), rand(2, 2), axis=1, reduction="min",
                opset=18)],
    "Scatter": [scatter("axis1", rand(2, 5), i64([[1, 3], [0, 4]]), rand(2, 2), axis=1,
                        opset=10)],
    "ScatterND": [
        scatter("slices", rand(4, 3, 2), i64([[0], [2]]), rand(2, 3, 2)),
        scatter("elements_negative", rand(2, 3), i64([[0, -1], [1, 0]]), rand(2)),
        scatter("add", rand(3, 2), i64([[1], [1]]), rand(2, 2), reduction="add"),
        scatter("mul", rand(3, 2), i64([[0], [0]]), rand(2, 2), reduction="mul"),
        scatter("max", rand(3, 2), i64([[2], [2]]), rand(2, 2), reduction="max", opset=18),
        scatter("min", rand(3, 2), i64([[2], [0]]), rand(2, 2), reduction="min", opset=18)],
    # -- tensors made from shapes, attributes and positions --------------------------
    "Shape": [C("default", {"x": rand(2, 3, 4)}),
              C("start_end", {"x": rand(2, 3, 4)}, {"start": 1, "end": -1}, opset=15),
              C("clipped", {"x": rand(2, 3, 4)}, {"start": -10, "end": 10}, opset=15),
              C("empty", {"x": rand(2, 3, 4)}, {"start": 2, "end": 1}, opset=15),
              C("of_scalar", {"x": np.array(1.0, "float32")})],
    "Size": [C("default", {"x": rand(2, 3, 4)}), C("of_scalar", {"x": np.array(1.0, "float32")})],
    "Constant": [
        C("tensor", {}, {"value": tensor(rand(2, 3))}),
        C("float", {}, {"value_float": 2.5}),
        C("ints", {}, {"value_ints": [3, -1, 7]}),
        C("bool_tensor", {}, {"value": tensor(np.array([True, False]))})],
    "ConstantOfShape": [
        C("default_zero", {}, init={"s": ints(2, 3)}),
        C("int32_value", {}, {"value": tensor(np.array([7], np.int32))}, init={"s": ints(4)}),
        C("float_value", {}, {"value": tensor(f32([-0.5]))}, init={"s": ints(1, 2, 2)})],
    "NonZero": [C("constant", {}, init={"x": np.array([[1, 0, 2], [0, 3, 0]], np.float32)})],
    "Range": [C("float", {}, init={"s": np.array(1.0, "float32"), "l": np.array(5.0, "float32"),
                                   "d": np.array(0.5, "float32")}),
              C("int32_negative_delta", {}, init={"s": np.array(10, np.int32),
                                                  "l": np.array(6, np.int32),
                                                  "d": np.array(-3, np.int32)}),
              C("int64_empty", {}, init={"s": np.array(3), "l": np.array(1),
                                          "d": np.array(1)})],
    "EyeLike": [C("square", {"x": rand(4, 4)}),
                C("dtype_k", {"x": rand(3, 5)}, {"dtype": 11, "k": 1}),
                C("negative_k_int", {"x": i64([[1, 2], [3, 4], [5, 6]])}, {"k": -1})],
    "Trilu": [C("upper", {"x": rand(4, 5)}),
              C("upper_negative_k", {"x": rand(4, 5)}, init={"k": np.array(-1, np.int64)}),
              C("lower_k", {"x": rand(2, 3, 3)}, {"upper": 0},
                init={"k": np.array(1, np.int64)}),
              C("lower_out_of_range", {"x": i64([[1, 2, 3], [4, 5, 6]])}, {"upper": 0},
                init={"k": np.array(-7, np.int64)})],
    "Einsum": [C("batch_matmul", {"a": rand(2, 2, 3), "b": rand(2, 3, 4)},
                 {"equation": "bij, bjk -> bik"}),
               C("transpose", {"a": rand(3, 4)}, {"equation": "ij->ji"}),
               C("sum_rows", {"a": rand(3, 4)}, {"equation": "ij->i"}),
               C("batch_diagonal", {"a": rand(3, 5, 5)}, {"equation": "...ii ->...i"}),
               C("inner", {"a": rand(5), "b": rand(5)}, {"equation": "i,i"}),
               C("implicit_outer", {"a": rand(3), "b": rand(2)}, {"equation": "i,j"}),
               C("broadcast_ellipsis", {"a": rand(2, 1, 3), "b": rand(2, 4, 3)},
                 {"equation": "...j,...j->..."})],
}
