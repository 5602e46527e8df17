"""LSTM, GRU and RNN (workbench/ops/recurrent.py) against onnxruntime, and the
recurrent PyTorch exports through the default and auto recipes.

tests/op_cases/recurrent.py runs the directions, initial states, peepholes and
sequence lengths through both implementations (test_ops); here: layout=1,
activations and clip, absent outputs, the BLAS step of a large batch, the
structure of the expansion (one projection GEMM, a time loop), unsupported
attributes, and the exports.
"""
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import workbench
from onnx_helpers import assert_matches_onnxruntime, onnx_ops
from workbench.errors import UnsupportedCaseError

EXPORTS = Path(__file__).resolve().parent / "exports"
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
IMPLEMENTATIONS = ["pure", "blas"]


def rnn_model(op, attrs, feeds: dict, weights: dict, node_inputs: list, outputs: list):
    """One ``op`` node; ``feeds``/``weights`` are graph inputs/initializers by name,
    ``node_inputs``/``outputs`` the node's lists ('' for an absent one)."""
    node = helper.make_node(op, node_inputs, outputs, name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph(
        [node], f"{op.lower()}_test",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs if o],
        initializer=[numpy_helper.from_array(v, n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {vi.name: vi.type for vi in inferred.graph.value_info}
    types.update({vi.name: vi.type for vi in inferred.graph.output})
    for out in model.graph.output:
        out.type.CopyFrom(types[out.name])
    onnx.checker.check_model(model, full_check=True)
    return model


def _rand(rng, *shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def _layer(op, rng, S=5, N=3, I=4, H=6, D=1, layout=0, lens=None, initial=False):
    """(feeds, weights, node inputs) of a layer with seeded values."""
    G = GATES[op] * H
    x = _rand(rng, S, N, I) if layout == 0 else _rand(rng, N, S, I)
    feeds, names = {"x": x}, ["x", "w", "r", "b"]
    weights = {"w": _rand(rng, D, G, I), "r": _rand(rng, D, G, H), "b": _rand(rng, D, 2 * G)}
    if lens is not None:
        feeds["lens"] = np.array(lens, dtype=np.int32)
    names.append("lens" if lens is not None else "")
    if initial:
        state = (D, N, H) if layout == 0 else (N, D, H)
        feeds["h0"] = _rand(rng, *state)
        names.append("h0")
        if op == "LSTM":
            feeds["c0"] = _rand(rng, *state)
            names.append("c0")
    return feeds, weights, names


def _outputs(op):
    return ["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"]


@pytest.mark.parametrize("op", list(GATES))
def test_layout_1_with_lengths_matches_onnxruntime_on_the_time_major_model(op):
    """onnxruntime refuses layout=1 and the reference evaluator ignores sequence_lens:
    the batch-major node is compared with onnxruntime running the time-major one."""
    rng = np.random.default_rng(0)
    attrs = {"hidden_size": 6, "direction": "bidirectional", "layout": 1}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    feeds, weights, names = _layer(op, rng, D=2, layout=1, lens=[5, 2, 4], initial=True)
    ws = workbench.open(rnn_model(op, attrs, feeds, weights, names, _outputs(op)))
    ours = ws.run(feeds)
    time_major = {"x": feeds["x"].transpose(1, 0, 2), "lens": feeds["lens"],
                  **{k: feeds[k].transpose(1, 0, 2) for k in ("h0", "c0") if k in feeds}}
    attrs0 = {k: v for k, v in attrs.items() if k != "layout"}
    model0 = rnn_model(op, attrs0, time_major, weights, names, _outputs(op))
    sess = ort.InferenceSession(model0.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = dict(zip(_outputs(op), sess.run(None, time_major)))
    np.testing.assert_allclose(ours["y"], theirs["y"].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    for state in _outputs(op)[1:]:
        np.testing.assert_allclose(ours[state], theirs[state].transpose(1, 0, 2),
                                   rtol=1e-4, atol=1e-5)
    # past its length a batch entry's Y is 0 (entry 1 has length 2 of 5)
    assert not ours["y"][1, 2:].any() and ours["y"][1, :2].all()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_layout_1_matches(implementation):
    rng = np.random.default_rng(1)
    feeds, weights, names = _layer("LSTM", rng, layout=1, initial=True)
    model = rnn_model("LSTM", {"hidden_size": 6, "layout": 1}, feeds, weights, names,
                      _outputs("LSTM"))
    assert_matches_onnxruntime(model, feeds, implementation=implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_activations_alpha_beta_and_clip(implementation):
    rng = np.random.default_rng(2)
    cases = [
        ("LSTM", {"activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                  "activation_alpha": [0.3, 0.1], "activation_beta": [0.4], "clip": 0.8,
                  "input_forget": 1}),
        ("GRU", {"clip": 0.5, "direction": "bidirectional",
                 "activations": ["Sigmoid", "Tanh", "HardSigmoid", "Elu"]}),
        ("RNN", {"activations": ["Relu"], "direction": "reverse"}),
    ]
    for op, attrs in cases:
        D = 2 if attrs.get("direction") == "bidirectional" else 1
        feeds, weights, names = _layer(op, rng, D=D)
        model = rnn_model(op, {"hidden_size": 6, **attrs}, feeds, weights, names, _outputs(op))
        assert_matches_onnxruntime(model, feeds, implementation=implementation)


def test_absent_outputs_and_inputs():
    """Y absent (an empty name), only Y_h; no bias."""
    rng = np.random.default_rng(3)
    feeds, weights, names = _layer("LSTM", rng)
    del weights["b"]
    names[3] = ""
    model = rnn_model("LSTM", {"hidden_size": 6}, feeds, weights, names, ["", "y_h"])
    assert_matches_onnxruntime(model, feeds)


def test_large_batch_steps_through_blas():
    """Above ROW_KERNEL_MAX_BATCH rows the recurrent product of each step is a BLAS call."""
    from workbench.ops.recurrent import ROW_KERNEL_MAX_BATCH
    rng = np.random.default_rng(4)
    N = ROW_KERNEL_MAX_BATCH + 3
    feeds, weights, names = _layer("GRU", rng, N=N, D=2, initial=True,
                                   lens=[(i % 5) + 1 for i in range(N)])
    model = rnn_model("GRU", {"hidden_size": 6, "direction": "bidirectional"}, feeds, weights,
                      names, _outputs("GRU"))
    ws = assert_matches_onnxruntime(model, feeds, implementation="blas")
    source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
    assert source.count("cblas_sgemm") >= 1 + 2 * 2  # projection; z,r and h per direction


def test_expansion_is_one_projection_gemm_and_a_time_loop():
    """The input projection of all steps is one BLAS call outside the loop; the
    steps are a loop over states (not one node per step) with a fused gate kernel."""
    import dace
    from dace.sdfg.state import LoopRegion

    from workbench.ops.registry import expand
    rng = np.random.default_rng(5)
    S = 7
    feeds, weights, names = _layer("LSTM", rng, S=S, D=2)
    model = rnn_model("LSTM", {"hidden_size": 6, "direction": "bidirectional"}, feeds,
                      weights, names, _outputs("LSTM"))
    ws = workbench.open(model)
    node = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "LSTM")
    state = next(s for s in ws.sdfg.states() if node in s.nodes())
    sdfg = expand(node, state, ws.sdfg, "blas")
    loops = [b for b in sdfg.all_control_flow_blocks() if isinstance(b, LoopRegion)]
    guards = [e for e in sdfg.all_interstate_edges() if "ts" in e.data.assignments]
    assert loops or guards, "no time loop"
    tasklets = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)]
    gemm = [t for t in tasklets if "cblas_sgemm" in t.code.as_string]
    assert len(gemm) == 1 and f"{S * 3}, 48, 4" in gemm[0].code.as_string  # [S*N, 2*4H, I]
    assert len(sdfg.states()) < 12  # a fixed program, whatever the sequence length
    gates = [t for t in tasklets if t.label.endswith("__gates")]
    assert len(gates) == 1 and "#pragma omp simd" in gates[0].code.as_string


def test_unsupported_attribute_names_the_node():
    rng = np.random.default_rng(6)
    feeds, weights, names = _layer("RNN", rng)
    model = rnn_model("RNN", {"hidden_size": 6, "activations": ["Gelu"]}, feeds, weights,
                      names, _outputs("RNN"))
    ws = workbench.open(model)
    with pytest.raises(UnsupportedCaseError, match="rnn_node.*activation 'Gelu'"):
        ws.verify(feeds)


# -- the PyTorch exports (tests/exports/recurrent_models.py) ----------------------------
EXPORT_SHAPES = {"lstm_tagger": {"batch": 2, "sequence": 16},
                 "gru_classifier": {"batch": 2, "sequence": 16}}


@pytest.mark.parametrize("name", sorted(EXPORT_SHAPES))
def test_export_holds_its_recurrent_nodes(name):
    model = onnx.load(str(EXPORTS / f"{name}.onnx"))
    assert (EXPORTS / f"{name}.onnx").stat().st_size < 300_000
    rnn = [n for n in model.graph.node if n.op_type in ("LSTM", "GRU")]
    if name == "lstm_tagger":
        assert len(rnn) == 2  # two layers, one node each
    else:
        attrs = {a.name: helper.get_attribute_value(a) for a in rnn[0].attribute}
        assert len(rnn) == 1 and attrs["direction"] == b"bidirectional"
        assert attrs["linear_before_reset"] == 1


@pytest.mark.parametrize("name", sorted(EXPORT_SHAPES))
@pytest.mark.parametrize("recipe", [None, "default", "auto"])
def test_export_matches_onnxruntime(name, recipe):
    ws = workbench.open(EXPORTS / f"{name}.onnx", input_shapes=EXPORT_SHAPES[name])
    if recipe:
        ws.optimize(recipe)
    report = ws.verify()
    assert report.match, report.text()
    assert report.worst().max_rel_err < 1e-4, report.text()
    assert {n.op_type for n in onnx_ops(ws.sdfg)} >= ({"LSTM"} if "lstm" in name else {"GRU"})


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_float64(implementation):
    """double: exact libm activations and cblas_dgemm. onnxruntime has no double LSTM, so
    this compares with onnx.reference, which ignores clip and sequence_lens: none here."""
    rng = np.random.default_rng(7)
    for op in ("LSTM", "GRU"):
        feeds, weights, names = _layer(op, rng, D=2, initial=True)
        feeds = {k: v.astype(np.float64) for k, v in feeds.items()}
        weights = {k: v.astype(np.float64) for k, v in weights.items()}
        model = rnn_model(op, {"hidden_size": 6, "direction": "bidirectional"}, feeds, weights,
                          names, _outputs(op))
        assert_matches_onnxruntime(model, feeds, implementation=implementation)


@pytest.mark.parametrize("op", list(GATES))
def test_zero_length_entry_has_zero_final_state(op):
    """onnxruntime gives Y_h (and Y_c) 0 for a batch entry of length 0, not initial_h."""
    rng = np.random.default_rng(8)
    feeds, weights, names = _layer(op, rng, D=2, lens=[5, 0, 2], initial=True)
    model = rnn_model(op, {"hidden_size": 6, "direction": "bidirectional"}, feeds, weights,
                      names, _outputs(op))
    assert_matches_onnxruntime(model, feeds, implementation="blas")


def test_data_movement_shows_the_projection_buffer():
    """The node's figure is its edges plus its own buffers (XW of every step, R^T, the
    state), each once: the projection buffer dominates a long sequence."""
    rng = np.random.default_rng(9)
    S, N, I, H, D = 20, 2, 4, 6, 2
    feeds, weights, names = _layer("LSTM", rng, S=S, N=N, I=I, H=H, D=D)
    model = rnn_model("LSTM", {"hidden_size": H, "direction": "bidirectional"}, feeds,
                      weights, names, _outputs("LSTM"))
    ws = workbench.open(model)
    moved = ws.data_movement().per_operator["lstm_node"]
    edges = 4 * (S * N * I + D * 4 * H * (I + H) + D * 8 * H            # X, W, R, B
                 + S * D * N * H + 2 * D * N * H)                        # Y, Y_h, Y_c
    xw = 4 * S * N * D * 4 * H
    assert edges + 2 * xw <= moved < edges + 3 * xw


def test_recurrent_layers_count_their_products_and_are_contractions():
    """info's FLOPs: both products of every step (X W^T and H R^T per direction) and the
    gates; lstm_tagger's two LSTM layers (16 steps, hidden 32) are 1.1 MFLOP, not the
    14 KFLOP an element-wise count gave."""
    import workbench
    from workbench.analysis.classes import op_class
    from workbench.analysis.flops import node_flops, onnx_nodes
    ws = workbench.open("zoo:lstm_tagger")
    lstm = [(n, s) for n, s in onnx_nodes(ws.sdfg) if n.op_type == "LSTM"]
    assert len(lstm) == 2 and op_class("LSTM") == op_class("GRU") == op_class("MatMul")
    for node, state in lstm:
        ins = {e.dst_conn: tuple(e.data.subset.size()) for e in state.in_edges(node)}
        x, w, r = (ins[c] for c in node.onnx_inputs[:3])
        steps, (directions, gates, inputs), hidden = x[0] * x[1], w, r[2]
        products = 2 * steps * directions * gates * (inputs + hidden)
        assert products < node_flops(node, state) < products * 1.2
