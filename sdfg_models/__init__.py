"""Bundled ONNX models for the workbench, built deterministically from numpy.

Four small networks that exercise the importer and the transformations:
``mlp`` (Gemm + Relu), ``bert-layer`` (one BERT-base encoder layer as the
PyTorch exporter writes it, shape chains included), ``mbconv`` (an
EfficientNet-B0 block with depthwise conv and squeeze-excite) and
``resblock`` (a ResNet basic block). All are opset 17, IR version 8, float32,
with random weights from a fixed seed: two builds give the same bytes.

    >>> import sdfg_models
    >>> model = sdfg_models.build("mlp")
    >>> path = sdfg_models.path_for("bert-layer")   # cached .onnx file
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import onnx

from . import bert_layer, mbconv, mlp, resblock

BUNDLED: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": mlp.build,
    "bert-layer": bert_layer.build,
    "mbconv": mbconv.build,
    "resblock": resblock.build,
}
DEFAULT_MODEL = "bert-layer"

__all__ = ["BUNDLED", "DEFAULT_MODEL", "build", "names", "path_for", "default_folder"]


def names() -> list[str]:
    """The short names of the bundled models."""
    return list(BUNDLED)


def build(name: str) -> onnx.ModelProto:
    """Build the bundled model ``name``; ``KeyError`` (listing valid names) if unknown."""
    try:
        builder = BUNDLED[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown bundled model {name!r}; valid names: {', '.join(BUNDLED)}") from None
    return builder()


def default_folder() -> Path:
    """``$WORKBENCH_CACHE/models`` (default cache ``~/.cache/dace-workbench``)."""
    return Path(os.environ.get("WORKBENCH_CACHE", "~/.cache/dace-workbench")).expanduser() / "models"


def path_for(name: str, folder: str | os.PathLike | None = None) -> Path:
    """Write model ``name`` to ``<folder>/<name>.onnx`` unless it already holds the
    same bytes, atomically (temporary file + ``os.replace``); return the path."""
    data = build(name).SerializeToString()
    folder = Path(folder).expanduser() if folder is not None else default_folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return path
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".onnx.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
