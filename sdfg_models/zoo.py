"""The model zoo: every network the workbench is checked on, by name (``zoo:NAME``).

Three kinds of entries:

- ``bundled``: the models built here from numpy (``mlp``, ``bert-layer``, ...);
- ``export``: the real PyTorch exports committed in ``tests/exports/``
  (small versions of torchvision / HuggingFace architectures);
- ``full``: the same architectures at their published sizes (``NAME-full``),
  written by ``python tests/exports/make_exports.py --full NAME`` into
  ``$WORKBENCH_CACHE/zoo-full/`` (or ``$WORKBENCH_ZOO_FULL``) and never committed.

Each entry carries the input shapes to import it with (its symbolic dims
fixed), so ``workbench.open("zoo:bert")`` and ``python app.py verify zoo:bert``
need no ``--shape``. ``reference(entry)`` gives seeded inputs
(``workbench.runtime.reference.random_inputs``) and onnxruntime's outputs on them,
computed on first use and cached under ``$WORKBENCH_CACHE/zoo-reference/``.

    >>> from sdfg_models import zoo
    >>> zoo.get("gpt2").path()          # tests/exports/gpt2.onnx
    >>> inputs, outputs = zoo.reference(zoo.get("gpt2"))
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "zoo:"
EXPORTS = Path(__file__).resolve().parents[1] / "tests" / "exports"
GENERATOR = "tests/exports/make_exports.py"
QUANTIZER = "tests/exports/quantized_models.py"   # quantizes the float exports
_TEXT = {"batch": 1, "sequence": 16}
_TEXT_FULL = {"batch": 1, "sequence": 128}


@dataclass(frozen=True)
class ZooModel:
    name: str
    kind: str                  # "bundled", "export" or "full"
    about: str
    shapes: dict = field(default_factory=dict)  # input_shapes for workbench.open
    file: str = None           # the export's file stem (export and full)
    generator: str = GENERATOR  # the script that writes an export

    def path(self) -> Path:
        """The ONNX file (a bundled model is written to the cache first). A full-size
        model not generated yet raises ``ModelLoadError`` naming the command."""
        if self.kind == "bundled":
            import sdfg_models
            return sdfg_models.path_for(self.name)
        if self.kind == "export":
            return EXPORTS / f"{self.file}.onnx"
        path = full_folder() / f"{self.file}.onnx"
        if not path.is_file():
            from workbench.errors import ModelLoadError
            raise ModelLoadError(f"zoo model '{self.name}' has not been generated yet: run "
                                 f"'{generate_command(self)}' (needs torch) to write {path}.")
        return path

    def origin(self) -> str:
        """Where the file comes from, in words."""
        if self.kind == "bundled":
            return f"built from numpy by sdfg_models ({self.name})"
        if self.kind == "export":
            return f"tests/exports/{self.file}.onnx (python {self.generator} {self.file})"
        return f"{full_folder() / (self.file + '.onnx')} ({generate_command(self)})"

    def available(self) -> bool:
        return self.kind != "full" or (full_folder() / f"{self.file}.onnx").is_file()


def _export(name, about, shapes=None):
    return ZooModel(name, "export", about, dict(shapes or {}), name)


def _quantized(name, about):
    return ZooModel(name, "export", about, {}, name, QUANTIZER)


def _full(name, about, shapes=None, generator=GENERATOR):
    return ZooModel(f"{name}-full", "full", about, dict(shapes or {}), name, generator)


MODELS = [
    ZooModel("mlp", "bundled", "two Gemm+Relu layers"),
    ZooModel("bert-layer", "bundled", "one BERT-base encoder layer, 128 tokens"),
    ZooModel("mbconv", "bundled", "an EfficientNet-B0 MBConv block"),
    ZooModel("resblock", "bundled", "a ResNet basic block"),
    _export("resnet", "ResNet, narrowed, 64x64", {"batch": 1}),
    _export("mobilenetv2", "MobileNetV2, narrowed, 64x64"),
    _export("efficientnet_b0", "EfficientNet-B0 at 1/4 width, 64x64"),
    _export("squeezenet", "SqueezeNet 1.1 at half width, 64x64"),
    _export("vit", "ViT, one layer, 32x32", {"batch": 1}),
    _export("bert", "BERT (HuggingFace), two layers, 16 tokens", _TEXT),
    _export("gpt2", "GPT-2 (HuggingFace), one layer, 16 tokens", _TEXT),
    _export("unet", "U-Net, three levels, 32x32"),
    _export("densenet", "DenseNet, three dense blocks, 32x32"),
    _export("resnet_fp16", "ResNet, narrowed, 64x64, exported in float16", {"batch": 1}),
    _export("bert_fp16", "BERT (HuggingFace), two layers, 16 tokens, exported in float16",
            _TEXT),
    _export("lstm_tagger", "LSTM tagger (embedding, two-layer LSTM, Linear), 16 tokens", _TEXT),
    _export("gru_classifier", "bidirectional GRU classifier, 16 tokens", _TEXT),
    _export("control_flow", "scripted loop (ONNX Loop, 4 steps) and a data-dependent head "
            "(ONNX If)"),
    _export("t5_encoder", "T5 encoder (RMS norms, relative position bias, padded mask), two "
            "layers, 16 tokens", _TEXT),
    _export("whisper_encoder", "Whisper's audio encoder (HuggingFace's structure: stride-2 "
            "Conv stem, learned positions, pre-norm blocks), two layers, 64 frames "
            "(--symbolic frames keeps ((frames - 1)//2) + 1 positions a symbol)",
            {"batch": 1, "frames": 64}),
    _export("llama", "Llama-style decoder (RMS norms, rotary, grouped-query attention, SwiGLU, "
            "causal), two layers, 16 tokens, dynamo exporter (opset 20)"),
    _quantized("resnet_qdq", "resnet quantized by onnxruntime: static QDQ int8, per channel"),
    _quantized("bert_qdq", "bert quantized by onnxruntime: static QDQ int8, 16 tokens"),
    _quantized("bert_dynamic", "bert quantized by onnxruntime: dynamic int8 (MatMulInteger)"),
    _full("resnet", "ResNet-18, 224x224", {"batch": 1}),
    _full("mobilenetv2", "MobileNetV2, 224x224"),
    _full("efficientnet_b0", "EfficientNet-B0, 224x224"),
    _full("squeezenet", "SqueezeNet 1.1, 224x224"),
    _full("vit", "ViT-tiny (patch 16, dim 192, depth 12, 3 heads), 224x224", {"batch": 1}),
    _full("vit-depth3", "ViT-tiny with 3 layers, 224x224 (bench --interactive --scaling)",
          {"batch": 1}),
    _full("vit-depth6", "ViT-tiny with 6 layers, 224x224 (bench --interactive --scaling)",
          {"batch": 1}),
    _full("bert", "BERT-tiny (2 layers, hidden 128, 2 heads), 128 tokens", _TEXT_FULL),
    _full("bert-base-layer", "BERT-base embeddings, one layer (hidden 768, 12 heads), "
          "128 tokens", _TEXT_FULL),
    _full("gpt2", "GPT-2 small (12 layers, hidden 768) with an attention mask, 128 tokens",
          _TEXT_FULL),
    _full("unet", "U-Net (64-1024 channels, transposed convs), 224x224"),
    _full("densenet", "DenseNet-121, 224x224"),
    _full("t5_encoder", "T5-small's encoder (6 layers, hidden 512, 8 heads), 128 tokens",
          _TEXT_FULL),
    _full("whisper_encoder", "Whisper-tiny's audio encoder (4 layers, hidden 384, 6 heads), "
          "3000 frames (30 s of audio)", {"batch": 1, "frames": 3000}),
    _full("llama", "Llama-style decoder (4 layers, hidden 512, 8 heads, 2 KV heads, vocab "
          "32000), 128 tokens, dynamo exporter (opset 20)"),
    _full("llama_decode", "one decode step of that decoder (vocab 32000): a token and each "
          "layer's KV cache of 'past' positions in, the logits and the caches one position "
          "longer out (generate; open it with --symbolic past)", {"past": 16}),
    _full("llama_prefill", "that decoder's prompt read at once: the logits and each layer's "
          "KV cache out (generate --prefill)", {"sequence": 16}),
    # made from the full-size resnet and bert (generated first when missing)
    _full("resnet_qdq", "ResNet-18 quantized by onnxruntime: static QDQ int8, per channel, "
          "224x224", generator=QUANTIZER),
    _full("bert_qdq", "BERT-tiny quantized by onnxruntime: static QDQ int8, 128 tokens",
          generator=QUANTIZER),
    _full("bert_dynamic", "BERT-tiny quantized by onnxruntime: dynamic int8 (MatMulInteger), "
          "128 tokens", generator=QUANTIZER),
]
_BY_NAME = {m.name: m for m in MODELS}


def names(full: bool = None) -> list[str]:
    """Every zoo name; ``full=False``: the small ones only, ``full=True``: the full-size."""
    return [m.name for m in MODELS if full is None or (m.kind == "full") == full]


def is_zoo_name(text) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def get(name: str) -> ZooModel:
    """The entry ``name`` (with or without ``zoo:``); ``UnknownModelError`` listing them."""
    key = name[len(PREFIX):] if is_zoo_name(name) else name
    try:
        return _BY_NAME[key]
    except KeyError:
        from workbench.errors import UnknownModelError
        raise UnknownModelError(f"'{name}' is not in the model zoo; zoo models are "
                                f"{', '.join(PREFIX + n for n in names())}.") from None


def generate_command(model: ZooModel) -> str:
    return f"python {model.generator} --full {model.file}"


def cache_root() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE", "~/.cache/dace-workbench")).expanduser()


def full_folder() -> Path:
    """Where ``make_exports.py --full`` writes the full-size models: ``$WORKBENCH_ZOO_FULL``,
    else under the cache (a scratch ``WORKBENCH_CACHE`` for builds need not hide them)."""
    folder = os.environ.get("WORKBENCH_ZOO_FULL")
    return Path(folder).expanduser() if folder else cache_root() / "zoo-full"


def reference(model: ZooModel, seed: int = 0) -> tuple[dict, dict]:
    """(inputs, outputs): seeded inputs for the entry's shapes and onnxruntime's outputs
    on them, cached by the file's bytes, the shapes and the seed."""
    import numpy as np
    path = model.path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    tag = hashlib.sha256(json.dumps([digest, model.shapes, seed], sort_keys=True).encode())
    cached = cache_root() / "zoo-reference" / f"{model.name}-{tag.hexdigest()[:16]}.npz"
    if cached.is_file():
        with np.load(cached, allow_pickle=False) as data:
            inputs = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
            outputs = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
        return inputs, outputs
    inputs = seeded_inputs(path, model.shapes, seed)
    outputs = _onnxruntime(path, inputs)
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{model.name}.", suffix=".npz", dir=cached.parent)
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **{f"in:{k}": v for k, v in inputs.items()},
                 **{f"out:{k}": v for k, v in outputs.items()})
    os.replace(tmp, cached)
    return inputs, outputs


def seeded_inputs(path: Path, shapes: dict, seed: int = 0) -> dict:
    """The workbench's seeded inputs for the model at ``path`` with ``shapes`` fixed: the
    values ``workbench.open(path, input_shapes=shapes).random_inputs(seed)`` gives."""
    import onnx
    from onnx import helper
    from workbench.importer.shapes import fix_input_shapes, graph_inputs
    from workbench.runtime.reference import random_inputs
    fixed = fix_input_shapes(onnx.load(str(path), load_external_data=False), shapes)
    infos = [_Info(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
                   helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
             for i in graph_inputs(fixed)]
    return random_inputs(infos, seed)


@dataclass(frozen=True)
class _Info:
    onnx_name: str
    shape: tuple
    dtype: object


def _onnxruntime(path: Path, inputs: dict) -> dict:
    import onnx
    from workbench.runtime.reference import run_reference
    outputs, _ = run_reference(onnx.load(str(path)), inputs)
    return outputs
