"""Parsing and copying a model one initializer at a time.

protobuf parses and copies a message in one C call with the GIL held: for
GPT-2 small (653 MB of weights) ``onnx.load`` held it for 1-2 s and each
whole-model ``CopyFrom`` for about half a second, and the window that
imported the model froze for as long (``python -m tests.gui_latency --model
zoo:gpt2-full``). Here the model is parsed without its initializers (one
short call), then each initializer on its own; a copy is made the same way.
Between two calls the GIL can go to the UI thread, so the longest hold is
the largest single tensor (154 MB for GPT-2's token embedding).

The result is the same message: protobuf merges repeated fields in the order
they come, and each initializer is parsed from its own bytes (tested against
``onnx.load_model_from_string`` on the zoo's exports).
"""
import onnx

from workbench.importer.weightless import copy_fields

_MODEL_GRAPH = 7         # ModelProto.graph
_GRAPH_INITIALIZER = 5   # GraphProto.initializer
_LEN = 2                 # wire type: length-delimited


def parse_model(data: bytes) -> onnx.ModelProto:
    """``data`` (a serialized ModelProto) parsed, its graph's initializers one at a time.
    Raises ``onnx``'s and protobuf's own errors on a malformed message, as
    ``onnx.load_model_from_string`` does; a message this reader cannot split is parsed
    whole."""
    try:
        rest, spans = _split(data)
    except ValueError:   # not a message this reader follows: let protobuf judge it
        return onnx.load_model_from_string(data)
    model = onnx.ModelProto()
    model.ParseFromString(rest)
    initializers = model.graph.initializer
    for start, end in spans:
        initializers.add().ParseFromString(data[start:end])
    return model


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model``, its initializers copied one at a time."""
    copy = onnx.ModelProto()
    copy_fields(model, copy, skip=("graph",))
    copy_fields(model.graph, copy.graph, skip=("initializer",))
    for tensor in model.graph.initializer:
        copy.graph.initializer.append(tensor)
    return copy


def _split(data: bytes):
    """(the model's bytes without its graph's initializers, [(start, end) of each
    initializer's message]); ValueError when the bytes are not a well-formed message."""
    rest, spans = [], []
    for number, wire, start, value_start, end in _fields(data, 0, len(data)):
        if number == _MODEL_GRAPH and wire == _LEN:
            graph = []
            for n, w, s, vs, e in _fields(data, value_start, end):
                if n == _GRAPH_INITIALIZER and w == _LEN:
                    spans.append((vs, e))
                else:
                    graph.append(data[s:e])
            body = b"".join(graph)
            rest.append(_varint_bytes(number << 3 | _LEN) + _varint_bytes(len(body)) + body)
        else:
            rest.append(data[start:end])
    return b"".join(rest), spans


def _fields(data: bytes, pos: int, end: int):
    """(number, wire type, field start, value start, field end) of each field in
    ``data[pos:end]``."""
    while pos < end:
        start = pos
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            _, after = _varint(data, pos, end)
        elif wire == 1:
            after = pos + 8
        elif wire == _LEN:
            length, pos = _varint(data, pos, end)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:   # groups (3, 4) are not used by ONNX
            raise ValueError(f"wire type {wire}")
        if after > end:
            raise ValueError("truncated")
        yield number, wire, start, pos, after
        pos = after


def _varint(data: bytes, pos: int, end: int):
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("bad varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
