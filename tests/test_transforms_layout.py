"""The layout level: each transformation matches where it should, not where it
must not, keeps the program equal to onnxruntime, and cuts the bytes moved."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

import workbench
from onnx_helpers import onnx_ops, value_info
from workbench import transformation_api as transform
from workbench.build.settings import blas_implementation
from workbench.importer import import_model
from workbench.session import Session

F32 = "float32"
COPY = 128 * 768 * 4  # one BERT activation [1, 128, 768] in float32


def graph_model(nodes, inputs: dict, outputs: dict, inits: dict = None):
    """A checked opset-17 model; inputs/outputs map names to shapes (float32)."""
    graph = helper.make_graph(
        nodes, "layout_test", [value_info(n, s, F32) for n, s in inputs.items()],
        [value_info(n, s, F32) for n, s in outputs.items()],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"/{outs[0]}/{op}", **attrs)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def matches(ws, name):
    return transform.find_matches(transform.get(name), ws.sdfg, ws.model.weights)


def apply_all(ws, name: str) -> list:
    """Apply ``name`` until it no longer matches; the descriptions applied."""
    done = []
    for _ in range(100):
        found = matches(ws, name)
        if not found:
            return done
        ws.apply(found[0])
        done.append(found[0].description)
    raise AssertionError(f"{name} kept matching")


def moved(ws) -> int:
    return ws.data_movement().moved_bytes


def op_types(ws) -> list:
    return sorted(n.op_type for n in onnx_ops(ws.sdfg))


def set_impl(ws, op_type, impl):
    for n in onnx_ops(ws.sdfg):
        if n.op_type == op_type:
            n.implementation = impl


def verify(ws):
    report = ws.verify()
    assert report.match, report.text()


# -- bert-layer: ReshapeAsView + FoldTransposeIntoMatMul ----------------------
def test_bert_attention_without_copies():
    """The 4 Reshapes become views, the 4 head Transposes fold into the two
    attention MatMuls: 8 full-activation copies (read + write each) go."""
    ws = workbench.open("bert-layer")
    start = moved(ws)
    assert len(apply_all(ws, "ReshapeAsView")) == 4
    reshaped = moved(ws)
    # each copy read and wrote [1, 128, 768]; the 4 small shape tensors are no longer read
    assert start - reshaped == 4 * 2 * COPY + (4 + 4 + 4 + 3) * 8
    folds = apply_all(ws, "FoldTransposeIntoMatMul")
    assert len(folds) == 4 and any("(Y)" in f for f in folds)
    assert start - moved(ws) - (start - reshaped) == 4 * 2 * COPY
    assert "Transpose" not in op_types(ws) and "Reshape" not in op_types(ws)
    assert op_types(ws).count("MatMulStrided") == 2
    verify(ws)


def test_bert_attention_pure_strided_matmul():
    """The strided product's map implementation on the real attention views."""
    ws = workbench.open("bert-layer")
    apply_all(ws, "FoldTransposeIntoMatMul")
    apply_all(ws, "ReshapeAsView")
    set_impl(ws, "MatMulStrided", "pure")
    verify(ws)


# -- ReshapeAsView --------------------------------------------------------------
def test_reshape_as_view_rules():
    """Rule 2 (output aliases; a reshape of a reshape views a view), rule 3 (a
    graph output: the producer writes it through the input's view), and a graph
    input reshaped straight into a graph output, which stays a copy."""
    model = graph_model(
        [node("Relu", ["x"], ["r"]), node("Reshape", ["r", "s1"], ["flat"]),
         node("Sigmoid", ["flat"], ["y1"]),
         node("Unsqueeze", ["flat", "ax"], ["u"]), node("Relu", ["u"], ["y4"]),
         node("Neg", ["x"], ["n"]), node("Reshape", ["n", "s2"], ["y2"]),
         node("Flatten", ["x"], ["y3"], axis=1)],
        {"x": [2, 3, 4]}, {"y1": [6, 4], "y2": [24], "y3": [2, 12], "y4": [1, 6, 4]},
        {"s1": np.array([6, 4], np.int64), "s2": np.array([24], np.int64),
         "ax": np.array([0], np.int64)})
    ws = workbench.open(model)
    found = {m.description for m in matches(ws, "ReshapeAsView")}
    assert found == {"/flat/Reshape as a view (output aliased)",
                     "/u/Unsqueeze as a view (output aliased)",  # then a view of a view
                     "/y2/Reshape as a view (input aliased)"}
    before = moved(ws)
    apply_all(ws, "ReshapeAsView")
    assert before - moved(ws) == 3 * (2 * 24 * 4) + (2 + 1 + 1) * 8
    assert op_types(ws).count("Flatten") == 1
    verify(ws)


# -- FoldTransposeIntoMatMul on small graphs ----------------------------------
def fold_model():
    """A Gemm's transposed A, a batched MatMul with a transposed and broadcast B
    and a transposed output, and a Transpose no single GEMM call can read."""
    return graph_model(
        [node("Transpose", ["a"], ["at"], perm=[1, 0]),
         node("Gemm", ["at", "w", "c"], ["g"], transB=1, alpha=0.5),
         node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
         node("MatMul", ["x", "bt"], ["p"]),
         node("Transpose", ["p"], ["y2"], perm=[1, 0, 2]),
         node("Transpose", ["z"], ["zt"], perm=[2, 0, 1]),
         node("MatMul", ["zt", "v"], ["y3"])],
        {"a": [5, 4], "b": [1, 6, 3], "x": [2, 4, 3], "z": [2, 3, 4]},
        {"g": [4, 7], "y2": [4, 2, 6], "y3": [4, 2, 5]},
        {"w": rand(7, 5, seed=1), "c": rand(7, seed=2), "v": rand(3, 5, seed=3)})


def test_fold_transpose_into_matmul_small():
    ws = workbench.open(fold_model())
    found = sorted(m.description for m in matches(ws, "FoldTransposeIntoMatMul"))
    assert found == ["fold /at/Transpose into /g/Gemm (A)",
                     "fold /bt/Transpose into /p/MatMul (B)",
                     "fold /y2/Transpose into /p/MatMul (Y)"]  # not /zt/: no unit stride
    before = moved(ws)
    apply_all(ws, "FoldTransposeIntoMatMul")
    assert before - moved(ws) == 2 * 4 * (5 * 4 + 6 * 3 + 2 * 4 * 6)
    gemm = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "Gemm")
    assert gemm.attrs["transA"] == 1
    assert op_types(ws).count("Transpose") == 1
    verify(ws)
    set_impl(ws, "MatMulStrided", "pure")
    set_impl(ws, "Gemm", "pure")
    verify(ws)


def test_sequence_first_projection_is_one_gemm():
    """A sequence-first attention's input projection (PyTorch's MultiheadAttention
    export: x.transpose(0, 1) @ W + b) folds to a MatMulStrided with a batch of
    S one-row products; the BLAS call folds that batch back into the rows."""
    from workbench.ops.layout_ops import gemm_plan, merged_views
    S, D, N = 9, 8, 12
    model = graph_model(
        [node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
         node("MatMul", ["xt", "w"], ["p"]),
         node("Add", ["p", "bias"], ["y"])],
        {"x": [1, S, D]}, {"y": [S, 1, N]}, {"w": rand(D, N, seed=4), "bias": rand(N, seed=5)})
    ws = workbench.open(model)
    assert apply_all(ws, "FoldTransposeIntoMatMul") == ["fold /xt/Transpose into /p/MatMul (A)"]
    core = next(n for n in onnx_ops(ws.sdfg) if n.op_type == "MatMulStrided")
    views = {k: (tuple(core.attrs[f"{k}_shape"]), tuple(core.attrs[f"{k}_strides"]))
             for k in "aby"}
    assert views["a"][0] == (S, 1, D) and views["b"][1][0] == 0  # S one-row products
    merged = merged_views(views, "a", "b", "y")
    assert merged["a"][0] == (S, D) and merged["y"][0] == (S, N) and merged["b"][0] == (D, N)
    assert gemm_plan(merged, "a", "b", "y")[:3] == (S, N, D)  # one S x N x D GEMM
    verify(ws)
    # a batched B (not broadcast) and rows that are not one even run stay batched
    batched = {**views, "b": ((S, D, N), (D * N, N, 1))}
    assert merged_views(batched, "a", "b", "y") == batched
    gapped = {**views, "a": ((S, 2, D), (3 * D, D, 1)), "y": ((S, 2, N), (2 * N, N, 1))}
    assert merged_views(gapped, "a", "b", "y") == gapped
    even = {**gapped, "a": ((S, 2, D), (2 * D, D, 1))}
    assert merged_views(even, "a", "b", "y")["a"] == ((2 * S, D), (D, 1))


# -- FoldTransposeIntoConsumer --------------------------------------------------
def test_fold_transpose_into_elementwise_readers():
    model = graph_model(
        [node("Transpose", ["x"], ["t"], perm=[2, 0, 1]), node("Add", ["t", "y"], ["o1"]),
         node("Relu", ["t"], ["o2"]),
         node("Transpose", ["x"], ["t2"], perm=[1, 0, 2]), node("Softmax", ["t2"], ["o3"]),
         node("Transpose", ["x"], ["o4"], perm=[0, 2, 1])],
        {"x": [2, 3, 4], "y": [4, 1, 3]}, {"o1": [4, 2, 3], "o2": [4, 2, 3], "o3": [3, 2, 4],
                                           "o4": [2, 4, 3]})
    ws = workbench.open(model)
    found = [m.description for m in matches(ws, "FoldTransposeIntoConsumer")]
    assert found == ["read /t/Transpose's input through permuted strides"]  # not Softmax's
    before = moved(ws)
    apply_all(ws, "FoldTransposeIntoConsumer")
    assert before - moved(ws) == 2 * 24 * 4
    assert op_types(ws).count("Transpose") == 2
    verify(ws)


# -- WeightPrepack --------------------------------------------------------------
def test_weight_prepack_without_import_folding():
    """Imported without constant folding (as the ONNX backend does), a
    Transpose and a Reshape of weights run once, at load time."""
    model = graph_model(
        [node("Transpose", ["w"], ["wt"]), node("MatMul", ["x", "wt"], ["o1"]),
         node("Reshape", ["w2", "shape"], ["w2r"]), node("Add", ["x", "w2r"], ["o2"]),
         node("Transpose", ["x"], ["o3"])],
        {"x": [2, 3]}, {"o1": [2, 4], "o2": [2, 3], "o3": [3, 2]},
        {"w": rand(4, 3), "w2": rand(6, seed=1), "shape": np.array([2, 3], np.int64)})
    ws = Session(import_model(model, fold=False))
    found = sorted(m.description for m in matches(ws, "WeightPrepack"))
    assert found == ["prepack w through /wt/Transpose", "prepack w2 through /w2r/Reshape"]
    assert transform.get("WeightPrepack").find(ws.sdfg) == []  # no weights, no matches
    before, weights = moved(ws), dict(ws.model.weights)
    apply_all(ws, "WeightPrepack")
    assert before - moved(ws) == 2 * 4 * (12 + 6) + 2 * 8
    assert sorted(ws.model.weights) == ["w2r", "wt"]
    np.testing.assert_array_equal(ws.model.weights["wt"], weights["w"].T)
    assert op_types(ws) == ["Add", "MatMul", "Transpose"]
    verify(ws)
    ws.undo()
    ws.undo()
    assert sorted(ws.model.weights) == ["shape", "w", "w2"]


# -- ConvAsGemm -----------------------------------------------------------------
def test_conv_as_gemm_on_mbconv_not_resblock():
    assert matches(workbench.open("resblock"), "ConvAsGemm") == []  # 3x3 convolutions
    ws = workbench.open("mbconv")
    found = sorted(m.description for m in matches(ws, "ConvAsGemm"))
    assert found == [f"{n} as a GEMM" for n in ("/conv_pw/Conv", "/conv_pwl/Conv",
                                                  "/se/conv_expand/Conv", "/se/conv_reduce/Conv")]
    before = moved(ws)
    apply_all(ws, "ConvAsGemm")
    assert moved(ws) == before  # the same tensors, read in place
    assert op_types(ws).count("Conv") == 1  # the depthwise one
    verify(ws)


def test_conv_as_gemm_batches_bias_and_1d():
    model = graph_model(
        [node("Conv", ["x", "w", "b"], ["y1"], kernel_shape=[1, 1]),
         node("Conv", ["x1", "w1"], ["y2"]),
         node("Conv", ["x", "w", "b"], ["y3"], kernel_shape=[1, 1], strides=[2, 2]),
         node("Conv", ["x", "w3"], ["y4"], pads=[1, 1, 1, 1])],
        {"x": [3, 4, 5, 6], "x1": [2, 4, 7]},
        {"y1": [3, 2, 5, 6], "y2": [2, 3, 7], "y3": [3, 2, 3, 3], "y4": [3, 2, 5, 6]},
        {"w": rand(2, 4, 1, 1), "b": rand(2, seed=1), "w1": rand(3, 4, 1, seed=2),
         "w3": rand(2, 4, 3, 3, seed=3)})
    ws = workbench.open(model)
    found = sorted(m.description for m in matches(ws, "ConvAsGemm"))
    assert found == ["/y1/Conv as a GEMM", "/y2/Conv as a GEMM"]  # not strided, not 3x3
    apply_all(ws, "ConvAsGemm")
    strided = [n for n in onnx_ops(ws.sdfg) if n.op_type == "MatMulStrided"]
    assert {n.implementation for n in strided} == {"blas" if blas_implementation() else "pure"}
    verify(ws)
    set_impl(ws, "MatMulStrided", "pure")
    verify(ws)


# -- ConcatInPlace --------------------------------------------------------------
def test_concat_in_place():
    """Contiguous slices (any producer, BLAS included), strided slices
    (element-wise producers) and graph inputs (no producer: stays a copy)."""
    model = graph_model(
        [node("Relu", ["a"], ["r1"]), node("Sigmoid", ["b"], ["r2"]),
         node("MatMul", ["a2", "w"], ["r3"]), node("Concat", ["r1", "r2", "r3"], ["o1"], axis=1),
         node("Relu", ["x"], ["s1"]), node("Neg", ["y"], ["s2"]),
         node("Concat", ["s1", "s2"], ["o2"], axis=-1),
         node("Concat", ["x", "x2"], ["o3"], axis=0),
         node("Exp", ["x"], ["e"]), node("MatMul", ["x2", "w2"], ["m"]),
         node("Concat", ["e", "m"], ["o4"], axis=1)],
        {"a": [1, 2, 3], "b": [1, 4, 3], "a2": [1, 5, 4], "x": [2, 3], "y": [2, 5],
         "x2": [2, 3]},
        {"o1": [1, 11, 3], "o2": [2, 8], "o3": [4, 3], "o4": [2, 6]},
        {"w": rand(4, 3), "w2": rand(3, 3, seed=1)})
    ws = workbench.open(model)
    found = sorted(m.description for m in matches(ws, "ConcatInPlace"))
    # o4's slices are strided and one producer is a MatMul: not matched
    assert found == ["/o1/Concat: producers write into the output",
                     "/o2/Concat: producers write into the output"]
    before = moved(ws)
    apply_all(ws, "ConcatInPlace")
    assert before - moved(ws) == 2 * 4 * (11 * 3 + 2 * 8)
    assert op_types(ws).count("Concat") == 2
    verify(ws)
