"""Cases for the ops whose output size depends on the data (workbench/ops/data_dependent.py).

The data are initializers: the size is then known at import, as the
workbench needs outside the ONNX backend (which bounds run-time sizes; see
tests/test_data_dependent.py). The kernels still run as compiled code.
"""
import numpy as np

from op_cases.base import C, ints

_rng = np.random.default_rng(77)


def _boxes(batches, n, center=False):
    corner = _rng.uniform(0, 10, (batches, n, 2)).astype("f4")
    size = _rng.uniform(1, 4, (batches, n, 2)).astype("f4")
    return np.concatenate([corner + size / 2, size] if center else [corner, corner + size], 2)


def _repeats():
    x = _rng.integers(0, 3, (3, 8)).astype(np.float32)
    x[:, 5] = x[:, 1]
    return x


_UNIQUE_OUT = ("y", "indices", "inverse", "counts")
CASES = {
    "Unique": [C("flat_sorted", {}, init={"x": _repeats()}, outputs=_UNIQUE_OUT),
               C("axis_unsorted", {}, {"axis": 1, "sorted": 0}, init={"x": _repeats()},
                 outputs=_UNIQUE_OUT),
               C("negative_axis_int", {}, {"axis": -2}, init={"x": ints(2, 1, 2, 3, 1, 2)
                                                                  .reshape(3, 2)},
                 outputs=_UNIQUE_OUT),
               C("flat_unsorted_y_only", {}, {"sorted": 0}, init={"x": _repeats()})],
    "NonMaxSuppression": [
        C("corners", {}, init={"b": _boxes(2, 12), "s": _rng.uniform(0, 1, (2, 3, 12))
                               .astype("f4"), "k": ints(3), "iou": np.array([0.4], "f4"),
                               "t": np.array([0.1], "f4")}),
        C("center_no_threshold", {}, {"center_point_box": 1},
          init={"b": _boxes(1, 10, center=True), "s": _rng.uniform(0, 1, (1, 2, 10))
                .astype("f4"), "k": ints(20), "iou": np.array([0.2], "f4")}),
    ],
}
