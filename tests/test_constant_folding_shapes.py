"""Constant folding evaluates a node on exactly the values the program holds.

HuggingFace's BertEmbeddings gathers its ``token_type_ids`` buffer (512
positions) with ``torch.gather``: a GatherElements on constants. onnx.reference
computes GatherElements with ``np.choose``, which takes at most 32 choices under
numpy 1.x, and its fallback handles one index per row only: it raised "cannot
reshape array of size 1 into shape (1,16)", the importer left the node to the
program and ConstantFolding stopped the ``auto`` recipe. Both folders now
compute GatherElements with numpy (``workbench.importer.fold.NUMPY_KERNELS``).
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform
from workbench.importer.fold import NUMPY_KERNELS


def _gather_model(data, indices, axis):
    """y = x + GatherElements(data, indices), both constants."""
    nodes = [helper.make_node("GatherElements", ["data", "indices"], ["g"], axis=axis,
                              name="gather"),
             helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["x", "gf"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(indices.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(indices.shape))],
        initializer=[numpy_helper.from_array(data, "data"),
                     numpy_helper.from_array(indices, "indices")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _bert_buffer():
    """BERT's case: a (1, 512) buffer, 16 positions gathered along axis 1."""
    data = (np.arange(512, dtype=np.int64) % 7).reshape(1, 512)
    indices = np.arange(3, 19, dtype=np.int64).reshape(1, 16)
    return data, indices


def test_onnx_reference_fails_where_the_numpy_kernel_does_not():
    from onnx.reference import ReferenceEvaluator
    data, indices = _bert_buffer()
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=1)
    with pytest.raises(ValueError):  # the cause: if this passes, the kernel may go
        ReferenceEvaluator(node).run(None, {"d": data, "i": indices})
    (got,) = NUMPY_KERNELS["GatherElements"]({"axis": 1}, data, indices)
    assert got.shape == (1, 16) and (got == data[0, 3:19]).all()


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_kernel_follows_the_spec(axis):
    rng = np.random.default_rng(axis + 5)
    data = rng.normal(size=(40, 50)).astype(np.float32)
    ax = axis % 2
    shape = (7, 50) if ax == 0 else (40, 9)
    shape = (shape[0] - (ax == 1) * 3, shape[1] - (ax == 0) * 4)  # smaller off the axis
    n = data.shape[ax]
    indices = rng.integers(-n, n, size=shape).astype(np.int64)
    (got,) = NUMPY_KERNELS["GatherElements"]({"axis": axis}, data, indices)
    want = np.empty(shape, np.float32)
    for i in range(shape[0]):
        for j in range(shape[1]):
            k = indices[i, j] % n
            want[i, j] = data[k, j] if ax == 0 else data[i, k]
    assert (got == want).all()
    with pytest.raises(ValueError):
        NUMPY_KERNELS["GatherElements"]({"axis": axis}, data, np.full(shape, n, np.int64))


def test_the_importer_folds_bert_s_buffer_gather():
    data, indices = _bert_buffer()
    ws = workbench.open(_gather_model(data, indices, 1))
    ops = {n.op_type for s in ws.sdfg.states() for n in s.nodes() if hasattr(n, "op_type")}
    assert "GatherElements" not in ops and "Cast" not in ops  # folded at import
    report = ws.verify()
    assert report.match, report.text()


def test_constant_folding_step_evaluates_the_gather():
    """Imported without folding (as the ONNX backend imports), the step folds it."""
    from workbench.importer import import_model
    from workbench.session import Session
    data, indices = _bert_buffer()
    ws = Session(import_model(_gather_model(data, indices, 1), fold=False))
    found = [m for m in transform.find_matches(transform.get("ConstantFolding"), ws.sdfg,
                                               ws.model.weights)
             if "gather" in m.description]
    assert found
    ws.apply(found[0])
    folded = [v for v in ws.model.weights.values() if v.shape == (1, 16)]
    assert any((v == data[0, 3:19]).all() for v in folded)
    report = ws.verify()
    assert report.match, report.text()
