"""Parsing and copying a model one initializer at a time (workbench/importer/pieces.py)
gives the very message protobuf gives whole."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from workbench.errors import ModelLoadError
from workbench.importer.load import load_model
from workbench.importer.pieces import copy_model, parse_model

EXPORTS = Path(__file__).resolve().parent / "exports"


@pytest.mark.parametrize("name", ["resnet", "bert", "gpt2", "lstm_tagger", "bert_qdq",
                                  "resnet_fp16"])
def test_the_zoos_exports_parse_to_the_same_message(name):
    data = (EXPORTS / f"{name}.onnx").read_bytes()
    whole = onnx.load_model_from_string(data)
    pieces = parse_model(data)
    assert pieces == whole and pieces.SerializeToString() == data
    assert len(pieces.graph.initializer) == len(whole.graph.initializer) > 0
    assert copy_model(pieces) == whole


def test_initializers_between_other_fields_keep_their_order():
    graph = onnx.GraphProto()
    graph.name = "g"
    for i in range(3):   # initializer, node, initializer, node, ... on the wire
        graph.initializer.append(numpy_helper.from_array(np.full(4, i, np.float32), f"w{i}"))
    graph.node.append(helper.make_node("Add", ["w0", "w1"], ["s"]))
    graph.output.append(helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [4]))
    g_bytes = b"".join(
        _field(5, t.SerializeToString()) + _field(1, n.SerializeToString())
        for t, n in zip(graph.initializer, list(graph.node) * 3)) + _field(2, b"g")
    model = helper.make_model(onnx.GraphProto())
    data = model.SerializeToString() + _field(7, g_bytes)
    assert parse_model(data) == onnx.load_model_from_string(data)
    assert [t.name for t in parse_model(data).graph.initializer] == ["w0", "w1", "w2"]


def test_a_truncated_file_is_a_clear_error(tmp_path):
    data = (EXPORTS / "resnet.onnx").read_bytes()
    bad = tmp_path / "cut.onnx"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        load_model(bad)


def _field(number: int, payload: bytes) -> bytes:
    from workbench.importer.pieces import _varint_bytes
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload
