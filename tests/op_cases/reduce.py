"""Cases for reductions, normalizations and the ops that walk along an axis."""
import numpy as np

from op_cases.base import C, ints, pos, rand

_rng = np.random.default_rng(11)


def masked_scores():
    """Attention-like scores, 4 rows of 200: a masked tail (float's lowest added, as
    exporters mask), scattered masked lanes, -inf lanes, and a row masked but for one."""
    x = rand(4, 200) * 3
    x[0, 130:] += np.finfo(np.float32).min
    x[1, _rng.random(200) < 0.5] += np.finfo(np.float32).min
    x[2, ::7] = -np.inf
    x[3, 1:] += np.finfo(np.float32).min
    return x


def small_ints(*shape, dtype="int32"):
    """Few distinct values, so lines hold ties."""
    return _rng.integers(-2, 3, shape).astype(dtype)


def reduce_cases(make=rand, attr_opset=13, dtype_case=None):
    """Axes as an attribute (before opset 18, 13 for ReduceSum) and as an input."""
    cases = [
        C("attr_axis_keep", {"x": make(3, 4, 5)}, {"axes": [1]}, opset=attr_opset),
        C("attr_two_axes_drop", {"x": make(3, 4, 5)}, {"axes": [0, -1], "keepdims": 0},
          opset=attr_opset),
        C("attr_all", {"x": make(3, 4, 5)}, opset=attr_opset),
        C("input_axis_drop", {"x": make(3, 4, 5)}, {"keepdims": 0}, init={"axes": ints(-2)},
          opset=attr_opset + 5),
        C("input_outer_axes", {"x": make(2, 3, 4)}, init={"axes": ints(2, 0)},
          opset=attr_opset + 5),
        C("no_axes_all_drop", {"x": make(2, 3)}, {"keepdims": 0}, opset=attr_opset + 5),
        C("noop", {"x": make(2, 3)}, {"noop_with_empty_axes": 1}, opset=attr_opset + 5),
    ]
    return cases + ([dtype_case] if dtype_case else [])


def _exp_range(*shape):
    return rand(*shape) * 3


CASES = {
    # -- reductions -----------------------------------------------------------
    "ReduceSum": reduce_cases(attr_opset=11, dtype_case=C(
        "int64", {"x": small_ints(3, 4, dtype="int64")}, init={"axes": ints(1)}, opset=16)),
    "ReduceMean": reduce_cases(),
    "ReduceMax": reduce_cases(dtype_case=C("int32", {"x": small_ints(3, 4)}, {"axes": [1]},
                                           opset=13)),
    "ReduceMin": reduce_cases(dtype_case=C("float64", {"x": rand(3, 4, dtype="float64")},
                                           {"axes": [0]}, opset=13)),
    "ReduceProd": reduce_cases(make=pos),
    "ReduceL1": reduce_cases(),
    "ReduceL2": reduce_cases(),
    "ReduceLogSum": reduce_cases(make=pos),
    "ReduceSumSquare": reduce_cases(),
    "ReduceLogSumExp": reduce_cases(make=_exp_range),
    "ArgMax": [C("axis1_keep", {"x": rand(3, 4, 5)}, {"axis": 1}),
               C("last_drop", {"x": rand(3, 4, 5)}, {"axis": -1, "keepdims": 0}),
               C("ties_first", {"x": small_ints(4, 6)}, {"axis": 1}),
               C("ties_last", {"x": small_ints(4, 6)}, {"axis": 0, "select_last_index": 1})],
    "ArgMin": [C("default_axis0", {"x": rand(3, 4, 5)}),
               C("ties_first_drop", {"x": small_ints(4, 6)}, {"axis": -1, "keepdims": 0}),
               C("ties_last", {"x": small_ints(4, 6)}, {"axis": 1, "select_last_index": 1})],
    "TopK": [C("largest", {"x": rand(3, 6)}, init={"k": ints(3)}, outputs=("v", "i"), opset=11),
             C("smallest_axis0", {"x": rand(5, 2, 3)}, {"axis": 0, "largest": 0},
               init={"k": ints(2)}, outputs=("v", "i"), opset=11),
             C("ties_int", {"x": small_ints(3, 7)}, init={"k": ints(4)}, outputs=("v", "i"),
               opset=11)],
    "CumSum": [C("axis1", {"x": rand(2, 3, 4)}, init={"axis": np.array(1, np.int64)}, opset=14),
               C("exclusive_reverse", {"x": rand(2, 3, 4)}, {"exclusive": 1, "reverse": 1},
                 init={"axis": np.array(-1, np.int32)}, opset=14),
               C("reverse_axis0_int", {"x": small_ints(4, 3)}, {"reverse": 1},
                 init={"axis": ints(0)}, opset=14),
               C("exclusive", {"x": rand(5)}, {"exclusive": 1},
                 init={"axis": np.array(0, np.int64)}, opset=14)],
    # -- softmax family ---------------------------------------------------------
    "Softmax": [C("last", {"x": rand(2, 3, 4)}, {"axis": -1}),
                C("axis1", {"x": rand(2, 3, 4)}, {"axis": 1}),
                C("default", {"x": rand(3, 5) * 4}),
                # Before opset 13 Softmax flattens to 2-D at axis.
                C("opset11_axis1", {"x": rand(2, 3, 4)}, {"axis": 1}, opset=11),
                # masked scores as exporters write them: rows of 200 (chunks of 64) with a
                # masked tail, masked lanes here and there, -inf, a row masked whole
                C("masked", {"x": masked_scores()}, {"axis": -1}),
                C("masked_float64", {"x": masked_scores().astype("float64")}, {"axis": -1})],
    "LogSoftmax": [C("last", {"x": rand(2, 3, 4)}, {"axis": -1}),
                   C("axis0", {"x": rand(2, 3, 4)}, {"axis": 0}),
                   C("opset11_default", {"x": rand(2, 3, 4)}, opset=11)],
    "Hardmax": [C("default", {"x": rand(3, 5)}),
                C("axis0_ties", {"x": small_ints(4, 3).astype("float32")}, {"axis": 0}),
                C("opset11_axis1", {"x": rand(2, 3, 4)}, {"axis": 1}, opset=11)],
    # -- normalizations -----------------------------------------------------------
    "LayerNormalization": [
        C("bias", {"x": rand(2, 3, 4)}, {"axis": -1}, init={"s": rand(4), "b": rand(4)}),
        C("no_bias", {"x": rand(2, 3, 4)}, {"epsilon": 1e-3}, init={"s": rand(4)}),
        C("axis_minus2", {"x": rand(2, 3, 4)}, {"axis": -2},
          init={"s": rand(3, 4), "b": rand(3, 4)}),
        C("mean_inv_std", {"x": rand(2, 3, 4)}, {"axis": 1}, init={"s": rand(3, 4)},
          outputs=("y", "mean", "inv_std")),
        C("broadcast_scale", {"x": rand(2, 3, 4)}, {"axis": 1},
          init={"s": rand(1, 4), "b": rand(3, 1)})],
    "RMSNormalization": [
        C("last", {"x": rand(2, 3, 4)}, init={"s": rand(4)}, opset=23),
        C("axis1_epsilon", {"x": rand(2, 3, 4)}, {"axis": 1, "epsilon": 1e-2},
          init={"s": rand(3, 4)}, opset=23),
        # a row of 12 scaled per feature (the one-pass kernel's j_ % 4), and double data
        C("axis1_feature_scale", {"x": rand(2, 3, 4)}, {"axis": 1}, init={"s": rand(4)},
          opset=23),
        C("float64", {"x": rand(3, 40).astype("float64")}, init={"s": rand(40).astype("float64")},
          opset=23)],
    "BatchNormalization": [
        C("inference", {"x": rand(2, 3, 4, 5)}, {"epsilon": 1e-3},
          init={"s": rand(3), "b": rand(3), "m": rand(3), "v": pos(3)}, opset=15),
        C("inference_2d", {"x": rand(4, 3)},
          init={"s": rand(3), "b": rand(3), "m": rand(3), "v": pos(3)}, opset=15),
        C("training", {"x": rand(2, 3, 4)}, {"training_mode": 1, "momentum": 0.8},
          init={"s": rand(3), "b": rand(3), "m": rand(3), "v": pos(3)},
          outputs=("y", "running_mean", "running_var"), opset=15)],
    "InstanceNormalization": [
        C("4d", {"x": rand(2, 3, 4, 5)}, init={"s": rand(3), "b": rand(3)}),
        C("3d_epsilon", {"x": rand(2, 3, 6)}, {"epsilon": 1e-2}, init={"s": rand(3), "b": rand(3)})],
    # onnx infers no output type for GroupNormalization: outputs are declared. Its
    # checker refuses opset 18 (deprecated), so per-group scale is left to the node suite.
    "GroupNormalization": [
        C("per_channel", {"x": rand(2, 6, 2, 2)}, {"num_groups": 3, "epsilon": 1e-2},
          init={"s": rand(6), "b": rand(6)}, outputs={"y": ([2, 6, 2, 2], "float32")},
          opset=21)],
    # onnx's checker fails on MeanVarianceNormalization without an explicit axes.
    "MeanVarianceNormalization": [C("axes_0_2_3", {"x": rand(2, 3, 4, 2)}, {"axes": [0, 2, 3]}),
                                  C("last_axes", {"x": rand(2, 3, 4)}, {"axes": [1, 2]})],
    "LpNormalization": [C("l2_default", {"x": rand(2, 3, 4)}),
                        C("l1_axis0", {"x": rand(3, 4)}, {"axis": 0, "p": 1})],
}
