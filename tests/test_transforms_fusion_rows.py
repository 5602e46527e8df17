"""The fusion level, row operators (one-pass Softmax/LayerNorm, row epilogues) and
DaCe's map fusions after ExpandToMaps."""
import numpy as np
import pytest
from onnx import helper

import workbench
from fusion_helpers import F32, apply_all, graph_model, node, op_types, rand, verify
from onnx_helpers import feeds_for, onnx_ops
from workbench import transformation_api as transform


# -- OnePassSoftmax, OnePassLayerNorm ----------------------------------------
def rows_model():
    nodes = [
        node("Softmax", ["x"], ["sm_last"], axis=-1),       # rows of 150: 3 chunks
        node("Softmax", ["x"], ["sm_mid"], axis=1),         # strided rows
        node("LogSoftmax", ["x"], ["lsm"], axis=-1),
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["ln", "mean", "inv"],
                         name="/ln/LayerNormalization", axis=-1, epsilon=1e-3),
        helper.make_node("LayerNormalization", ["x", "s2"], ["ln2"], name="/ln2/LN", axis=-2),
        helper.make_node("LayerNormalization", ["x", "s"], ["ln3"], name="/ln3/LN", axis=-2),
        helper.make_node("LayerNormalization", ["x", "s4"], ["ln4"], name="/ln4/LN", axis=-2),
    ]
    shapes = {"x": ([2, 3, 150], F32)}
    outs = ["sm_last", "sm_mid", "lsm", "ln", "mean", "inv", "ln2", "ln3", "ln4"]
    inits = {"s": rand(150, seed=6), "b": rand(150, seed=7), "s2": rand(3, 150, seed=8),
             "s4": rand(3, 1, seed=12)}  # scale (3, 1) is no suffix of a row: ln4 stays pure
    return graph_model(nodes, shapes, outs, inits), shapes


def test_one_pass_softmax_and_layernorm():
    model, shapes = rows_model()
    ws = workbench.open(model)
    assert len(transform.get("OnePassSoftmax").find(ws.sdfg)) == 3
    assert len(transform.get("OnePassLayerNorm").find(ws.sdfg)) == 3
    apply_all(ws, "OnePassSoftmax")
    apply_all(ws, "OnePassLayerNorm")
    assert not transform.get("OnePassSoftmax").find(ws.sdfg)  # applied nodes do not match again
    assert {n.implementation for n in onnx_ops(ws.sdfg)
            if n.onnx_name != "/ln4/LN"} == {"onepass"}
    inputs = feeds_for(shapes)
    inputs["x"] = inputs["x"] * 4 + 10  # a large mean: the variance must not cancel
    verify(ws, inputs)


# -- RowEpilogueFusion ---------------------------------------------------------
def row_epilogue_model():
    nodes = [
        node("MatMul", ["q", "k"], ["scores"]), node("Add", ["scores", "mask"], ["masked"]),
        node("Softmax", ["masked"], ["probs"], axis=-1),          # into the GemmEpilogue
        node("Add", ["a", "b"], ["ab"]), node("Add", ["ab", "c"], ["abc"]),
        helper.make_node("LayerNormalization", ["abc", "s", "bias"], ["ln"], axis=-1,
                         epsilon=1e-3, name="/ln/LN"),             # into the FusedElementwise
        node("Relu", ["a"], ["ra"]), node("Neg", ["ra"], ["nra"]),
        helper.make_node("LayerNormalization", ["nra", "s"], ["ln_stats", "mean"], axis=-1,
                         name="/ln_stats/LN"),                     # wants its Mean: stays
        node("Sigmoid", ["b"], ["sb"]), node("Neg", ["sb"], ["nsb"]),
        node("Softmax", ["nsb"], ["sm_axis0"], axis=0),             # not the last axis: stays
    ]
    shapes = {"q": ([2, 6, 16], F32), "k": ([2, 16, 20], F32), "mask": ([2, 1, 20], F32),
              "a": ([6, 40], F32), "b": ([6, 40], F32), "c": ([6, 40], F32)}
    outs = ["probs", "ln", "ln_stats", "mean", "sm_axis0"]
    inits = {"s": rand(40, seed=10), "bias": rand(40, seed=11)}
    return graph_model(nodes, shapes, outs, inits), shapes


def test_row_epilogue_fusion_runs_softmax_and_layernorm_in_the_producer():
    model, shapes = row_epilogue_model()
    ws = workbench.open(model)
    apply_all(ws, "ElementwiseChainFusion")
    apply_all(ws, "GemmEpilogueFusion")
    before = ws.data_movement().moved_bytes
    done = apply_all(ws, "RowEpilogueFusion")
    assert len(done) == 2 and not any("ln_stats" in d or "sm_axis0" in d for d in done), done
    types = op_types(ws)
    assert types.count("Softmax") == 1 and types.count("LayerNormalization") == 1
    assert before - ws.data_movement().moved_bytes == 2 * 4 * (2 * 6 * 20 + 6 * 40)
    assert not transform.get("GemmEpilogueFusion").find(ws.sdfg)  # the row op stays last
    verify(ws, feeds_for(shapes))


def test_epilogues_follow_a_matmul_with_a_folded_transpose():
    """The layout level's MatMulStrided (K^T read in place) is a GEMM core too."""
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             node("MatMul", ["q", "kt"], ["scores"]), node("Div", ["scores", "eight"], ["sc"]),
             node("Add", ["sc", "mask"], ["masked"]),
             node("Softmax", ["masked"], ["probs"], axis=-1)]
    shapes = {"q": ([3, 8, 16], F32), "k": ([3, 8, 16], F32), "mask": ([1, 1, 8], F32)}
    model = graph_model(nodes, shapes, ["probs"],
                        {"eight": np.array(8.0, F32)})
    ws = workbench.open(model)
    assert apply_all(ws, "FoldTransposeIntoMatMul")
    assert "MatMulStrided" in op_types(ws)
    for name in ("ElementwiseChainFusion", "GemmEpilogueFusion", "RowEpilogueFusion"):
        assert apply_all(ws, name), name
    assert op_types(ws) == ["GemmEpilogue"]
    verify(ws, feeds_for(shapes))


# -- DaCe's map fusions, after ExpandToMaps -----------------------------------
def maps_model():
    nodes = [node("Add", ["x", "b"], ["t0"]), node("Relu", ["t0"], ["t1"]),
             node("Mul", ["t1", "x"], ["y"]),
             node("Relu", ["b"], ["rb"]), node("Add", ["x", "rb"], ["z"])]  # ranges differ
    shapes = {"x": ([4, 8], F32)}
    return graph_model(nodes, shapes, ["y", "z"],
                       {"b": rand(8, seed=9)}), shapes


@pytest.mark.parametrize("fusion", ["MapFusion", "OTFMapFusion"])
def test_dace_map_fusions_then_tasklet_fusion(fusion):
    model, shapes = maps_model()
    ws = workbench.open(model)
    assert not transform.get(fusion).find(ws.sdfg)  # nothing to fuse before maps exist
    apply_all(ws, "ExpandToMaps")
    before = ws.data_movement().moved_bytes
    done = apply_all(ws, fusion)
    assert len(done) == 2, done  # Add->Relu->Mul; never Relu(b) into the (4, 8) Add
    assert not any("rb" in d for d in done)
    assert ws.data_movement().moved_bytes < before
    assert apply_all(ws, "TaskletFusion")
    verify(ws, feeds_for(shapes))
