"""MaxPool with Indices (what a training program saves for its backward pass) in one
pass: values and the first maximal tap's flat index equal onnxruntime's, with pads,
ceil mode, dilation, ties and windows of -inf."""
import numpy as np
import pytest

import workbench
from fusion_helpers import F32, graph_model, node

CASES = {
    "3x3 stride 2 pads 1": ((2, 3, 11, 11), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                 pads=[1, 1, 1, 1])),
    "ceil mode": ((1, 2, 9, 10), dict(kernel_shape=[2, 3], strides=[2, 1], ceil_mode=1)),
    "dilated, uneven pads": ((1, 2, 12, 12), dict(kernel_shape=[3, 3], dilations=[2, 2],
                                                  pads=[2, 1, 2, 1])),
    "2x2 stride 2": ((2, 4, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_indices_equal_onnxruntime(case):
    shape, attrs = CASES[case]
    ws = workbench.open(graph_model([node("MaxPool", ["x"], ["y", "i"], **attrs)],
                                    {"x": (list(shape), F32)}, ["y", "i"]))
    rng = np.random.default_rng(0)
    ties = rng.integers(0, 3, shape).astype(np.float32)
    lows = ties.copy()
    lows[..., ::2, :] = -np.inf   # windows whose first taps are -inf
    for x in (rng.standard_normal(shape).astype(np.float32), ties, lows):
        report = ws.verify(inputs={"x": x})
        assert report.match, report
