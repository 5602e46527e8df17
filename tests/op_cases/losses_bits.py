"""Op types of issue 17: losses, BitShift, CumProd, CenterCropPad, DFT, AffineGrid,
GridSample, Col2Im, BitCast, DeformConv."""
import numpy as np

from op_cases.base import C, rand

_rng = np.random.default_rng(17)


def labels(*shape, classes=5, ignored=None):
    """Class labels in [0, classes), with some set to ``ignored`` when given."""
    t = _rng.integers(0, classes, shape).astype(np.int64)
    if ignored is not None:
        t.flat[::3] = ignored
    return t


def weights(classes=5):
    return _rng.uniform(0.2, 2.0, classes).astype(np.float32)


def typed(values, dtype):
    return np.array(values, dtype=dtype)


CASES = {
    "NegativeLogLikelihoodLoss": [
        C("none", {"x": rand(3, 5), "t": labels(3)}, {"reduction": "none"}),
        C("mean_default", {"x": rand(3, 5, 2), "t": labels(3, 2)}),
        C("sum_weight", {"x": rand(2, 5, 3, 2), "t": labels(2, 3, 2)}, {"reduction": "sum"},
          init={"w": weights()}, node_inputs=["x", "t", "w"]),
        C("mean_weight_negative_ii", {"x": rand(3, 5, 6), "t": labels(3, 6, ignored=-1)},
          {"reduction": "mean", "ignore_index": -1}, init={"w": weights()},
          node_inputs=["x", "t", "w"]),
        C("mean_no_weight_ii", {"x": rand(3, 5, 4), "t": labels(3, 4, ignored=2)},
          {"reduction": "mean", "ignore_index": 2}),
        C("none_ii_float64", {"x": rand(3, 5, 2, dtype="float64"), "t": labels(3, 2, ignored=7)},
          {"reduction": "none", "ignore_index": 7}),
    ],
    "SoftmaxCrossEntropyLoss": [
        C("mean", {"x": rand(3, 5) * 3, "t": labels(3)}),
        C("mean_log_prob", {"x": rand(3, 5, 2), "t": labels(3, 2)}, {"reduction": "mean"},
          outputs=("z", "log_prob")),
        C("none_weight_negative_ii", {"x": rand(2, 5, 3, 2), "t": labels(2, 3, 2, ignored=-5)},
          {"reduction": "none", "ignore_index": -5}, init={"w": weights()},
          node_inputs=["x", "t", "w"], outputs=("z", "log_prob")),
        C("sum_ii", {"x": rand(4, 5, 3), "t": labels(4, 3, ignored=0)},
          {"reduction": "sum", "ignore_index": 0}),
        C("mean_weight_ii", {"x": rand(3, 5, 2, 2), "t": labels(3, 2, 2, ignored=1)},
          {"reduction": "mean", "ignore_index": 1}, init={"w": weights()},
          node_inputs=["x", "t", "w"]),
    ],
    "BitShift": [
        C("left_uint8", {"x": typed([16, 4, 1, 255], np.uint8),
                         "s": typed([1, 2, 3, 1], np.uint8)},
          {"direction": "LEFT"}, opset=11),
        C("right_uint64", {"x": typed([[16, 4, 1], [2**63, 7, 9]], np.uint64),
                           "s": typed([1, 2, 63], np.uint64)}, {"direction": "RIGHT"}, opset=11),
        C("right_int32_negative", {"x": typed([-16, -1, 5, -7], np.int32),
                                   "s": typed([1, 4, 1, 2], np.int32)},
          {"direction": "RIGHT"}, opset=28),
        C("left_int8_overflow", {"x": typed([64, -1, 3, -128], np.int8),
                                 "s": typed([1, 7, 6, 1], np.int8)},
          {"direction": "LEFT"}, opset=28),
        C("left_int16_broadcast", {"x": typed([[1, -2, 3], [4, 5, -6]], np.int16),
                                   "s": typed([3], np.int16)}, {"direction": "LEFT"}, opset=28),
    ],
    "CenterCropPad": [
        C("crop_and_pad", {"x": rand(9, 4, 3)}, init={"shape": np.array([4, 7, 3], np.int64)},
          opset=18),
        C("negative_axes_odd", {"x": rand(3, 8, 5)}, {"axes": [-2, -1]},
          init={"shape": np.array([5, 8], np.int64)}, opset=18),
    ],
    "DFT": [
        C("real_axis1", {"x": rand(2, 6, 3, 1)}, {"axis": 1}, opset=17),
        C("complex_inverse_length", {"x": rand(2, 5, 2)}, {"axis": 1, "inverse": 1},
          init={"n": np.array(7, np.int64)}, node_inputs=["x", "n"], opset=17),
        C("onesided_axis_input", {"x": rand(3, 8, 1)}, {"onesided": 1},
          init={"n": np.array(8, np.int64), "axis": np.array(-2, np.int64)}, opset=20),
    ],
    "AffineGrid": [
        C("2d", {"theta": rand(2, 2, 3)}, init={"size": np.array([2, 3, 4, 5], np.int64)},
          outputs=("grid",), opset=20),
        C("3d_align_corners", {"theta": rand(1, 3, 4)}, {"align_corners": 1},
          init={"size": np.array([1, 1, 3, 2, 4], np.int64)}, outputs=("grid",), opset=20),
    ],
    "GridSample": [
        C("bilinear_border", {"x": rand(1, 2, 4, 5), "grid": _rng.uniform(-1.2, 1.2, (1, 3, 2, 2))
                              .astype(np.float32)}, {"padding_mode": "border"}, opset=16),
        C("nearest_reflection_aligned", {"x": rand(2, 1, 3, 4),
                                         "grid": _rng.uniform(-1.5, 1.5, (2, 2, 3, 2))
                                         .astype(np.float32)},
          {"mode": "nearest", "padding_mode": "reflection", "align_corners": 1}, opset=16),
        C("bicubic_zeros", {"x": rand(1, 1, 5, 5), "grid": _rng.uniform(-1.1, 1.1, (1, 2, 3, 2))
                            .astype(np.float32)}, {"mode": "bicubic"}, opset=16),
    ],
    "Col2Im": [
        C("strides_pads", {"x": rand(2, 2 * 4, 9)}, {"strides": [2, 2], "pads": [1, 0, 1, 0]},
          init={"image_shape": np.array([5, 6], np.int64),
                "block_shape": np.array([2, 2], np.int64)}, opset=18),
        C("dilations", {"x": rand(1, 6, 6)}, {"dilations": [2, 1]},
          init={"image_shape": np.array([5, 4], np.int64),
                "block_shape": np.array([2, 3], np.int64)}, opset=18),
    ],
    "BitCast": [
        C("float_to_int32", {"x": rand(2, 3)}, {"to": 6}, opset=26),
        C("int64_to_float64",
          {"x": typed([1, 2**62, 4607182418800017408, -4616189618054758400], np.int64)},
          {"to": 11}, opset=26),
        C("int8_to_uint8", {"x": typed([-128, -1, 0, 127], np.int8)}, {"to": 2}, opset=26),
    ],
    "DeformConv": [
        C("groups_mask_bias", {"x": rand(1, 4, 5, 5), "offset": rand(1, 2 * 9 * 2, 3, 3),
                               "mask": _rng.uniform(0, 1, (1, 2 * 9, 3, 3)).astype(np.float32)},
          {"group": 2, "offset_group": 2},
          init={"w": rand(4, 2, 3, 3), "b": rand(4)},
          node_inputs=["x", "w", "offset", "b", "mask"], opset=19),
        C("stride_pad_dilation", {"x": rand(2, 1, 6, 5), "offset": rand(2, 2 * 4, 3, 3) * 2},
          {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 1]},
          init={"w": rand(3, 1, 2, 2)}, node_inputs=["x", "w", "offset"], opset=19),
    ],
    "CumProd": [
        C("axis1", {"x": rand(2, 3, 4)}, init={"axis": np.array(1, np.int64)}, opset=26),
        C("exclusive_reverse", {"x": rand(2, 3, 4)}, {"exclusive": 1, "reverse": 1},
          init={"axis": np.array(-1, np.int32)}, opset=26),
        C("reverse_int32", {"x": typed([[1, 2, 3], [-2, 3, 4]], np.int32)}, {"reverse": 1},
          init={"axis": np.array(1, np.int64)}, opset=26),
        C("exclusive_float64", {"x": rand(5, dtype="float64")}, {"exclusive": 1},
          init={"axis": np.array(0, np.int64)}, opset=26),
    ],
}
