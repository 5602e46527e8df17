"""Every gradient rule against central differences in float64 (onnx's
reference evaluator runs both the training program and the shifted forward
passes), on small shapes; the op's float inputs are the parameters."""
import numpy as np
import pytest

from tests.training_helpers import check_gradients, single_op_model

R = np.random.default_rng(7)


def f(*shape, low=None):
    a = R.standard_normal(shape)
    return np.abs(a) + low if low is not None else a


def i64(*values):
    return np.array(values, dtype=np.int64)


# (id, op, weights (name -> array; float ones are the parameters), output shapes, attrs, opset)
CASES = [
    ("add-broadcast", "Add", {"a": f(2, 3, 4), "b": f(3, 1)}, [(2, 3, 4)], {}, 17),
    ("sub", "Sub", {"a": f(3, 4), "b": f(4)}, [(3, 4)], {}, 17),
    ("mul-broadcast", "Mul", {"a": f(2, 1, 4), "b": f(3, 1)}, [(2, 3, 4)], {}, 17),
    ("div", "Div", {"a": f(3, 4), "b": f(3, 4, low=0.5)}, [(3, 4)], {}, 17),
    ("sum3", "Sum", {"a": f(3, 4), "b": f(4), "c": f(3, 1)}, [(3, 4)], {}, 17),
    ("mean", "Mean", {"a": f(3, 4), "b": f(4)}, [(3, 4)], {}, 17),
    ("max", "Max", {"a": f(3, 4), "b": f(3, 4)}, [(3, 4)], {}, 17),
    ("min", "Min", {"a": f(3, 4), "b": f(4)}, [(3, 4)], {}, 17),
    ("neg", "Neg", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("relu", "Relu", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("leaky-relu", "LeakyRelu", {"x": f(3, 4)}, [(3, 4)], {"alpha": 0.1}, 17),
    ("elu", "Elu", {"x": f(3, 4)}, [(3, 4)], {"alpha": 0.7}, 17),
    ("sigmoid", "Sigmoid", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("tanh", "Tanh", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("exp", "Exp", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("log", "Log", {"x": f(3, 4, low=0.2)}, [(3, 4)], {}, 17),
    ("sqrt", "Sqrt", {"x": f(3, 4, low=0.2)}, [(3, 4)], {}, 17),
    ("reciprocal", "Reciprocal", {"x": f(3, 4, low=0.5)}, [(3, 4)], {}, 17),
    ("abs", "Abs", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("erf", "Erf", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("softplus", "Softplus", {"x": f(3, 4)}, [(3, 4)], {}, 17),
    ("gelu", "Gelu", {"x": f(3, 4)}, [(3, 4)], {}, 20),
    ("gelu-tanh", "Gelu", {"x": f(3, 4)}, [(3, 4)], {"approximate": "tanh"}, 20),
    ("pow", "Pow", {"x": f(3, 4, low=0.3), "p": f(4)}, [(3, 4)], {}, 17),
    ("clip", "Clip", {"x": f(3, 4), "lo": np.array(-0.5), "hi": np.array(0.6)}, [(3, 4)], {}, 17),
    ("hard-sigmoid", "HardSigmoid", {"x": 4 * f(3, 4)}, [(3, 4)], {"alpha": 0.3}, 17),
    ("hard-swish", "HardSwish", {"x": 4 * f(3, 4)}, [(3, 4)], {}, 17),
    ("where", "Where", {"c": R.random((3, 4)) > 0.5, "a": f(3, 4), "b": f(4)}, [(3, 4)], {}, 17),
    ("expand", "Expand", {"x": f(3, 1), "s": i64(2, 3, 4)}, [(2, 3, 4)], {}, 17),
    ("matmul-2d", "MatMul", {"a": f(3, 4), "b": f(4, 5)}, [(3, 5)], {}, 17),
    ("matmul-batch-by-matrix", "MatMul", {"a": f(2, 3, 4), "b": f(4, 5)}, [(2, 3, 5)], {}, 17),
    ("matmul-batched", "MatMul", {"a": f(2, 3, 4), "b": f(2, 4, 5)}, [(2, 3, 5)], {}, 17),
    ("matmul-broadcast", "MatMul", {"a": f(2, 1, 3, 4), "b": f(3, 4, 5)}, [(2, 3, 3, 5)], {}, 17),
    ("matmul-vector-left", "MatMul", {"a": f(4), "b": f(2, 4, 5)}, [(2, 5)], {}, 17),
    ("matmul-vector-right", "MatMul", {"a": f(2, 3, 4), "b": f(4)}, [(2, 3)], {}, 17),
    ("gemm", "Gemm", {"a": f(3, 4), "b": f(4, 5), "c": f(5)}, [(3, 5)], {}, 17),
    ("gemm-transposed", "Gemm", {"a": f(4, 3), "b": f(5, 4), "c": f(3, 1)}, [(3, 5)],
     {"transA": 1, "transB": 1, "alpha": 0.7, "beta": 1.3}, 17),
    ("gemm-transA", "Gemm", {"a": f(4, 3), "b": f(4, 5)}, [(3, 5)], {"transA": 1}, 17),
    ("reshape", "Reshape", {"x": f(2, 6), "s": i64(3, -1)}, [(3, 4)], {}, 17),
    ("flatten", "Flatten", {"x": f(2, 3, 2)}, [(2, 6)], {"axis": 1}, 17),
    ("squeeze", "Squeeze", {"x": f(2, 1, 3), "a": i64(1)}, [(2, 3)], {}, 17),
    ("unsqueeze", "Unsqueeze", {"x": f(2, 3), "a": i64(0)}, [(1, 2, 3)], {}, 17),
    ("transpose", "Transpose", {"x": f(2, 3, 4)}, [(4, 2, 3)], {"perm": [2, 0, 1]}, 17),
    ("concat", "Concat", {"a": f(2, 3), "b": f(2, 2)}, [(2, 5)], {"axis": 1}, 17),
    ("split", "Split", {"x": f(2, 5), "s": i64(2, 3)}, [(2, 2), (2, 3)], {"axis": 1}, 17),
    ("slice", "Slice", {"x": f(4, 6), "s": i64(1, 1), "e": i64(3, -1)}, [(2, 4)], {}, 17),
    ("slice-strided", "Slice", {"x": f(4, 6), "s": i64(-1, 0), "e": i64(-5, 6), "a": i64(0, 1),
                                "t": i64(-2, 2)}, [(2, 3)], {}, 17),
    ("pad", "Pad", {"x": f(2, 3), "p": i64(1, 0, 0, 2)}, [(3, 5)], {}, 17),
    ("tile", "Tile", {"x": f(2, 3), "r": i64(2, 2)}, [(4, 6)], {}, 17),
    ("gather-rows", "Gather", {"x": f(5, 3), "i": i64(0, 4, 0, -1)}, [(4, 3)], {}, 17),
    ("gather-axis1", "Gather", {"x": f(2, 5, 3), "i": np.array([[1, 2], [2, 4]], np.int64)},
     [(2, 2, 2, 3)], {"axis": 1}, 17),
    ("reduce-sum", "ReduceSum", {"x": f(2, 3, 4), "a": i64(1)}, [(2, 1, 4)], {}, 17),
    ("reduce-sum-all", "ReduceSum", {"x": f(2, 3)}, [(1, 1)], {}, 17),
    ("reduce-mean", "ReduceMean", {"x": f(2, 3, 4)}, [(2, 4)],
     {"axes": [1], "keepdims": 0}, 17),
    ("reduce-mean-18", "ReduceMean", {"x": f(2, 3, 4), "a": i64(0, 2)}, [(1, 3, 1)], {}, 18),
    ("softmax", "Softmax", {"x": f(2, 3, 4)}, [(2, 3, 4)], {"axis": 1}, 17),
    ("log-softmax", "LogSoftmax", {"x": f(2, 5)}, [(2, 5)], {}, 17),
    ("layer-norm", "LayerNormalization", {"x": f(2, 3, 4), "s": f(4), "b": f(4)}, [(2, 3, 4)],
     {}, 17),
    ("layer-norm-axis1", "LayerNormalization", {"x": f(2, 3, 4), "s": f(3, 4), "b": f(3, 4)},
     [(2, 3, 4)], {"axis": 1}, 17),
    ("conv", "Conv", {"x": f(2, 3, 6, 6), "w": f(4, 3, 3, 3), "b": f(4)}, [(2, 4, 4, 4)], {}, 17),
    ("conv-stride-pad", "Conv", {"x": f(2, 3, 7, 7), "w": f(4, 3, 3, 3)}, [(2, 4, 4, 4)],
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
    ("conv-dilated-asym", "Conv", {"x": f(1, 2, 8, 7), "w": f(3, 2, 3, 2)}, [(1, 3, 5, 7)],
     {"dilations": [2, 1], "pads": [1, 0, 0, 1]}, 17),
    ("conv-grouped", "Conv", {"x": f(2, 4, 5, 5), "w": f(6, 2, 3, 3)}, [(2, 6, 3, 3)],
     {"group": 2}, 17),
    ("conv-depthwise", "Conv", {"x": f(2, 3, 6, 6), "w": f(3, 1, 3, 3), "b": f(3)},
     [(2, 3, 3, 3)], {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
    ("conv-1d-same", "Conv", {"x": f(2, 3, 9), "w": f(2, 3, 4)}, [(2, 2, 5)],
     {"strides": [2], "auto_pad": "SAME_UPPER"}, 17),
    ("max-pool", "MaxPool", {"x": f(2, 3, 7, 7)}, [(2, 3, 4, 4)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
    ("max-pool-ceil", "MaxPool", {"x": f(1, 2, 6, 6)}, [(1, 2, 3, 3)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 17),
    ("avg-pool-exclude-pad", "AveragePool", {"x": f(2, 3, 7, 7)}, [(2, 3, 4, 4)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
    ("avg-pool-include-pad", "AveragePool", {"x": f(1, 2, 6, 5)}, [(1, 2, 3, 3)],
     {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 0, 1],
      "count_include_pad": 1}, 17),
    ("avg-pool-ceil", "AveragePool", {"x": f(1, 2, 6, 6)}, [(1, 2, 3, 3)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 17),
    ("conv-transpose", "ConvTranspose", {"x": f(2, 3, 3, 3), "w": f(3, 2, 2, 2), "b": f(2)},
     [(2, 2, 6, 6)], {"strides": [2, 2]}, 17),
    ("conv-transpose-padded", "ConvTranspose", {"x": f(1, 4, 3, 4), "w": f(4, 3, 3, 3)},
     [(1, 6, 6, 9)], {"strides": [2, 2], "pads": [1, 1, 1, 0], "output_padding": [1, 1],
                      "group": 2}, 17),
    ("resize-linear-corners", "Resize", {"x": f(1, 2, 3, 4), "r": np.zeros(0, np.float32),
                                         "s": np.array([1, 1, 2, 2], np.float32)},
     [(1, 2, 6, 8)], {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 17),
    ("resize-nearest-sizes", "Resize", {"x": f(1, 2, 3, 4), "r": np.zeros(0, np.float32),
                                        "sc": np.zeros(0, np.float32),
                                        "z": i64(1, 2, 5, 9)},
     [(1, 2, 5, 9)], {"mode": "nearest"}, 17),
    ("global-avg-pool", "GlobalAveragePool", {"x": f(2, 3, 4, 5)}, [(2, 3, 1, 1)], {}, 17),
]


# onnx's reference Erf computes in float32: wider steps, looser bound
FLOAT32_REFERENCE = {"Erf", "Gelu"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_matches_central_differences(case):
    _, op, weights, outs, attrs, opset = case
    model = single_op_model(op, {}, weights, outs, opset=opset, **attrs)
    params = [n for n, a in weights.items() if a.dtype == np.float64 and a.ndim > 0
              and (op != "Resize" or n == "x")]
    loose = op in FLOAT32_REFERENCE and attrs.get("approximate") != "tanh"
    check_gradients(model, {}, params=params, eps=1e-3 if loose else 1e-6,
                    rtol=1e-4 if loose else 1e-6)


def test_batch_norm_in_training_mode_uses_the_batch_statistics():
    model = single_op_model("BatchNormalization", {}, {
        "x": f(4, 3, 2, 2), "s": f(3), "b": f(3), "m": f(3), "v": f(3, low=0.5)},
        [(4, 3, 2, 2)], epsilon=1e-3)
    check_gradients(model, {}, params=["x", "s", "b"])


def test_batch_norm_with_running_statistics():
    from tests.training_helpers import check_gradients as check
    model = single_op_model("BatchNormalization", {}, {
        "x": f(4, 3, 2, 2), "s": f(3), "b": f(3), "m": f(3), "v": f(3, low=0.5)},
        [(4, 3, 2, 2)], epsilon=1e-3)
    check(model, {}, params=["x", "s", "b"], batchnorm="running")


def test_an_op_without_a_rule_is_refused_by_name():
    from workbench.errors import NoGradientRuleError
    model = single_op_model("Sin", {}, {"x": f(3, 4)}, [(3, 4)])
    with pytest.raises(NoGradientRuleError, match="Sin: op") as err:
        check_gradients(model, {}, params=["x"])
    assert "no gradient rule" in str(err.value) and "does not implement" not in str(err.value)


def test_cross_entropy_loss_against_central_differences():
    model = single_op_model("Gemm", {}, {"a": f(4, 3), "b": f(3, 5)}, [(4, 5)])
    check_gradients(model, {}, params=["a", "b"], loss="cross_entropy")


def test_dropout_keeps_what_its_mask_keeps():
    model = single_op_model("Dropout", {}, {"x": f(3, 4), "r": np.array(0.25)}, [(3, 4)])
    mask = (R.random((3, 4)) > 0.25).astype(np.float64)
    check_gradients(model, {}, params=["x"], dropout=True, mask_values=[mask])
