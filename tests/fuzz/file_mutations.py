"""Mutations of the file itself: bytes cut or flipped, not ONNX at all, external
data pointing where it must not."""
from __future__ import annotations

import gzip
import io
import zipfile

from onnx import TensorProto, numpy_helper

from tests.fuzz.mutant import MODEL_FILE, OUTSIDE_FILE, Mutant, _one, _save


# -- byte-level ---------------------------------------------------------------

def truncate(model, rng):
    data = model.SerializeToString()
    cut = _one(rng, [rng.randrange(0, 64), rng.randrange(len(data)),
                     len(data) - rng.randrange(1, 256)])
    return Mutant("truncate", f"first {cut} of {len(data)} bytes", {MODEL_FILE: data[:cut]})


def flip_bytes(model, rng):
    """Flip bytes, mostly in the protobuf structure rather than in weight payloads."""
    data = bytearray(model.SerializeToString())
    payload = []
    for t in model.graph.initializer:
        if len(t.raw_data) > 64:
            at = bytes(data).find(t.raw_data)
            if at >= 0:
                payload.append((at, at + len(t.raw_data)))
    payload.sort()
    structure, pos = [], 0
    for a, b in payload:
        if a > pos:
            structure.append((pos, a))
        pos = max(pos, b)
    structure.append((pos, len(data)))
    flips = []
    for _ in range(rng.randint(1, 8)):
        if payload and rng.random() < 0.1:
            a, b = _one(rng, payload)
        else:
            weights = [b - a for a, b in structure]
            a, b = rng.choices(structure, weights=weights)[0]
        at = rng.randrange(a, b)
        data[at] = data[at] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
        flips.append(at)
    return Mutant("flip_bytes", f"bytes at {sorted(flips)} of {len(data)}", {MODEL_FILE: bytes(data)})


def not_onnx(model, rng):
    data = model.SerializeToString()
    variant = rng.randrange(8)
    if variant == 0:
        body, note = b"", "empty file"
    elif variant == 1:
        body, note = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))), "random bytes"
    elif variant == 2:
        body, note = b"ir_version: 8\ngraph { name: 'x' }\n", "protobuf text format"
    elif variant == 3:
        body, note = b"\x89PNG\r\n\x1a\n" + bytes(64), "a PNG header"
    elif variant == 4:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("model.onnx", data[:4096])
        body, note = buf.getvalue(), "a zip archive"
    elif variant == 5:
        body, note = gzip.compress(data[:65536]), "gzip of the model's start"
    elif variant == 6:
        # Field 7 (graph), length-delimited, claiming ~2 GiB that are not there.
        body, note = bytes([0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0x07]) + data[:128], "graph length 2 GiB"
    else:
        # Protobuf merges a repeated message: every node and initializer twice.
        body, note = data + data, "the model serialized twice, concatenated"
    return Mutant("not_onnx", note, {MODEL_FILE: body})


# -- external data ------------------------------------------------------------

_ESCAPES = ["../../etc/passwd", "/etc/passwd", f"../{OUTSIDE_FILE}",
            f"sub/../../{OUTSIDE_FILE}", "/proc/self/mem", "./../" + OUTSIDE_FILE]


def external_data(model, rng):
    """One initializer moved to external data, with a path that escapes or lies."""
    g = model.graph
    t = _one(rng, [t for t in g.initializer if t.raw_data] or list(g.initializer))
    raw = numpy_helper.to_array(t).tobytes()
    t.ClearField("raw_data")
    for f in ("float_data", "int32_data", "int64_data", "double_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    files, links = {}, {}
    variant = rng.randrange(6)
    location, extra = "weights.bin", {}
    if variant == 0:
        location = _one(rng, _ESCAPES)
        note = f"{t.name} at {location}"
    elif variant == 1:
        location = "link.bin"
        links["link.bin"] = _one(rng, ["/etc/passwd", f"../{OUTSIDE_FILE}"])
        note = f"{t.name} at a symlink to {links['link.bin']}"
    elif variant == 2:
        location = _one(rng, ["missing.bin", "", ".", "sub/"])
        note = f"{t.name} at {location!r}, which is no file"
    elif variant == 3:
        files["weights.bin"] = raw
        extra = _one(rng, [{"offset": str(len(raw) + 10)}, {"length": str(10 ** 12)},
                           {"offset": "-8"}, {"length": "abc"}, {"length": str(len(raw) // 2)}])
        note = f"{t.name} in weights.bin with {extra}"
    elif variant == 4:
        files["weights.bin"] = raw
        del t.dims[:]
        t.dims.extend([10 ** 6, 10 ** 6])
        note = f"{t.name} in weights.bin, dims claim 1e12 elements"
    else:
        files["weights.bin"] = raw
        note = f"{t.name} in weights.bin, correct (harmless)"
    del t.external_data[:]
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return _save("external_data", note, model, files=files, links=links)
