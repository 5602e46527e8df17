"""The importer: static shapes, folding, weights as arguments, and bad input.

Most tests only import (no compile); the few that build keep models tiny,
except ``mlp``, whose 7 MB of weights are the point of the source-size check.
"""
import os
from pathlib import Path

import dace
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import sdfg_models
import workbench
from onnx_helpers import assert_matches_onnxruntime, onnx_ops, single_node_model, value_info
from workbench.errors import (BadInputError, ModelLoadError, ShapeError, UnknownModelError,
                              UnsafeModelError, UnsupportedOpError)

BUNDLED = ["mlp", "bert-layer", "mbconv", "resblock"]
SHAPE_PLUMBING = {"Shape", "Constant", "Concat", "Gather", "Unsqueeze"}


@pytest.fixture(scope="module")
def bundled():
    """Imported sessions, shared: importing bert-layer takes about a second."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = workbench.open(name)
        return cache[name]

    return get


def _cache() -> Path:
    return Path(os.environ["WORKBENCH_CACHE"])


def _built_files() -> set:
    """Every file under the build cache: what a compile would add to."""
    return {p for p in _cache().rglob("*") if p.is_file() and "models" not in p.parts}


# -- the SDFG the importer makes --------------------------------------------
@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_models_have_static_shapes(bundled, name):
    ws = bundled(name)
    assert not ws.sdfg.free_symbols, f"{name}: symbolic sizes {ws.sdfg.free_symbols}"
    for array_name, desc in ws.sdfg.arrays.items():
        for dim in desc.shape:
            assert not dace.symbolic.issymbolic(dim), f"{name}: {array_name} has shape {desc.shape}"
            assert int(dim) > 0, f"{name}: {array_name} has shape {desc.shape}"
    for info in ws.model.inputs + ws.model.outputs:
        assert all(isinstance(d, int) and d > 0 for d in info.shape), info


@pytest.mark.parametrize("name", BUNDLED)
def test_weights_are_arguments_and_intermediates_transient(bundled, name):
    ws = bundled(name)
    arrays = ws.sdfg.arrays
    assert ws.model.weights, f"{name} has no weights"
    for array_name, value in ws.model.weights.items():
        desc = arrays[array_name]
        assert not desc.transient, f"weight {array_name} is transient (would be baked in)"
        assert tuple(desc.shape) == value.shape
        assert desc.dtype.as_numpy_dtype() == value.dtype
    io = {i.sdfg_name for i in ws.model.inputs + ws.model.outputs}
    for info in ws.model.inputs + ws.model.outputs:
        assert not arrays[info.sdfg_name].transient, info
    for array_name, desc in arrays.items():
        if array_name not in io and array_name not in ws.model.weights:
            assert desc.transient, f"intermediate {array_name} is not transient"


def test_bert_layer_shape_chains_are_folded(bundled):
    ws = bundled("bert-layer")
    stats = ws.model.stats
    assert stats["nodes_folded"] > 0
    assert stats["nodes_in"] == len(sdfg_models.build("bert-layer").graph.node)
    ops = onnx_ops(ws.sdfg)
    assert len(ops) == stats["nodes"] == len(ws.model.folded_model.graph.node)
    left = sorted(f"{n.op_type} {n.onnx_name}" for n in ops if n.op_type in SHAPE_PLUMBING)
    assert not left, f"shape plumbing survived folding: {left}"
    # The Reshapes now read a constant shape: a weight, not something computed.
    reshapes = [n for n in ops if n.op_type == "Reshape"]
    assert reshapes
    state = ws.sdfg.start_state
    for node in reshapes:
        shape_edge = next(e for e in state.in_edges(node) if e.dst_conn == node.onnx_inputs[1])
        assert shape_edge.data.data in ws.model.weights


def test_onnx_node_names_survive(bundled):
    ws = bundled("bert-layer")
    ops = onnx_ops(ws.sdfg)
    expected = [n.name for n in ws.model.folded_model.graph.node]
    assert sorted(n.onnx_name for n in ops) == sorted(expected)
    # PyTorch names ("/attention/self/query/MatMul") are no C identifiers; only the label changes.
    query = next(n for n in ops if n.onnx_name == "/attention/self/query/MatMul")
    assert query.op_type == "MatMul" and query.label.isidentifier()
    assert len({n.label for n in ops}) == len(ops)


def test_unnamed_nodes_get_names():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])], "anon",
        [value_info("x", [2, 3], "float32")], [value_info("y", [2, 3], "float32")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ws = workbench.open(model)
    names = sorted(n.onnx_name for n in onnx_ops(ws.sdfg))
    assert all(names) and len(set(names)) == 2, names


def test_mlp_weights_are_not_baked_into_the_source(bundled):
    ws = bundled("mlp")
    weight_bytes = sum(w.nbytes for w in ws.model.weights.values())
    assert weight_bytes > 7_000_000
    build = ws.build()
    sources = [p for p in Path(build.folder).rglob("*")
               if p.is_file() and p.suffix in (".cpp", ".h", ".hpp", ".cu", ".c")]
    assert sources, f"no generated sources under {build.folder}"
    total = sum(p.stat().st_size for p in sources)
    assert total < weight_bytes / 50, f"generated sources hold {total} bytes"
    text = "\n".join(p.read_text(errors="replace") for p in sources)
    for array_name, value in ws.model.weights.items():
        flat = value.ravel()
        probe = float(flat[np.argmax(np.abs(flat))])  # the most distinctive number in it
        for spelled in (repr(probe), f"{probe:.6f}", f"{probe:.7g}", f"{probe:.9g}"):
            assert spelled not in text, f"a value of {array_name} ({spelled}) is in the source"
    for array_name in ws.model.weights:  # still arguments after expansion and simplify
        assert not build.sdfg.arrays[array_name].transient, array_name
    report = ws.verify()
    assert report.match, report.text()


# -- symbolic input dims ----------------------------------------------------
def _batch_model():
    return single_node_model("Relu", {"x": (["batch", 4], "float32")})


def test_symbolic_dim_without_a_value_is_a_shape_error():
    with pytest.raises(ShapeError, match="batch"):
        workbench.open(_batch_model())


@pytest.mark.parametrize("shapes", [{"batch": 2}, {"x": [2, 4]}], ids=["by_dim_name", "by_input"])
def test_symbolic_dim_fixed_by_input_shapes(shapes):
    ws = assert_matches_onnxruntime(_batch_model(), {"x": ([2, 4], "float32")},
                                    input_shapes=shapes)
    assert ws.model.inputs[0].shape == (2, 4)
    assert tuple(ws.sdfg.arrays[ws.model.inputs[0].sdfg_name].shape) == (2, 4)
    assert ws.model.outputs[0].shape == (2, 4)


def test_input_shapes_for_unknown_names_are_a_shape_error():
    with pytest.raises(ShapeError, match="nothere"):
        workbench.open(_batch_model(), input_shapes={"batch": 2, "nothere": 3})


# -- bad input --------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        workbench.open(tmp_path / "missing.onnx")
    with pytest.raises(ModelLoadError):
        workbench.open(str(tmp_path / "sub" / "missing"))


@pytest.mark.parametrize("content", [
    np.random.default_rng(0).bytes(4096),
    b"this is a text file, not a model\n" * 20,
    b"",
], ids=["random_bytes", "text", "empty"])
def test_not_an_onnx_file(tmp_path, content):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError):
        workbench.open(path)


def test_a_folder_is_not_a_model(tmp_path):
    with pytest.raises(ModelLoadError):
        workbench.open(tmp_path)


def _broken_model():
    """Reads a tensor nothing defines: the ONNX checker refuses it."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], "bad",
                              [value_info("x", [2], "float32")], [value_info("y", [2], "float32")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_model_failing_the_checker(tmp_path):
    with pytest.raises(ModelLoadError, match="checker"):
        workbench.open(_broken_model())
    path = tmp_path / "bad.onnx"
    path.write_bytes(_broken_model().SerializeToString())
    with pytest.raises(ModelLoadError, match="checker"):
        workbench.open(path)


def test_unknown_bundled_name():
    with pytest.raises(UnknownModelError) as err:
        workbench.open("no-such-model")
    assert "bert-layer" in str(err.value)  # tells the user what exists
    assert isinstance(err.value, BadInputError)


def _unsupported_model():
    """Two Multinomial nodes and one op from a custom domain, among supported ops."""
    f, i32 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32
    nodes = [helper.make_node("Relu", ["scores"], ["s"], name="relu"),
             helper.make_node("Multinomial", ["s"], ["keep_a"], name="nms_a"),
             helper.make_node("Multinomial", ["scores"], ["keep_b"], name="nms_b"),
             helper.make_node("FancyOp", ["boxes"], ["fancy"], name="fancy", domain="com.example")]
    graph = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("boxes", f, [1, 3, 4]),
         helper.make_tensor_value_info("scores", f, ["batch", 3])],
        [helper.make_tensor_value_info("keep_a", i32, [None, 1]),
         helper.make_tensor_value_info("keep_b", i32, [None, 1]),
         helper.make_tensor_value_info("fancy", f, [1, 3, 4])])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def test_unsupported_ops_are_listed_at_once_before_any_build(monkeypatch, tmp_path):
    def no_build(*args, **kwargs):
        raise AssertionError("compiled although the model has unsupported ops")

    monkeypatch.setattr("workbench.session.builds.compile_sdfg", no_build)
    # a cache of its own: the other test processes build into the shared one meanwhile
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKBENCH_UNIT_CACHE", str(tmp_path / "cache" / "units"))
    before = _built_files()
    model = _unsupported_model()
    onnx.checker.check_model(model)
    # The symbolic 'batch' is unset too: unsupported ops are reported first.
    with pytest.raises(UnsupportedOpError) as err:
        workbench.open(model)
    missing = err.value.missing
    assert len(missing) == 2, missing
    nms = next(k for k in missing if "Multinomial" in k)
    fancy = next(k for k in missing if "FancyOp" in k)
    assert sorted(missing[nms]) == ["nms_a", "nms_b"]
    assert missing[fancy] == ["fancy"]
    text = str(err.value)
    for word in ("Multinomial", "FancyOp", "nms_a", "nms_b", "fancy"):
        assert word in text
    assert "relu" not in missing and "Relu" not in missing
    assert _built_files() == before


# -- external data ----------------------------------------------------------
def _external_model(folder: Path, location: str, data: bytes = None) -> Path:
    """y = x + w, with w (4 floats) stored at ``location`` relative to the model."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "ext",
                              [value_info("x", [4], "float32")], [value_info("y", [4], "float32")],
                              initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.save would try to write the data
    return path


def test_external_data_inside_the_folder_loads(tmp_path):
    (tmp_path / "m" / "data").mkdir(parents=True)
    (tmp_path / "m" / "data" / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    ws = workbench.open(_external_model(tmp_path / "m", "data/w.bin"))
    (weight,) = ws.model.weights.values()
    np.testing.assert_array_equal(weight, np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("location", ["../../etc/passwd", "../w.bin", "/etc/passwd",
                                      "data/../../w.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    (tmp_path / "w.bin").write_bytes(bytes(16))
    with pytest.raises(UnsafeModelError, match="outside"):
        workbench.open(_external_model(tmp_path / "m", location))


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").symlink_to(tmp_path / "secret.bin")
    with pytest.raises(UnsafeModelError):
        workbench.open(_external_model(tmp_path / "m", "w.bin"))


def test_checks_and_inference_see_the_same_shapes_without_the_weights():
    """The checker and both inference engines run on the model's structure
    (weightless.py): every tensor of a real export (ResNet, 1.2 MB of weights) gets
    the same type and shape as with the weights; a weight whose data does not fit its
    dims is refused on the whole model first."""
    from workbench.importer.shapes import fix_input_shapes, symbolic_engine
    from workbench.importer.weightless import without_weights
    path = Path(__file__).parent / "exports" / "resnet.onnx"
    model = fix_input_shapes(onnx.load(str(path)), {"batch": 1})
    slim = without_weights(model, min_bytes=4096)
    big = [t.name for t in model.graph.initializer if len(t.raw_data) >= 4096]
    assert big and not {t.name for t in slim.graph.initializer} & set(big)
    assert slim.ByteSize() < model.ByteSize() / 5

    def types(m):
        return {v.name: v.type.SerializeToString() for v in m.graph.value_info}
    for infer in (lambda m: onnx.shape_inference.infer_shapes(m, data_prop=True),
                  lambda m: symbolic_engine().infer_shapes(m, auto_merge=False)):
        full, light = types(infer(model)), types(infer(slim))
        assert full and full == light

    # the data's size is checked on the whole model, before anything runs without it
    from workbench.importer.load import check_model
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    weight = next(t for t in broken.graph.initializer if t.name == big[0])
    weight.raw_data = weight.raw_data[:-4]
    with pytest.raises(ModelLoadError, match=f"tensor '{weight.name}' declares dims"):
        check_model(broken)


def test_incomplete_symbolic_inference_leaves_no_files_in_the_working_folder(tmp_path,
                                                                             monkeypatch):
    """onnxruntime's symbolic inference saves the model and its weights into the current
    folder when shapes stay unknown (a com.microsoft QGemm's here); importing must not."""
    from onnx_helpers import single_node_model
    rng = np.random.default_rng(0)
    inits = {"sa": np.array(0.1, np.float32), "za": np.array(3, np.uint8),
             "b": rng.integers(-60, 60, (8, 6)).astype(np.int8),
             "sb": np.array(0.02, np.float32), "zb": np.array(0, np.int8),
             "c": np.zeros(6, np.int32), "sy": np.array(0.5, np.float32),
             "zy": np.array(1, np.uint8)}
    model = single_node_model("QGemm", {"a": ((4, 8), np.uint8)}, initializers=inits,
                              domain="com.microsoft", outputs={"y": ((4, 6), np.uint8)})
    monkeypatch.chdir(tmp_path)
    workbench.open(model)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_fixed_batch_export_runs_at_another_batch():
    """The file declares batch 1 for its input, its output and value_info: given batch 3,
    the declared dims of every other tensor are stale and inference derives them again
    (a batch-1 MobileNetV2 export trained at batch 8 stopped the build before)."""
    from fusion_helpers import F32, graph_model, node, rand
    model = graph_model([node("Conv", ["x", "w"], ["c"]), node("Flatten", ["c"], ["f"]),
                         node("Gemm", ["f", "g"], ["y"], transB=1)],
                        {"x": ([1, 2, 4, 4], F32)}, ["y"],
                        {"w": rand(3, 2, 3, 3, seed=1), "g": rand(5, 12, seed=2)})
    model = onnx.shape_inference.infer_shapes(model)   # declared value_info for c and f
    assert model.graph.value_info
    ws = workbench.open(model, input_shapes={"x": [3, 2, 4, 4]})
    assert [o.shape for o in ws.outputs] == [(3, 5)]
    assert ws.verify().match
