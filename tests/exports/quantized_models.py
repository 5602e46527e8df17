"""Regenerate the quantized fixtures in this folder with onnxruntime's own quantization tool.

    python tests/exports/quantized_models.py [NAME ...]
    python tests/exports/quantized_models.py --full [NAME ...]   # full size, into the cache

Made from the float exports beside this file (``make_exports.py``), or with
``--full`` from the full-size ones in the zoo's full-size folder (ResNet-18 at
224x224, BERT-tiny at 128 tokens; ``make_exports.py --full resnet bert`` first)
into that folder, as a user quantizes a model: the input sizes fixed (batch 1,
16 or 128 tokens), then
``quant_pre_process`` (shape inference and onnxruntime's basic graph
optimizations), then

- ``resnet_qdq``: ``quantize_static`` in the QDQ format, int8 activations and
  per-channel int8 weights, calibrated (MinMax) on 8 seeded images;
- ``bert_qdq``: the same per-tensor on BERT, calibrated on 8 seeded token batches;
- ``bert_dynamic``: ``quantize_dynamic``, int8 weights: every MatMul becomes
  DynamicQuantizeLinear + MatMulInteger + the scale product.

Needs onnxruntime only (no torch); writes seeded, reproducible files.
"""
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quant_pre_process, quantize_dynamic, quantize_static)

HERE = Path(__file__).resolve().parent
BATCH = 1
CALIBRATION_SAMPLES = 8
# (image side, tokens, vocabulary) of the small fixtures and of the full-size models
SIZES = {False: (64, 16, 100), True: (224, 128, 30000)}


def _images(seed, side):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((BATCH, 3, side, side), dtype=np.float32)}
            for _ in range(CALIBRATION_SAMPLES)]


def _tokens(seed, tokens, vocab):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(CALIBRATION_SAMPLES):
        mask = np.ones((BATCH, tokens), np.int64)
        mask[:, rng.integers(tokens // 2, tokens + 1):] = 0
        out.append({"input_ids": rng.integers(0, vocab, (BATCH, tokens), dtype=np.int64),
                    "attention_mask": mask})
    return out


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def _static_dims(source: Path, dims: dict, out: Path):
    """The export with its symbolic dims (batch, sequence) fixed: calibration and the
    workbench then see one shape."""
    model = onnx.load(source)
    for value in list(model.graph.input) + list(model.graph.output):
        for d in value.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
    onnx.save(model, out)


def _prepared(source: Path, tokens: int, tmp: Path) -> Path:
    fixed, prepared = tmp / f"{source.stem}_fixed.onnx", tmp / f"{source.stem}_prep.onnx"
    _static_dims(source, {"batch": BATCH, "sequence": tokens}, fixed)
    quant_pre_process(str(fixed), str(prepared))
    return prepared


def static_qdq(source: str, feeds, per_channel: bool):
    def make(out: Path, tmp: Path, full: bool):
        side, tokens, vocab = SIZES[full]
        calibration = feeds(side) if source == "resnet" else feeds(tokens, vocab)
        quantize_static(str(_prepared(_float_export(source, full), tokens, tmp)), str(out),
                        _Feeds(calibration),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=per_channel,
                        reduce_range=True)
    return make


def dynamic(source: str):
    def make(out: Path, tmp: Path, full: bool):
        quantize_dynamic(str(_prepared(_float_export(source, full), SIZES[full][1], tmp)),
                         str(out), weight_type=QuantType.QInt8, reduce_range=True)
    return make


def _float_export(source: str, full: bool) -> Path:
    """The float model to quantize; a full-size one is exported first when missing."""
    path = _folder(full) / f"{source}.onnx"
    if full and not path.is_file():
        import make_exports  # needs torch
        make_exports.export(source, full=True)
    return path


def _folder(full: bool) -> Path:
    if not full:
        return HERE
    sys.path.insert(0, str(HERE.parents[1]))
    from sdfg_models import zoo
    return zoo.full_folder()


FIXTURES = {
    "resnet_qdq": static_qdq("resnet", lambda side: _images(0, side), per_channel=True),
    "bert_qdq": static_qdq("bert", lambda tokens, vocab: _tokens(0, tokens, vocab),
                           per_channel=False),
    "bert_dynamic": dynamic("bert"),
}


def main(argv):
    full = "--full" in argv
    names = [a for a in argv if a != "--full"]
    for name in names or FIXTURES:
        with tempfile.TemporaryDirectory() as tmp:
            out = _folder(full) / f"{name}.onnx"
            FIXTURES[name](out, Path(tmp), full)
        model = onnx.load(out)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{out.name}: {out.stat().st_size / 1e6:.2f} MB, {len(model.graph.node)} nodes: "
              f"{', '.join(ops)}")


if __name__ == "__main__":
    main(sys.argv[1:])
