"""LinearAttention (workbench/ops/linear_attention.py) built with DaCe and compared
with onnx's ReferenceEvaluator: the four update rules, grouped and multi-query
heads, with and without past_state, one token and several, per-dimension and
per-head decay, per-head and shared beta, d_k != d_v, a state too large for the
kernel's stack; the structure of the expansion (one map over (batch, KV head),
the token loop inside it, the same program whatever T); refusals with reasons.
The node suite's 14 cases are run by `app.py conformance --ops LinearAttention`.
"""
import dace
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import workbench
from onnx_helpers import onnx_ops
from workbench.errors import ModelLoadError, UnsupportedCaseError
from workbench.ops.linear_attention import STACK_STATE_MAX

OPSET = 27


def la_model(feeds: dict, attrs: dict, outputs=("out", "present")):
    """One LinearAttention node over graph inputs ``feeds`` (absent ones left out) whose
    graph outputs are ``outputs`` (the node always has both: the schema requires them)."""
    names = [n if n in feeds else "" for n in ("q", "k", "v", "past", "decay", "beta")]
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["out", "present"], name="la_node",
                            **attrs)
    graph = helper.make_graph(
        [node], "linear_attention",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape)
         for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {vi.name: vi.type for vi in inferred.graph.output}
    for out in model.graph.output:
        out.type.CopyFrom(types[out.name])
    return model


def la_feeds(rng, rule, B=2, T=4, hq=4, hkv=2, dk=8, dv=8, past=False, decay="dim",
             beta="head"):
    """Inputs of order 1; keys L2-normalized, as the delta rules expect."""
    def rand(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    k = rand(B, T, hkv, dk)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    feeds = {"q": rand(B, T, hq * dk), "k": k.reshape(B, T, hkv * dk), "v": rand(B, T, hkv * dv)}
    if past:
        feeds["past"] = rand(B, hkv, dk, dv) * 0.5
    if rule in ("gated", "gated_delta"):   # log-space decay: exp(g) in (0, 1)
        width = hkv * dk if decay == "dim" else hkv
        feeds["decay"] = -rng.uniform(0.01, 0.5, (B, T, width)).astype(np.float32)
    if rule in ("delta", "gated_delta"):   # a sigmoid output
        feeds["beta"] = rng.uniform(0.1, 0.9, (B, T, hkv if beta == "head" else 1)
                                    ).astype(np.float32)
    return feeds


def assert_matches_reference(model, feeds: dict):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = workbench.open(model).run(feeds)
    for out, want in zip(model.graph.output, expected):
        assert got[out.name].shape == want.shape, out.name
        np.testing.assert_allclose(got[out.name], want, rtol=1e-4,
                                   atol=1e-5 * max(1.0, float(np.abs(want).max())),
                                   err_msg=out.name)


CASES = {  # id: (update rule, la_feeds arguments, attributes beyond the heads)
    "linear_gqa_prefill": ("linear", dict(T=5), {}),
    "linear_decode_past_mha": ("linear", dict(T=1, hq=2, hkv=2, past=True), {}),
    "gated_dim_gqa_past": ("gated", dict(T=6, past=True), {}),
    "gated_head_decode": ("gated", dict(T=1, B=1, decay="head"), {}),
    "delta_gqa_prefill": ("delta", dict(T=4), {}),
    "delta_shared_beta_decode_past": ("delta", dict(T=1, past=True, beta="one"), {}),
    "gated_delta_mqa_past_scale": ("gated_delta", dict(T=7, hq=4, hkv=1, past=True),
                                   {"scale": 0.3}),
    "gated_delta_head_decay_dk_ne_dv": ("gated_delta", dict(T=3, dk=4, dv=6, decay="head"),
                                        {}),
    "gated_delta_decode_past_gqa": ("gated_delta", dict(T=1, hq=6, hkv=3, past=True), {}),
    "gated_delta_one_sequence_many_heads": ("gated_delta", dict(B=1, T=16, hq=8, hkv=8, dk=32,
                                                               dv=32, past=True), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_the_reference(case):
    rule, shape, attrs = CASES[case]
    feeds = la_feeds(np.random.default_rng(len(case)), rule, **shape)
    heads = {"q_num_heads": shape.get("hq", 4), "kv_num_heads": shape.get("hkv", 2)}
    model = la_model(feeds, {"update_rule": rule, **heads, **attrs})
    assert_matches_reference(model, feeds)


def test_default_rule_with_present_state_unused():
    """update_rule left to its default (gated_delta); only ``output`` is a graph output."""
    feeds = la_feeds(np.random.default_rng(1), "gated_delta", T=3)
    model = la_model(feeds, {"q_num_heads": 4, "kv_num_heads": 2}, outputs=("out",))
    assert_matches_reference(model, feeds)


def test_state_larger_than_the_stack_buffer():
    dk = dv = 136
    assert dk * dv > STACK_STATE_MAX
    feeds = la_feeds(np.random.default_rng(2), "gated_delta", B=1, T=3, hq=1, hkv=1, dk=dk,
                     dv=dv, past=True)
    model = la_model(feeds, {"q_num_heads": 1, "kv_num_heads": 1})
    assert_matches_reference(model, feeds)


def _expansion(T):
    from workbench.ops.registry import expand
    feeds = la_feeds(np.random.default_rng(3), "gated_delta", T=T, hq=4, hkv=2, past=True)
    ws = workbench.open(la_model(feeds, {"q_num_heads": 4, "kv_num_heads": 2}))
    node = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "LinearAttention")
    state = next(s for s in ws.sdfg.states() if node in s.nodes())
    return expand(node, state, ws.sdfg, "pure")


def test_expansion_is_one_map_over_batch_and_kv_heads_with_the_token_loop_inside():
    small, large = _expansion(2), _expansion(9)
    for sdfg, T in ((small, 2), (large, 9)):
        maps = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
        assert len(maps) == 1 and maps[0].map.range.size() == [2, 2]   # (batch, KV head)
        tasklets = [n for n, _ in sdfg.all_nodes_recursive()
                    if isinstance(n, dace.nodes.Tasklet)]
        assert len(tasklets) == 1
        assert f"for (int t = 0; t < {T}; ++t)" in tasklets[0].code.as_string
    assert len(small.nodes()) == len(large.nodes())
    assert len(list(small.all_nodes_recursive())) == len(list(large.all_nodes_recursive()))


@pytest.mark.parametrize("attrs, drop, why", [
    ({"update_rule": "retention"}, None, "update_rule must be one of"),
    ({"update_rule": "gated_delta"}, "decay", "requires decay input"),
    ({"update_rule": "linear"}, None, "forbids decay input"),
    ({"q_num_heads": 3}, None, "must be a multiple of kv_num_heads"),
])
def test_import_refuses_what_the_schema_forbids(attrs, drop, why):
    """onnx's own inference judges these at import: a typed error naming the node."""
    feeds = la_feeds(np.random.default_rng(4), "gated_delta", T=2)
    if drop:
        del feeds[drop]
    names = [n if n in feeds else "" for n in ("q", "k", "v", "past", "decay", "beta")]
    node = helper.make_node("LinearAttention", names, ["out", "present"], name="la_node",
                            **{"q_num_heads": 4, "kv_num_heads": 2, **attrs})
    graph = helper.make_graph(
        [node], "refused", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape)
                            for n, v in feeds.items()],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [2, 2, 32]),
         helper.make_tensor_value_info("present", onnx.TensorProto.FLOAT, [2, 2, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with pytest.raises(ModelLoadError, match=f"la_node.*{why}"):
        workbench.open(model)


@pytest.mark.parametrize("attrs, why", [
    ({"update_rule": "retention"}, "update_rule='retention' is none of"),
    ({"update_rule": "linear"}, "update_rule 'linear' takes no decay input"),
    ({"update_rule": "delta"}, "update_rule 'delta' takes no decay input"),
    ({"q_num_heads": 3}, "q_num_heads=3 is not a positive multiple of kv_num_heads=2"),
    ({"kv_num_heads": 4}, r"key \[2, 2, 16\] / value"),
])
def test_expansion_refuses_a_node_the_schema_forbids(attrs, why):
    """A node changed after import (a saved SDFG edited) is refused by the expansion."""
    from workbench.ops.registry import expand
    feeds = la_feeds(np.random.default_rng(4), "gated_delta", T=2)
    ws = workbench.open(la_model(feeds, {"q_num_heads": 4, "kv_num_heads": 2}))
    node = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "LinearAttention")
    state = next(s for s in ws.sdfg.states() if node in s.nodes())
    node.set_attrs({**node.attrs, **attrs})
    with pytest.raises(UnsupportedCaseError, match=f"la_node.*{why}"):
        expand(node, state, ws.sdfg, "pure")


def test_a_gpu_build_is_refused_with_its_reason():
    from workbench.build.settings import building_for
    from workbench.ops.registry import expand
    feeds = la_feeds(np.random.default_rng(5), "linear", T=2)
    ws = workbench.open(la_model(feeds, {"q_num_heads": 4, "kv_num_heads": 2,
                                         "update_rule": "linear"}))
    node = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "LinearAttention")
    state = next(s for s in ws.sdfg.states() if node in s.nodes())
    with building_for("gpu"), pytest.raises(UnsupportedCaseError, match="no GPU implementation"):
        expand(node, state, ws.sdfg, "pure")


def test_node_suite_cases_pass():
    """Three of the suite's 14 (all 14 with `app.py conformance --ops LinearAttention`):
    grouped heads, a decode step on a past state, float16 tensors (computed in float32)."""
    from workbench.conformance import runner
    names = ["test_linear_attention_gated_delta_gqa_cpu", "test_linear_attention_decode_step_cpu",
             "test_linear_attention_fp16_cpu"]
    results = runner.run_suite(names, workers=1, timeout=300)
    assert {n: r["status"] for n, r in results.items()} == dict.fromkeys(names, "passed"), results
