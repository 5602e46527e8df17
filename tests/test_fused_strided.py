"""FusedElementwise reads a strided View where it lies: the row kernel joins dims into one
row only where every tensor's elements form one evenly spaced run, and steps through a
row at each tensor's own stride. ElementwiseChainFusion therefore fuses chains reading a
transposed tensor (a Transpose folded into its readers, a training program's transposed
weight gradient), and each build still matches onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform
from workbench.ops.node import OnnxOp


def _chain_on_transpose(perm):
    """y = Relu(Transpose(x, perm) * 2 + b) + Transpose(x, perm), x of shape (2, 3, 4, 5)."""
    shape = [[2, 3, 4, 5][p] for p in perm]
    b = np.random.default_rng(1).standard_normal(shape[-1]).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="T", perm=list(perm)),
             helper.make_node("Mul", ["t", "two"], ["m"], name="M"),
             helper.make_node("Add", ["m", "b"], ["a"], name="A"),
             helper.make_node("Relu", ["a"], ["r"], name="R"),
             helper.make_node("Add", ["r", "t"], ["y"], name="Y")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _apply_all(ws, name):
    while (found := transform.find_matches(transform.get(name), ws.sdfg)):
        ws.apply(found[0])


# (0, 2, 1, 3): the row (last dim) is contiguous, no two dims join; (0, 1, 3, 2): the row
# steps by 5; (1, 0, 2, 3): the last two dims join into one contiguous run of 20
@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (0, 1, 3, 2), (1, 0, 2, 3)])
def test_a_chain_reading_a_transposed_view_fuses_and_matches(perm):
    ws = workbench.open(_chain_on_transpose(perm))
    _apply_all(ws, "FoldTransposeIntoConsumer")
    view = ws.sdfg.arrays["t"]
    assert view.strides != tuple(np.cumprod((1,) + tuple(view.shape[:0:-1]))[::-1])
    _apply_all(ws, "ElementwiseChainFusion")
    fused = [n for n, _ in ws.sdfg.all_nodes_recursive()
             if isinstance(n, OnnxOp) and n.op_type == "FusedElementwise"]
    assert len(fused) == 1 and not [n for n, _ in ws.sdfg.all_nodes_recursive()
                                    if isinstance(n, OnnxOp) and n.op_type in ("Mul", "Relu")]
    report = ws.verify()
    assert report.match, report.text()


def test_a_row_operator_does_not_join_a_chain_reading_a_strided_view():
    """Softmax over the last axis after such a chain stays apart (its sweeps walk
    contiguous rows), says why, and the program still matches."""
    model = _chain_on_transpose((0, 1, 3, 2))
    graph = model.graph
    graph.node[-1].output[0] = "s"
    graph.node.append(helper.make_node("Softmax", ["s"], ["y"], name="S", axis=-1))
    ws = workbench.open(model)
    _apply_all(ws, "FoldTransposeIntoConsumer")
    _apply_all(ws, "ElementwiseChainFusion")
    assert transform.find_matches(transform.get("RowEpilogueFusion"), ws.sdfg) == []
    reasons = [r.reason for r in transform.refusals(transform.get("RowEpilogueFusion"),
                                                    ws.sdfg)]
    assert any("reads or writes t at other strides" in r for r in reasons), reasons
    report = ws.verify()
    assert report.match, report.text()
