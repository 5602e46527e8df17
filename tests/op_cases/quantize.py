"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (the edge cases are in
tests/test_quantized_models.py)."""
import numpy as np

from op_cases.base import C, rand


def _f32(*values):
    return np.array(values, np.float32)


CASES = {
    "QuantizeLinear": [
        C("per_tensor_uint8", {"x": rand(2, 3, 4) * 3},
          init={"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8)}),
        C("per_axis_int8", {"x": rand(2, 3, 4)}, {"axis": 1},
          init={"s": _f32(0.01, 0.02, 0.05), "z": np.array([-3, 0, 7], np.int8)}),
        C("no_zero_point", {"x": rand(5)}, init={"s": np.array(0.1, np.float32)}),
    ],
    "DequantizeLinear": [
        C("per_tensor_int8", {"x": np.arange(-128, 128, 8, dtype=np.int8).reshape(4, 8)},
          init={"s": np.array(0.03, np.float32), "z": np.array(-5, np.int8)}),
        C("per_axis_uint8", {"x": np.arange(24, dtype=np.uint8).reshape(2, 3, 4) * 10},
          {"axis": -2}, init={"s": _f32(0.5, 0.25, 2.0), "z": np.array([0, 128, 255], np.uint8)}),
        C("int32_no_zero_point", {"x": np.array([-70000, -1, 0, 5, 1 << 30], np.int32)},
          init={"s": np.array(0.001, np.float32)}),
    ],
    "DynamicQuantizeLinear": [
        C("mixed_signs", {"x": rand(3, 4, 5) * 4}, outputs=("y", "y_scale", "y_zero_point")),
        C("all_positive", {"x": np.abs(rand(7)) + 1}, outputs=("y", "y_scale", "y_zero_point")),
    ],
}
