"""LinearAttention (opset 27) against onnxruntime, which runs it from 1.32: the
recurrence with grouped heads and a past state, one decode token, a shared beta.
(The rules one by one against onnx's ReferenceEvaluator: tests/test_linear_attention.py.)"""
import numpy as np

from op_cases.base import C, rand

_rng = np.random.default_rng(31)


def _keys(B, T, heads, size):
    """L2-normalized keys, as the delta rules expect."""
    k = rand(B, T, heads, size)
    return (k / np.linalg.norm(k, axis=-1, keepdims=True)).reshape(B, T, heads * size)


def _decay(*shape):
    return -_rng.uniform(0.01, 0.5, shape).astype(np.float32)


def _beta(*shape):
    return _rng.uniform(0.1, 0.9, shape).astype(np.float32)


CASES = {
    "LinearAttention": [
        C("gated_delta_gqa_past", {"q": rand(2, 5, 4 * 4), "k": _keys(2, 5, 2, 4),
                                   "v": rand(2, 5, 2 * 3), "past": rand(2, 2, 4, 3),
                                   "g": _decay(2, 5, 2 * 4), "b": _beta(2, 5, 2)},
          {"q_num_heads": 4, "kv_num_heads": 2}, outputs=("y", "present"), opset=27),
        C("linear_decode", {"q": rand(1, 1, 2 * 4), "k": _keys(1, 1, 2, 4),
                            "v": rand(1, 1, 2 * 4)},
          {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "linear"},
          outputs=("y", "present"), opset=27),
        C("delta_shared_beta_mqa", {"q": rand(2, 3, 3 * 4), "k": _keys(2, 3, 1, 4),
                                    "v": rand(2, 3, 4), "b": _beta(2, 3, 1)},
          {"q_num_heads": 3, "kv_num_heads": 1, "update_rule": "delta", "scale": 0.7},
          node_inputs=["q", "k", "v", "", "", "b"], outputs=("y", "present"), opset=27),
        C("gated_head_decay", {"q": rand(1, 4, 2 * 4), "k": _keys(1, 4, 2, 4),
                               "v": rand(1, 4, 2 * 4), "g": _decay(1, 4, 2)},
          {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "gated"},
          node_inputs=["q", "k", "v", "", "g"], outputs=("y", "present"), opset=27),
    ],
}
