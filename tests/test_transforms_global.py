"""Global transformations: where they match, where they must not, and that the
transformed program still matches onnxruntime (real builds)."""
import dace
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from workbench import transformation_api as transform
from workbench.errors import TransformationError
from workbench.importer import import_model
from workbench.session import Session

GLOBAL = ["RemoveIdentity", "ConstantFolding", "DeadCodeElimination", "TransientReuse",
          "PersistentAllocation", "InPlaceElementwise", "StateFusion",
          "CommonSubexpressionElimination"]


def _model(nodes, inputs, outputs, inits=None):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _matches(ws, name):
    return transform.find_matches(transform.get(name), ws.sdfg, ws.model.weights)


def _apply_all(ws, name) -> int:
    n = 0
    while (found := _matches(ws, name)):
        ws.apply(found[0])
        n += 1
    return n


def _footprint(sdfg) -> int:
    """Bytes of the transient arrays the program still uses."""
    used = {n.data for s in sdfg.states() for n in s.data_nodes()}
    return sum(d.total_size * d.dtype.bytes for k, d in sdfg.arrays.items()
               if d.transient and k in used and type(d).__name__ == "Array")


def _verify(ws):
    report = ws.verify()
    assert report.match, report.text()


def _ops(ws):
    return {n.onnx_name for n, _ in ws.sdfg.all_nodes_recursive() if hasattr(n, "onnx_name")}


def test_library_has_the_global_level():
    names = {t.name for t in transform.all_transformations("global")}
    assert set(GLOBAL) <= names
    assert all(t.description for t in transform.all_transformations("global"))


# -- RemoveIdentity ---------------------------------------------------------
def test_remove_identity():
    model = _model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                    helper.make_node("Identity", ["a"], ["b"], name="id"),
                    helper.make_node("Dropout", ["b"], ["c"], name="drop"),
                    helper.make_node("Sigmoid", ["c"], ["y"], name="sig"),
                    helper.make_node("Identity", ["x"], ["z"], name="id_io")],
                   {"x": [8, 16]}, {"y": [8, 16], "z": [8, 16]})
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    found = {m.description for m in _matches(ws, "RemoveIdentity")}
    assert found == {"remove id", "remove drop"}  # input -> output must stay a copy
    assert _apply_all(ws, "RemoveIdentity") == 2
    assert ws.data_movement().moved_bytes == before - 2 * 2 * 8 * 16 * 4
    _verify(ws)


def test_a_cast_to_the_type_it_has_is_removed_and_a_real_cast_stays():
    model = _model([helper.make_node("Cast", ["x"], ["a"], name="same", to=TensorProto.FLOAT),
                    helper.make_node("Pow", ["a", "two"], ["p"], name="pow"),
                    helper.make_node("Cast", ["p"], ["i"], name="to_int", to=TensorProto.INT32),
                    helper.make_node("Cast", ["i"], ["y"], name="back", to=TensorProto.FLOAT)],
                   {"x": [8, 16]}, {"y": [8, 16]}, {"two": np.array(2.0, np.float32)})
    ws = workbench.open(model)
    before = ws.data_movement().moved_bytes
    found = {m.description for m in _matches(ws, "RemoveIdentity")}
    assert found == {"remove same"}   # float -> int32 -> float truncates: not a copy
    assert _apply_all(ws, "RemoveIdentity") == 1
    assert ws.data_movement().moved_bytes == before - 2 * 8 * 16 * 4
    assert {n.onnx_name for n, _ in ws.sdfg.all_nodes_recursive()
            if getattr(n, "op_type", None) == "Cast"} == {"to_int", "back"}
    _verify(ws)


# -- ConstantFolding and DeadCodeElimination ------------------------------------
def _weights_model():
    rng = np.random.default_rng(0)
    inits = {"wt": rng.standard_normal((6, 8)).astype(np.float32),
             "bias": rng.standard_normal(6).astype(np.float32), "two": np.array(2.0, np.float32),
             "s1": np.array([2], np.int64), "s2": np.array([2, 6], np.int64),
             "unused_w": rng.standard_normal(3).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["wt"], ["w"], name="T", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w"], ["xw"], name="MM"),
             helper.make_node("Mul", ["bias", "two"], ["b2"], name="M2"),
             helper.make_node("Add", ["xw", "b2"], ["s"], name="A"),
             helper.make_node("Concat", ["s1", "s2"], ["shape"], name="C", axis=0),
             helper.make_node("Reshape", ["s", "shape"], ["y"], name="R"),
             helper.make_node("Neg", ["unused_w"], ["dead1"], name="D1"),
             helper.make_node("Relu", ["x"], ["dead2"], name="D2"),
             helper.make_node("Sigmoid", ["dead2"], ["dead3"], name="D3")]
    return _model(nodes, {"x": [4, 8]}, {"y": [2, 2, 6]}, inits)


def _unfolded():
    """The model as the ONNX backend imports it: nothing folded at import."""
    return Session(import_model(_weights_model(), fold=False))


def test_constant_folding():
    ws = _unfolded()
    found = {m.description for m in _matches(ws, "ConstantFolding")}
    # MM reads an input, D1 is read by nobody (dead code, not a constant). C's value is
    # R's shape: an integer known at import, R reads it as a constant (importer/fold.py,
    # rule 5) and C is dead code instead.
    assert found == {"fold T", "fold M2"}
    assert transform.find_matches(transform.get("ConstantFolding"), ws.sdfg, None) == []
    with pytest.raises(TransformationError, match="needs the model's weights"):
        transform.apply_to_copy(ws.sdfg, _matches(ws, "ConstantFolding")[0])
    before = ws.data_movement().moved_bytes
    weights_before = ws.model.weights
    assert _apply_all(ws, "ConstantFolding") == 2
    assert not {"T", "M2"} & _ops(ws)
    assert ws.data_movement().moved_bytes < before
    weights = ws.model.weights
    assert "wt" not in weights and "wt" not in ws.sdfg.arrays
    np.testing.assert_array_equal(weights["w"], weights_before["wt"].T)
    assert weights["w"].flags.c_contiguous
    np.testing.assert_allclose(weights["b2"], weights_before["bias"] * 2)
    reshape = next(n for n, _ in ws.sdfg.all_nodes_recursive() if getattr(n, "onnx_name", "") == "R")
    assert reshape.consts[1].tolist() == [2, 2, 6]  # the folded shape is known at build time
    assert weights_before["wt"].shape == (6, 8)  # the session swapped dicts, never mutated one
    _verify(ws)


def test_constant_folding_leaves_a_fill_of_many_elements():
    """ConstantOfShape or Expand broadcasting one value into many stays an operator (the
    importer's rule, fold.spreads): stored, it would add all its elements to the weights
    (a training program's embedding-gradient zeros: the table's size)."""
    inits = {"big": np.array([64, 128], np.int64), "small": np.array([2, 4], np.int64),
             "one": np.array([1.5], np.float32)}
    nodes = [helper.make_node("ConstantOfShape", ["big"], ["fill"], name="Fill",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x", "fill"], ["y"], name="A1"),
             helper.make_node("Expand", ["one", "small"], ["e"], name="E"),
             helper.make_node("Add", ["x2", "e"], ["z"], name="A2")]
    ws = Session(import_model(_model(nodes, {"x": [64, 128], "x2": [2, 4]},
                                     {"y": [64, 128], "z": [2, 4]}, inits), fold=False))
    assert {m.description for m in _matches(ws, "ConstantFolding")} == {"fold E"}
    (refusal,) = [r for r in transform.refusals(transform.get("ConstantFolding"), ws.sdfg,
                                                ws.model.weights) if "Fill" in r.node]
    assert "broadcasts 1 value(s) into 8192" in refusal.reason
    weights_before = set(ws.model.weights)
    assert _apply_all(ws, "ConstantFolding") == 1
    assert "Fill" in _ops(ws) and "fill" not in ws.model.weights
    assert set(ws.model.weights) - weights_before == {"e"}
    _verify(ws)


def test_constant_folding_is_all_or_nothing_and_undoable():
    ws = _unfolded()
    match = next(m for m in _matches(ws, "ConstantFolding") if m.description == "fold T")
    original = ws.model.weights
    ws.apply(match)
    folded = ws.model.weights
    with pytest.raises(TransformationError):
        ws.apply(match)  # T is gone: the step fails, nothing changes
    assert ws.model.weights is folded
    ws.undo()
    assert ws.model.weights is original and "T" in _ops(ws)


def test_dead_code_elimination():
    ws = _unfolded()
    found = {m.description for m in _matches(ws, "DeadCodeElimination")}
    # D2 still has a reader; C's value is read at import (see test_constant_folding)
    assert found == {"remove dead D1", "remove dead D3", "remove dead C"}
    before = ws.data_movement().moved_bytes
    assert _apply_all(ws, "DeadCodeElimination") == 4  # D3, then D2 becomes dead
    assert not {"D1", "D2", "D3", "C"} & _ops(ws)
    assert "unused_w" not in ws.model.weights and "unused_w" not in ws.sdfg.arrays
    assert "x" in ws.sdfg.arrays  # a graph input stays
    assert ws.data_movement().moved_bytes == \
        before - (3 * 4 + 3 * 4) - 2 * (2 * 4 * 8 * 4) - 2 * (3 * 8)   # D1, D2 and D3, C
    ws.sdfg.add_transient("left_behind", [4], ws.sdfg.arrays["x"].dtype)
    cleanup = _matches(ws, "DeadCodeElimination")
    assert [m.options_dict() for m in cleanup] == [{"cleanup": True}]
    ws.apply(cleanup[0])
    assert "left_behind" not in ws.sdfg.arrays and not _matches(ws, "DeadCodeElimination")
    _verify(ws)


def test_common_subexpression_elimination():
    model = _model([helper.make_node("Relu", ["x"], ["a"], name="r1"),
                    helper.make_node("Relu", ["x"], ["b"], name="r2"),
                    helper.make_node("Relu", ["z"], ["c"], name="r3"),  # other input
                    helper.make_node("LeakyRelu", ["x"], ["d"], name="l1", alpha=0.1),
                    helper.make_node("LeakyRelu", ["x"], ["e"], name="l2", alpha=0.2),
                    helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"], name="sum")],
                   {"x": [8, 16], "z": [8, 16]}, {"y": [8, 16]})
    ws = workbench.open(model)
    found = _matches(ws, "CommonSubexpressionElimination")
    assert [m.description for m in found] == ["r2 repeats r1"]  # not r3, not l2 (alpha)
    before = ws.data_movement().moved_bytes
    ws.apply(found[0])
    assert "r2" not in _ops(ws) and "b" not in ws.sdfg.arrays
    assert ws.data_movement().moved_bytes == before - 2 * 8 * 16 * 4
    assert _matches(ws, "CommonSubexpressionElimination") == []
    _verify(ws)


# -- memory: in place, reuse, persistent ------------------------------------------
def test_in_place_elementwise():
    ws = workbench.open("bert-layer")
    found = {m.nodes[0].split(":")[-1].split("#")[0] for m in _matches(ws, "InPlaceElementwise")}
    assert "/intermediate/intermediate_act_fn/Erf" in found
    assert "/attention/self/query/Add" in found  # over the MatMul result, not the bias
    # Div reads dense/Add, which Mul reads too; LayerNorm is not element-wise.
    assert "/intermediate/intermediate_act_fn/Div" not in found
    assert "/output/LayerNorm/LayerNormalization" not in found
    before, footprint = ws.data_movement().moved_bytes, _footprint(ws.sdfg)
    assert _apply_all(ws, "InPlaceElementwise") == 14
    assert ws.data_movement().moved_bytes == before
    assert _footprint(ws.sdfg) < 0.5 * footprint
    _verify(ws)


def test_transient_reuse_and_persistent_allocation():
    ws = workbench.open("bert-layer")
    before, footprint = ws.data_movement().moved_bytes, _footprint(ws.sdfg)
    assert _apply_all(ws, "TransientReuse") == 1
    assert ws.data_movement().moved_bytes == before
    assert _footprint(ws.sdfg) < 0.5 * footprint
    assert _apply_all(ws, "PersistentAllocation") == 1
    assert all(d.lifetime == dace.AllocationLifetime.Persistent
               for d in ws.sdfg.arrays.values() if d.transient)
    _verify(ws)
    source = next(ws.build(whole=True).folder.glob("src/cpu/*.cpp")).read_text()
    program, init = source.split("__dace_init_", 1)
    assert "new float" not in program and "new float" in init  # no malloc per call
    units = ws.build()   # by units: the program allocates once, when it starts
    source = (units.folder / "src" / "cpu" / f"{units.sdfg.name}.cpp").read_text()
    allocating, calling = source.split('DACE_EXPORTED void __program_', 1)
    assert "aligned_alloc" in allocating and "alloc" not in calling


def test_transient_reuse_needs_disjoint_lifetimes():
    # a and b are both live when Add writes c: no two buffers may share.
    model = _model([helper.make_node("Relu", ["x"], ["a"], name="r"),
                    helper.make_node("Sigmoid", ["x"], ["b"], name="s"),
                    helper.make_node("Add", ["a", "b"], ["c"], name="add"),
                    helper.make_node("Neg", ["c"], ["y"], name="neg")],
                   {"x": [4, 4]}, {"y": [4, 4]})
    ws = workbench.open(model)
    assert _matches(ws, "TransientReuse") == []
    # Add may write over a (its last reader); Neg writes a graph output, never in place.
    assert [m.description for m in _matches(ws, "InPlaceElementwise")] == ["add writes over a"]


def test_state_fusion_after_expansion():
    ws = workbench.open("mlp")
    assert _matches(ws, "StateFusion") == []  # one state, operators not expanded
    expand = transform.get("ExpandToMaps")
    ws.apply(next(m for m in _matches(ws, "ExpandToMaps") if "fc1" in m.description))
    found = _matches(ws, "StateFusion")
    assert len(found) == 1 and expand.level == "local"
    ws.apply(found[0])
    nested = [n.sdfg for n, _ in ws.sdfg.all_nodes_recursive() if type(n).__name__ == "NestedSDFG"]
    assert len(nested[0].states()) == 1
    _verify(ws)
