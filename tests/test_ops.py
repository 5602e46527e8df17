"""Every registered ONNX op, checked against onnxruntime on real compiles.

The cases of one op type sit side by side in one model (one compile per op
type and implementation); each case has its own outputs, so a mismatch
names the case. An op type registered without a row in ``CASES`` fails
``test_every_registered_op_has_cases``.
"""
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from onnx_helpers import assert_matches_onnxruntime, combine, onnx_ops, single_node_model
from workbench.ops import implementations_of, supported_op_types

_rng = np.random.default_rng(1234)


def rand(*shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(dtype)


def pos(*shape):
    """Away from 0 so Log, Sqrt, Reciprocal, Div and Pow stay well defined."""
    return _rng.uniform(0.5, 2.0, shape).astype("float32")


def ints(*values):
    return np.array(values, dtype=np.int64)


@dataclass
class Case:
    id: str
    inputs: dict                         # graph inputs, fed with these arrays
    attrs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)  # initializers (weights, shape tensors)
    outputs: tuple = ("y",)
    node_inputs: list = None             # order when not inputs + init; "" = absent
    opset: int = 17


def unary(x=None, **attrs):
    return [Case("default", {"x": rand(2, 3, 4) if x is None else x}, attrs)]


C = Case
CASES = {
    # -- element-wise, unary ------------------------------------------------
    "Relu": unary(), "Sigmoid": unary(), "Tanh": unary(), "Erf": unary(), "Exp": unary(),
    "Neg": unary(), "Abs": unary(), "Floor": unary(rand(2, 3, 4) * 3),
    "Ceil": unary(rand(2, 3, 4) * 3), "Sin": unary(), "Cos": unary(), "Softplus": unary(),
    "HardSwish": unary(rand(2, 3, 4) * 4),
    "Log": unary(pos(2, 3, 4)), "Sqrt": unary(pos(2, 3, 4)), "Reciprocal": unary(pos(2, 3, 4)),
    # Activation attributes: the schema default and a user value each.
    "LeakyRelu": [C("default", {"x": rand(2, 3, 4)}),
                  C("alpha", {"x": rand(2, 3, 4)}, {"alpha": 0.2})],
    "Elu": [C("default", {"x": rand(2, 3, 4)}), C("alpha", {"x": rand(2, 3, 4)}, {"alpha": 0.5})],
    "Selu": [C("default", {"x": rand(2, 3, 4)}),
             C("alpha_gamma", {"x": rand(2, 3, 4)}, {"alpha": 1.5, "gamma": 0.8})],
    "HardSigmoid": [C("default", {"x": rand(2, 3, 4) * 4}),
                    C("alpha_beta", {"x": rand(2, 3, 4) * 4}, {"alpha": 0.3, "beta": 0.4})],
    # -- element-wise, binary (numpy broadcasting) ----------------------------
    "Add": [C("same", {"a": rand(2, 3), "b": rand(2, 3)}),
            C("trailing", {"a": rand(2, 3, 4), "b": rand(4)}),
            C("both_ways", {"a": rand(2, 1, 4), "b": rand(3, 1)}),
            C("scalar", {"a": rand(2, 3)}, init={"b": np.array(1.5, "float32")})],
    "Sub": [C("left_smaller", {"a": rand(4), "b": rand(2, 3, 4)}),
            C("both_ways", {"a": rand(3, 1), "b": rand(2, 1, 4)})],
    "Mul": [C("both_ways", {"a": rand(2, 1, 4), "b": rand(3, 1)}),
            C("weight", {"a": rand(2, 3, 4)}, init={"b": rand(1, 3, 1)})],
    "Div": [C("trailing", {"a": rand(2, 3, 4), "b": pos(4)}),
            C("both_ways", {"a": rand(2, 1, 4), "b": pos(3, 1)})],
    "Pow": [C("same", {"a": pos(2, 3), "b": rand(2, 3)}),
            C("square", {"a": rand(2, 3, 4)}, init={"b": np.array(2.0, "float32")})],
    # -- element-wise, variadic -----------------------------------------------
    "Sum": [C("one", {"v": rand(2, 3)}),
            C("three", {"a": rand(2, 3), "b": rand(3), "c": rand(1, 3)})],
    "Max": [C("two", {"a": rand(2, 3), "b": rand(2, 3)}),
            C("three", {"a": rand(2, 3, 4), "b": rand(4), "c": rand(3, 1)})],
    "Min": [C("two", {"a": rand(2, 3), "b": rand(3)}),
            C("three", {"a": rand(2, 3, 4), "b": rand(4), "c": rand(3, 1)})],
    # -- linear algebra -------------------------------------------------------
    "Gemm": [C("bias_1d", {"a": rand(3, 4)}, init={"b": rand(4, 5), "c": rand(5)}),
             C("transA_bias_2d", {"a": rand(4, 3), "b": rand(4, 5), "c": rand(3, 5)},
               {"transA": 1, "alpha": 0.5, "beta": 2.0}),
             C("transB_bias_col", {"a": rand(3, 4), "b": rand(5, 4), "c": rand(3, 1)},
               {"transB": 1, "beta": 0.5}),
             C("bias_row", {"a": rand(3, 4), "b": rand(4, 5), "c": rand(1, 5)}),
             C("both_trans_no_bias", {"a": rand(4, 3), "b": rand(5, 4)},
               {"transA": 1, "transB": 1, "alpha": 1.5}),
             C("beta_zero", {"a": rand(3, 4), "b": rand(4, 5), "c": rand(5)}, {"beta": 0.0}),
             # Size-1 dims: a batch-1 linear layer, a rank-1 update.
             C("single_row", {"a": rand(1, 4)}, init={"b": rand(4, 5), "c": rand(5)}),
             C("k1", {"a": rand(3, 1), "b": rand(1, 5)})],
    "MatMul": [C("2d", {"a": rand(3, 4)}, init={"b": rand(4, 5)}),
               C("batched_3d", {"a": rand(2, 3, 4), "b": rand(2, 4, 5)}),
               C("4d_by_2d", {"a": rand(2, 2, 3, 4)}, init={"b": rand(4, 5)}),
               C("2d_by_3d", {"a": rand(3, 4), "b": rand(2, 4, 5)}),
               C("broadcast_batch", {"a": rand(2, 1, 3, 4), "b": rand(3, 4, 5)}),
               C("vec_mat", {"a": rand(4), "b": rand(4, 5)}),
               C("mat_vec", {"a": rand(3, 4), "b": rand(4)}),
               C("batched_vec", {"a": rand(2, 3, 4), "b": rand(4)}),
               C("dot", {"a": rand(4), "b": rand(4)}),
               C("batched_single_row", {"a": rand(2, 1, 4), "b": rand(2, 4, 5)}),
               C("outer", {"a": rand(3, 1), "b": rand(1, 5)})],
    # -- convolution and pooling ----------------------------------------------
    "Conv": [C("pads_strides_bias", {"x": rand(1, 2, 6, 6)},
               {"pads": [1, 1, 1, 1], "strides": [2, 2]},
               init={"w": rand(3, 2, 3, 3), "b": rand(3)}),
             C("dilations_asym_pads_no_bias", {"x": rand(2, 2, 7, 6)},
               {"pads": [0, 1, 2, 0], "dilations": [2, 1]}, init={"w": rand(3, 2, 3, 2)}),
             C("depthwise", {"x": rand(1, 4, 5, 5)}, {"group": 4, "pads": [1, 1, 1, 1]},
               init={"w": rand(4, 1, 3, 3), "b": rand(4)}),
             C("groups", {"x": rand(1, 4, 5, 5)}, {"group": 2},
               init={"w": rand(6, 2, 3, 3), "b": rand(6)}),
             C("same_upper_stride", {"x": rand(1, 2, 7, 7)},
               {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, init={"w": rand(2, 2, 3, 3)}),
             C("1d", {"x": rand(1, 2, 7)}, {"pads": [1, 1]}, init={"w": rand(3, 2, 3)}),
             C("pointwise", {"x": rand(1, 3, 4, 4)}, init={"w": rand(5, 3, 1, 1)})],
    "GlobalAveragePool": [C("2d", {"x": rand(2, 3, 4, 5)}), C("1d", {"x": rand(2, 3, 5)})],
    "GlobalMaxPool": [C("2d", {"x": rand(2, 3, 4, 5)}), C("1d", {"x": rand(2, 3, 5)})],
    # -- normalization --------------------------------------------------------
    "Softmax": [C("last", {"x": rand(2, 3, 4)}, {"axis": -1}),
                C("axis1", {"x": rand(2, 3, 4)}, {"axis": 1}),
                C("default", {"x": rand(3, 5) * 4}),
                # Before opset 13 Softmax flattens to 2-D at axis.
                C("opset11_axis1", {"x": rand(2, 3, 4)}, {"axis": 1}, opset=11)],
    "LogSoftmax": [C("last", {"x": rand(2, 3, 4)}, {"axis": -1}),
                   C("axis0", {"x": rand(2, 3, 4)}, {"axis": 0})],
    "LayerNormalization": [
        C("bias", {"x": rand(2, 3, 4)}, {"axis": -1}, init={"s": rand(4), "b": rand(4)}),
        C("no_bias", {"x": rand(2, 3, 4)}, {"epsilon": 1e-3}, init={"s": rand(4)}),
        C("axis_minus2", {"x": rand(2, 3, 4)}, {"axis": -2},
          init={"s": rand(3, 4), "b": rand(3, 4)})],
    # -- data movement --------------------------------------------------------
    "Transpose": [C("default_reverse", {"x": rand(2, 3, 4)}),
                  C("swap_last", {"x": rand(2, 3, 4)}, {"perm": [0, 2, 1]}),
                  C("4d", {"x": rand(2, 3, 4, 5)}, {"perm": [2, 0, 3, 1]})],
    "Reshape": [C("infer_dim", {"x": rand(2, 3, 4)}, init={"shape": ints(4, -1)}),
                C("copy_dim", {"x": rand(2, 3, 4)}, init={"shape": ints(0, 2, 6)})],
    "Flatten": [C("default", {"x": rand(2, 3, 4)}),
                C("axis0", {"x": rand(2, 3, 4)}, {"axis": 0}),
                C("axis_minus1", {"x": rand(2, 3, 4)}, {"axis": -1})],
    "Squeeze": [C("axes", {"x": rand(2, 1, 3, 1)}, init={"axes": ints(1)}),
                C("all", {"x": rand(1, 3, 1, 4)})],
    "Unsqueeze": [C("front_back", {"x": rand(2, 3)}, init={"axes": ints(0, -1)}),
                  C("middle", {"x": rand(2, 3)}, init={"axes": ints(1)})],
    "Identity": [C("default", {"x": rand(2, 3)})],
    "Dropout": [C("default", {"x": rand(2, 3)}),
                C("mask", {"x": rand(2, 3)}, outputs=("y", "mask"))],
    "Concat": [C("axis0", {"a": rand(2, 3), "b": rand(1, 3)}, {"axis": 0}),
               C("axis1", {"a": rand(2, 3, 2), "b": rand(2, 1, 2), "c": rand(2, 4, 2)},
                 {"axis": 1}),
               C("axis_minus1", {"a": rand(2, 3)}, {"axis": -1}, init={"b": rand(2, 2)})],
    "Gather": [C("axis0_2d_indices", {"x": rand(3, 4)}, {"axis": 0},
                 init={"i": np.array([[0, -1], [2, 1]], dtype=np.int64)}),
               C("axis1_negative", {"x": rand(2, 3, 4)}, {"axis": 1}, init={"i": ints(-1, 0, -3)}),
               C("scalar_index", {"x": rand(3, 4)}, {"axis": 0},
                 init={"i": np.array(-1, dtype=np.int64)}),
               C("fed_int32", {"x": rand(2, 5), "i": np.array([4, -5, 0], dtype=np.int32)},
                 {"axis": -1})],
}


def case_model(op_type: str, case: Case):
    """One node; its tensors carry the case id so cases can share a model."""
    def rename(name):
        return f"{case.id}_{name}" if name else ""

    node_inputs = case.node_inputs
    if node_inputs is not None:
        node_inputs = [rename(n) for n in node_inputs]
    model = single_node_model(
        op_type, {rename(n): v for n, v in case.inputs.items()}, case.attrs,
        outputs=[rename(n) for n in case.outputs], opset=case.opset,
        initializers={rename(n): v for n, v in case.init.items()}, node_inputs=node_inputs,
        name=f"{op_type}_{case.id}")
    return model, {rename(n): v for n, v in case.inputs.items()}


def op_models(op_type: str):
    """(model, feeds) per opset used by the op's cases."""
    by_opset = {}
    for case in CASES[op_type]:
        by_opset.setdefault(case.opset, []).append(case_model(op_type, case))
    out = []
    for opset, built in sorted(by_opset.items()):
        feeds = {k: v for _, f in built for k, v in f.items()}
        out.append((combine([m for m, _ in built], f"{op_type}_opset{opset}"), feeds))
    return out


def test_every_registered_op_has_cases():
    missing = sorted(supported_op_types() - set(CASES))
    assert not missing, f"registered op types without a case in tests/test_ops.py: {missing}"
    stale = sorted(set(CASES) - supported_op_types())
    assert not stale, f"cases for op types no longer registered: {stale}"


def _params():
    return [pytest.param(op, impl, id=f"{op}-{impl}")
            for op in sorted(supported_op_types() & set(CASES))
            for impl in implementations_of(op)]


@pytest.mark.parametrize("op_type, implementation", _params())
def test_op_matches_onnxruntime(op_type, implementation):
    for model, feeds in op_models(op_type):
        ws = assert_matches_onnxruntime(model, feeds, implementation=implementation)
        nodes = [n for n in onnx_ops(ws.sdfg) if n.op_type == op_type]
        assert len(nodes) == sum(1 for n in model.graph.node)
        assert {n.implementation for n in nodes} == {implementation}
        if implementation == "blas":  # at least one case must really call the library
            source = "\n".join(p.read_text() for p in Path(ws.build().folder).rglob("*.cpp"))
            assert "cblas_" in source or "sgemm" in source, "no BLAS call in the generated code"


def test_tensor_names_that_equal_tasklet_variables():
    """ONNX tensors named x, y, a, b, w, c, o, v ... as exporters often write them.

    The generated C++ must not confuse an array with a tasklet's local
    variable of the same name, nor two arrays read crosswise (``b`` into
    ``a``'s slot and ``a`` into ``b``'s).
    """
    import onnx
    from onnx import helper, numpy_helper
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Sub", ["b", "a"], ["o"], name="sub"),
             helper.make_node("Gemm", ["y", "w", "c"], ["v"], name="gemm"),
             helper.make_node("MatMul", ["v", "k"], ["m"], name="matmul"),
             helper.make_node("Transpose", ["m"], ["i0"], name="transpose"),
             helper.make_node("Concat", ["o", "o"], ["n"], axis=0, name="concat"),
             helper.make_node("Gather", ["src", "idx"], ["j"], axis=1, name="gather")]
    graph = helper.make_graph(
        nodes, "names",
        [helper.make_tensor_value_info(n, f, s) for n, s in
         (("x", [3, 4]), ("a", [2, 3]), ("b", [2, 3]), ("src", [2, 3]))],
        [helper.make_tensor_value_info("i0", f, [2, 3]),
         helper.make_tensor_value_info("n", f, [4, 3]),
         helper.make_tensor_value_info("j", f, [2, 2])],
        initializer=[numpy_helper.from_array(rand(4, 5), "w"),
                     numpy_helper.from_array(rand(5), "c"),
                     numpy_helper.from_array(rand(5, 2), "k"),
                     numpy_helper.from_array(ints(2, -1), "idx")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    assert_matches_onnxruntime(model, {"x": rand(3, 4), "a": rand(2, 3), "b": rand(2, 3),
                                       "src": rand(2, 3)}, implementation="pure")
