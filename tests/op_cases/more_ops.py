"""Op types of issue 17 that onnxruntime implements: CausalConvWithState, Swish,
TensorScatter, RoiAlign, the spectral windows, MelWeightMatrix, STFT, LRN and Det.
(FlexAttention, SwiGLU, the training optimizers and the ai.onnx.ml ops are judged by
the node suite's cases in tests/test_more_ops.py; see test_ops.NODE_SUITE_ONLY.)"""
import numpy as np

from op_cases.base import C, rand

_rng = np.random.default_rng(27)


def scalar(value, dtype=np.int64):
    return np.array(value, dtype=dtype)


CASES = {
    "CausalConvWithState": [
        C("bias_past_silu", {"x": rand(2, 3, 7), "w": rand(3, 1, 4), "b": rand(3),
                             "past": rand(2, 3, 3)}, {"activation": "silu"},
          outputs=("y", "present"), opset=27),
        C("no_past_short", {"x": rand(1, 2, 2), "w": rand(2, 1, 5)}, outputs=("y", "present"),
          opset=27),
    ],
    "Swish": [C("alpha", {"x": rand(3, 4)}, {"alpha": 0.7}, opset=24)],
    "TensorScatter": [
        C("linear", {"cache": rand(2, 3, 6, 4), "update": rand(2, 3, 2, 4)},
          {"mode": "linear"}, init={"at": np.array([1, 4], np.int64)},
          node_inputs=["cache", "update", "at"], opset=24),
        C("circular_axis", {"cache": rand(2, 5, 3), "update": rand(2, 3, 3)},
          {"mode": "circular", "axis": 1}, init={"at": np.array([3, 0], np.int64)},
          node_inputs=["cache", "update", "at"], opset=24),
    ],
    "RoiAlign": [
        C("avg_adaptive", {"x": rand(2, 2, 8, 9)}, {"output_height": 3, "output_width": 2,
                                                    "spatial_scale": 0.5},
          init={"rois": np.array([[0, 0, 12, 14], [3, 2, 9, 17.5]], np.float32),
                "batch": np.array([1, 0], np.int64)}, node_inputs=["x", "rois", "batch"],
          opset=16),
        C("max_fixed", {"x": rand(1, 3, 6, 6)}, {"mode": "max", "sampling_ratio": 2,
                                                 "output_height": 2, "output_width": 2},
          init={"rois": np.array([[0.5, 1, 4, 5.5]], np.float32),
                "batch": np.array([0], np.int64)}, node_inputs=["x", "rois", "batch"],
          opset=16),
    ],
    "HannWindow": [C("periodic", {}, init={"size": scalar(12)}, opset=17)],
    "HammingWindow": [C("symmetric", {}, {"periodic": 0}, init={"size": scalar(9)}, opset=17)],
    "BlackmanWindow": [C("double", {}, {"output_datatype": 11}, init={"size": scalar(7)},
                         opset=17)],
    "MelWeightMatrix": [
        C("default", {}, init={"bins": scalar(8), "length": scalar(32), "rate": scalar(8000),
                               "low": scalar(60.0, np.float32),
                               "high": scalar(3800.0, np.float32)}, opset=17),
    ],
    "STFT": [
        C("onesided_window", {"x": rand(2, 64, 1)}, {"onesided": 1},
          init={"step": scalar(8), "w": np.hanning(16).astype(np.float32)},
          node_inputs=["x", "step", "w"], opset=17),
        C("complex_length", {"x": rand(1, 40, 2)}, {"onesided": 0},
          init={"step": scalar(5), "n": scalar(10)}, node_inputs=["x", "step", "", "n"],
          opset=17),
    ],
    "LRN": [C("size5", {"x": rand(2, 6, 3, 3)}, {"size": 5, "alpha": 0.01, "beta": 0.6,
                                                 "bias": 1.5})],
    "Det": [C("batch", {"x": rand(2, 4, 4)}), C("single", {"x": rand(3, 3)})],
}
