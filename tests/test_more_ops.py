"""The further op types of issue 17 on the node suite's own cases: CausalConvWithState,
FlexAttention, Swish/SwiGLU, the training optimizers, TensorScatter, RoiAlign, the
spectral windows and MelWeightMatrix, LRN, Det and the ai.onnx.ml ops; Attention's
expanded causal masks (values known at import declared to shape inference).

STFT's two node cases stop at onnx's own shape inference (it reads ``onesided`` as
0 and contradicts the cases' declared outputs), so STFT is checked here against
onnx's reference evaluator on models that declare what inference gives; RoiAlign's
adaptive sampling grid (``sampling_ratio`` 0), which no node case uses, likewise.
"""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from workbench.backend import WorkbenchBackend
from workbench.conformance import runner

# Each checks something the others do not: an attribute, an optional input, a layout.
NODE_CASES = [
    "test_causal_conv_with_state_with_bias_and_past_state_cpu",
    "test_causal_conv_with_state_silu_cpu",
    "test_causal_conv_with_state_kernel_size_one_cpu",
    "test_flexattention_gqa_cpu",
    "test_flexattention_diff_head_sizes_cpu",
    "test_swiglu_alpha_cpu",
    "test_swish_cpu",
    "test_nesterov_momentum_cpu",
    "test_adagrad_multiple_cpu",
    "test_adam_multiple_cpu",
    "test_tensorscatter_circular_cpu",
    "test_roialign_mode_max_cpu",
    "test_roialign_aligned_true_cpu",
    "test_hannwindow_symmetric_cpu",
    "test_blackmanwindow_cpu",
    "test_melweightmatrix_cpu",
    "test_lrn_cpu",
    "test_det_nd_cpu",
    "test_ai_onnx_ml_binarizer_cpu",
    "test_ai_onnx_ml_array_feature_extractor_cpu",
    "test_ai_onnx_ml_tree_ensemble_set_membership_cpu",
    "test_attention_4d_attn_mask_4d_causal_expanded_cpu",
]
# Refused at import with a typed reason naming what is missing, never run wrong.
REFUSED = {"test_flexattention_score_mod_cpu": "score_mod"}


def test_node_suite_cases_pass_and_refusals_name_their_reason():
    results = runner.run_suite(NODE_CASES + list(REFUSED), workers=1, timeout=300)
    bad = {n: (r["status"], r["reason"]) for n, r in results.items()
           if n in NODE_CASES and r["status"] != "passed"}
    assert not bad, bad
    for name, why in REFUSED.items():
        assert results[name]["status"] == "skipped", results[name]
        assert why in results[name]["reason"], results[name]


def _single_node_model(node, inputs: dict, output_shape, opset: int = 22):
    infos = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for k, v in inputs.items()]
    out = helper.make_tensor_value_info(node.output[0], 1, output_shape)
    graph = helper.make_graph([node], "g", infos, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check_against_reference(model, feeds: dict, atol: float):
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = WorkbenchBackend.run_model(model, list(feeds.values()))[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("onesided, channels, windowed", [(1, 1, True), (0, 2, False)])
def test_stft_matches_the_reference(onesided, channels, windowed):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.random((2, 100, channels), dtype=np.float32),
             "step": np.array(6, dtype=np.int64)}
    if windowed:
        feeds["w"] = np.hanning(16).astype(np.float32)
    else:
        feeds["n"] = np.array(16, dtype=np.int64)
    inputs = ["x", "step", "w"] if windowed else ["x", "step", "", "n"]
    node = helper.make_node("STFT", inputs, ["y"], onesided=onesided)
    frames, bins = 1 + (100 - 16) // 6, 9 if onesided else 16
    model = _single_node_model(node, feeds, (2, frames, bins, 2), opset=17)
    _check_against_reference(model, feeds, atol=1e-4)


def test_roi_align_adaptive_sampling_grid():
    rng = np.random.default_rng(0)
    feeds = {"X": rng.random((2, 3, 10, 12), dtype=np.float32),
             "rois": np.array([[0, 0, 9, 9], [0, 5, 4, 9], [5, 5, 9, 9.5], [1.3, 2.2, 7.7, 11.1]],
                              dtype=np.float32),
             "batch": np.array([0, 1, 0, 1], dtype=np.int64)}
    node = helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], mode="avg",
                            output_height=3, output_width=4, sampling_ratio=0,
                            spatial_scale=0.8)
    _check_against_reference(_single_node_model(node, feeds, (4, 3, 3, 4)), feeds, atol=1e-6)


def test_det_pivots_rows_of_larger_matrices():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    x[0, 1, 0] = 0.0    # a zero first pivot: the row swap decides the sign
    x[1, 2, 3] = x[1, 2, 1]   # a singular matrix
    feeds = {"x": x}
    node = helper.make_node("Det", ["x"], ["y"])
    _check_against_reference(_single_node_model(node, feeds, (2, 3)), feeds, atol=1e-4)
