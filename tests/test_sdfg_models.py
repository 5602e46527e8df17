"""Tests for the bundled ONNX model builders in ``sdfg_models``."""
from __future__ import annotations

import collections
import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import sdfg_models

NAMES = ["mlp", "bert-layer", "mbconv", "resblock"]
IO = {  # input name, input shape, output shape
    "mlp": ("input", [64, 784], [64, 10]),
    "bert-layer": ("hidden_states", [1, 128, 768], [1, 128, 768]),
    "mbconv": ("input", [1, 40, 28, 28], [1, 40, 28, 28]),
    "resblock": ("input", [1, 64, 56, 56], [1, 64, 56, 56]),
}


@functools.lru_cache(maxsize=None)
def _bytes(name: str) -> bytes:
    return sdfg_models.build(name).SerializeToString()


def _model(name: str) -> onnx.ModelProto:
    return onnx.load_from_string(_bytes(name))


def _ops(name: str) -> collections.Counter:
    return collections.Counter(n.op_type for n in _model(name).graph.node)


def _dims(value_info) -> list[int]:
    return [d.dim_value for d in value_info.type.tensor_type.shape.dim]


def _run(name: str) -> np.ndarray:
    model = _model(name)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    x = np.random.default_rng(0).standard_normal(_dims(model.graph.input[0]), dtype=np.float32)
    (out,) = sess.run(None, {inp.name: x})
    return out


def test_registry():
    assert sdfg_models.names() == NAMES
    assert set(sdfg_models.BUNDLED) == set(NAMES)
    assert sdfg_models.DEFAULT_MODEL == "bert-layer"
    assert sdfg_models.DEFAULT_MODEL in sdfg_models.BUNDLED


@pytest.mark.parametrize("name", NAMES)
def test_builds_and_passes_checker(name):
    model = sdfg_models.build(name)
    assert isinstance(model, onnx.ModelProto)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert model.doc_string.strip()
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in model.graph.initializer)
    assert len({n.name for n in model.graph.node}) == len(model.graph.node)


@pytest.mark.parametrize("name", NAMES)
def test_inputs_and_outputs(name):
    in_name, in_shape, out_shape = IO[name]
    graph = _model(name).graph
    assert [i.name for i in graph.input] == [in_name]
    assert _dims(graph.input[0]) == in_shape
    assert [o.name for o in graph.output] == ["output"]
    assert _dims(graph.output[0]) == out_shape


@pytest.mark.parametrize("name", NAMES)
def test_byte_identical_across_builds(name):
    assert sdfg_models.build(name).SerializeToString() == _bytes(name)


@pytest.mark.parametrize("name", NAMES)
def test_runs_in_onnxruntime(name):
    out = _run(name)
    assert list(out.shape) == IO[name][2]
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    assert 0.05 <= float(out.std()) <= 50.0


def test_bert_layer_ops():
    ops = _ops("bert-layer")
    for op in ["Shape", "Gather", "Concat", "Reshape", "Transpose", "Softmax",
               "LayerNormalization", "Erf", "MatMul"]:
        assert ops[op] > 0, op
    graph = _model("bert-layer").graph
    # At least one Reshape target is computed by a Shape -> Gather -> ... -> Concat chain.
    producer = {o: n for n in graph.node for o in n.output}
    targets = [producer.get(n.input[1]) for n in graph.node if n.op_type == "Reshape"]
    assert any(t is not None and t.op_type == "Concat" for t in targets)
    names = {n.name for n in graph.node}
    assert {"/attention/self/query/MatMul", "/attention/self/Reshape", "/attention/self/Softmax"} <= names
    ln = [n for n in graph.node if n.op_type == "LayerNormalization"]
    assert len(ln) == 2
    for node in ln:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["axis"] == -1 and attrs["epsilon"] == pytest.approx(1e-12)


def test_mbconv_ops():
    graph = _model("mbconv").graph
    ops = _ops("mbconv")
    assert ops["GlobalAveragePool"] == 1 and ops["Sigmoid"] > 0
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    grouped = []
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        group = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}.get("group", 1)
        if group > 1:
            grouped.append((group, shapes[node.input[1]][0]))
    assert grouped == [(240, 240)]


def test_mlp_uses_gemm_transb():
    graph = _model("mlp").graph
    gemms = [n for n in graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 3
    for node in gemms:
        assert {a.name: a.i for a in node.attribute if a.name == "transB"} == {"transB": 1}


def test_unknown_name_raises_key_error_naming_valid_names():
    with pytest.raises(KeyError) as info:
        sdfg_models.build("no-such-model")
    message = str(info.value)
    assert "no-such-model" in message
    for name in NAMES:
        assert name in message
    with pytest.raises(KeyError):
        sdfg_models.path_for("no-such-model")


def test_path_for_writes_once_and_repairs(tmp_path):
    folder = tmp_path / "models"
    path = sdfg_models.path_for("resblock", folder)
    assert path == folder / "resblock.onnx"
    assert path.read_bytes() == _bytes("resblock")
    inode = path.stat().st_ino
    assert sdfg_models.path_for("resblock", folder) == path
    assert path.stat().st_ino == inode  # identical bytes: not rewritten
    path.write_bytes(b"stale")
    assert sdfg_models.path_for("resblock", str(folder)).read_bytes() == _bytes("resblock")
    assert sorted(p.name for p in folder.iterdir()) == ["resblock.onnx"]  # no temp files left


def test_path_for_default_folder_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    path = sdfg_models.path_for("mbconv")
    assert path == tmp_path / "cache" / "models" / "mbconv.onnx"
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
