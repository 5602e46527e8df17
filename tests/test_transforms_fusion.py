"""The fusion level, element-wise chains and epilogues: each transformation matches
where it should, not where it must not, keeps the program equal to onnxruntime,
and cuts the bytes moved. Row operators and DaCe's map fusions:
test_transforms_fusion_rows.py."""
import numpy as np
import pytest

import workbench
from fusion_helpers import F32, apply_all, graph_model, node, nodes_of, op_types, rand, verify
from onnx_helpers import feeds_for
from workbench import transformation_api as transform
from workbench.errors import TransformationError
from workbench.ops import supported_op_types


# -- ElementwiseChainFusion ---------------------------------------------------
def chain_model():
    """GELU with its bias Add, SiLU, a chain whose middle is a graph output, and
    two places that must not fuse (a broadcasting consumer, integer data)."""
    nodes = [
        node("Add", ["x", "bias"], ["h"]),                     # GELU: one group of six
        node("Div", ["h", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
        node("Add", ["e", "one"], ["e1"]), node("Mul", ["h", "e1"], ["g"]),
        node("Mul", ["g", "half"], ["gelu"]),
        node("Sigmoid", ["s"], ["sg"]), node("Mul", ["s", "sg"], ["silu"]),  # SiLU
        node("Relu", ["x"], ["mid"]), node("Tanh", ["mid"], ["tail"]),     # mid is an output
        node("Sigmoid", ["gate"], ["gs"]), node("Mul", ["s", "gs"], ["gated"]),  # broadcasts gs
        node("Add", ["i", "i"], ["i2"]), node("Mul", ["i2", "i"], ["i3"]),  # int64: left alone
        # row kernel corners: a per-row scalar, one long row split among threads,
        # trailing size-1 dimensions, a single element
        node("Add", ["x", "col"], ["xc"]), node("Relu", ["xc"], ["colrelu"]),
        node("Sigmoid", ["long"], ["ls"]), node("Mul", ["long", "ls"], ["longsilu"]),
        node("Sigmoid", ["se"], ["ses"]), node("Mul", ["se", "ses"], ["sesilu"]),
        node("Neg", ["single"], ["n1"]), node("Exp", ["n1"], ["n2"]),
    ]
    shapes = {"x": ([4, 32], F32), "s": ([2, 3, 5, 5], F32), "gate": ([2, 3, 1, 1], F32),
              "i": ([6], "int64"), "col": ([4, 1], F32), "long": ([5000], F32),
              "se": ([1, 10, 1, 1], F32), "single": ([], F32)}
    outs = ["gelu", "silu", "mid", "tail", "gated", "i3", "colrelu", "longsilu", "sesilu", "n2"]
    inits = {"bias": rand(32, seed=1), "sqrt2": np.array(1.4142135, F32),
             "one": np.array(1.0, F32), "half": np.array(0.5, F32)}
    return graph_model(nodes, shapes, outs, inits), shapes


def test_elementwise_chain_fusion_fuses_gelu_silu_and_keeps_shared_outputs():
    model, shapes = chain_model()
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    matches = transform.get("ElementwiseChainFusion").find(ws.sdfg)
    groups = sorted(len(m.where) for m in matches)
    assert groups == [2] * 6 + [6], [m.description for m in matches]
    for m in matches:
        ws.apply(m)
    assert not transform.get("ElementwiseChainFusion").find(ws.sdfg)
    with pytest.raises(TransformationError):  # a stale match: its operators are gone
        ws.apply(matches[0])
    assert not {"FusedElementwise", "GemmEpilogue"} & supported_op_types()  # internal types
    types = op_types(ws)
    assert types.count("FusedElementwise") == 7
    # The broadcast gate and the integer chain stay as they were.
    assert types.count("Sigmoid") == 1 and types.count("Add") == 1
    # GELU: five intermediates of 4x32 floats written and read once each are gone,
    # SiLU's one of 2x3x5x5, Relu->Tanh keeps ``mid`` (a graph output).
    saved = 2 * 4 * (5 * 4 * 32 + 2 * 3 * 5 * 5)
    after = ws.data_movement().moved_bytes
    assert before - after >= saved - 3 * 4, (before, after)
    fused = next(n for n in nodes_of(ws, "FusedElementwise") if "Erf" in n.onnx_name)
    assert "erf(" in fused.attrs["code"] and fused.attrs["code"].count("\n") >= 5
    assert "sqrt2" not in str([e.src for e in ws.sdfg.states()[0].in_edges(fused)])  # a literal
    verify(ws, feeds_for(shapes))


def test_elementwise_chain_fusion_covers_the_expression_table():
    """Every table op fused behind an Add (or a Mul into the domain of asin/acos/atanh)
    and every binary op behind an Abs: the C++ row kernels match onnxruntime."""
    from workbench.ops import elementwise as ew
    nodes, outs = [], []
    narrow = {"Asin", "Acos", "Atanh"}
    for op in sorted(ew.UNARY) + ["Gelu"]:
        shifted = f"in_{op}"
        nodes.append(node("Mul", ["x", "tenth"], [shifted]) if op in narrow else
                      node("Add", ["x", "one"], [shifted]))
        nodes.append(node(op, [shifted], [f"out_{op}"]))
        outs.append(f"out_{op}")
    for op in ew.BINARY:
        nodes += [node("Abs", ["x"], [f"abs_{op}"]), node(op, [f"abs_{op}", "z"], [f"out_{op}"])]
        outs.append(f"out_{op}")
    nodes += [node("Abs", ["x"], ["abs_clip"]),
              node("Clip", ["abs_clip", "lo", "hi"], ["out_Clip"])]
    outs.append("out_Clip")
    shapes = {"x": ([3, 17], F32), "z": ([17], F32)}
    inits = {"one": np.array(1.0, F32), "tenth": np.array(0.1, F32),
             "lo": np.array(0.2, F32), "hi": np.array(0.9, F32)}
    model = graph_model(nodes, shapes, outs, inits, opset=20)
    ws = workbench.open(model)
    apply_all(ws, "ElementwiseChainFusion")
    assert set(op_types(ws)) == {"FusedElementwise"}
    inputs = feeds_for(shapes)
    inputs["x"] = np.abs(inputs["x"]) + 0.5
    inputs["z"] = np.abs(inputs["z"]) + 0.5
    verify(ws, inputs)


# -- GemmEpilogueFusion -------------------------------------------------------
def gemm_model():
    nodes = [
        node("MatMul", ["a", "w"], ["p"]), node("Add", ["bias", "p"], ["pb"]),   # BERT style
        node("Relu", ["pb"], ["mm_out"]),
        node("Gemm", ["g", "wt", "c"], ["q"], transB=1, alpha=0.5, beta=2.0),
        node("Sigmoid", ["q"], ["gemm_out"]),
        node("MatMul", ["a", "w"], ["shared"]),                                  # two readers
        node("Relu", ["shared"], ["r1"]), node("Neg", ["shared"], ["r2"]),
    ]
    shapes = {"a": ([2, 8, 16], F32), "g": ([8, 16], F32)}
    outs = ["mm_out", "gemm_out", "r1", "r2"]
    inits = {"w": rand(16, 24, seed=2), "bias": rand(24, seed=3), "wt": rand(12, 16, seed=4),
             "c": rand(12, seed=5)}
    return graph_model(nodes, shapes, outs, inits), shapes


def test_gemm_epilogue_fusion_absorbs_bias_and_activation():
    model, shapes = gemm_model()
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    done = apply_all(ws, "GemmEpilogueFusion")
    assert len(done) == 3, done  # MatMul+Add, then +Relu; Gemm+Sigmoid; not the shared one
    types = op_types(ws)
    assert types.count("GemmEpilogue") == 2 and types.count("MatMul") == 1
    epilogues = nodes_of(ws, "GemmEpilogue")
    gemm = next(n for n in epilogues if n.attrs["core"] == "Gemm")
    assert "2.0 *" in gemm.attrs["code"] and gemm.attrs["core_attrs"]["alpha"] == 0.5
    saved = 2 * 4 * (2 * 2 * 8 * 24 + 8 * 12)  # p, pb; q written and read
    assert before - ws.data_movement().moved_bytes == saved
    verify(ws, feeds_for(shapes))
    if any(n.implementation == "blas" for n in epilogues):  # the pure GEMM core as well
        for n in epilogues:
            n.implementation = "pure"
        verify(ws, feeds_for(shapes))


# -- the bundled models --------------------------------------------------------
RECIPE = ["ElementwiseChainFusion", "GemmEpilogueFusion", "OnePassSoftmax", "OnePassLayerNorm",
          "RowEpilogueFusion"]


def test_bert_layer_fusions():
    ws = workbench.open("bert-layer")
    before = ws.data_movement()
    moved = {}
    for name in RECIPE:
        assert apply_all(ws, name), name
        moved[name] = ws.data_movement().moved_bytes
    assert moved["ElementwiseChainFusion"] < before.moved_bytes - 20_000_000
    assert moved["GemmEpilogueFusion"] < moved["ElementwiseChainFusion"] - 8_000_000
    assert moved["RowEpilogueFusion"] < moved["OnePassLayerNorm"] - 3_000_000
    assert ws.data_movement().ratio < 1.6
    types = op_types(ws)
    assert not {"Erf", "Add", "Div", "Softmax", "LayerNormalization"} & set(types)
    assert types.count("GemmEpilogue") == 7 and "MatMul" in types  # attention's P @ V
    verify(ws)


def test_mbconv_silu_and_conv_epilogues():
    ws = workbench.open("mbconv")
    before = ws.data_movement().moved_bytes
    # A Conv whose output feeds both halves of a SiLU has no single epilogue yet.
    early = [m.description for m in transform.get("ConvEpilogueFusion").find(ws.sdfg)]
    assert len(early) == 2 and not any("conv_pw/" in d or "conv_dw/" in d for d in early), early
    assert len(apply_all(ws, "ElementwiseChainFusion")) == 3  # the three SiLUs
    chained = ws.data_movement().moved_bytes
    # each full-size SiLU stops writing and re-reading a 240x28x28 sigmoid
    assert before - chained >= 2 * 2 * 4 * 240 * 28 * 28
    assert len(apply_all(ws, "ConvEpilogueFusion")) == 5  # SiLU x3, the gate, the residual
    assert op_types(ws).count("ConvEpilogue") == 5 and "Conv" not in op_types(ws)
    # conv_pw's, conv_dw's (240x28x28) and conv_pwl's (40x28x28) outputs are gone
    assert chained - ws.data_movement().moved_bytes >= 2 * 4 * 28 * 28 * (240 + 240 + 40)
    verify(ws)
    for n in nodes_of(ws, "ConvEpilogue"):
        n.implementation = "im2col"  # the core's other implementation
    verify(ws)
