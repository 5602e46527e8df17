"""Reading an ONNX file safely: parse, check, refuse escaping external data."""
import os
from pathlib import Path

import onnx
from onnx import external_data_helper

from workbench.errors import ModelLoadError, UnsafeModelError


def load_model(path) -> onnx.ModelProto:
    """Load and check ``path``; external data must stay inside its folder."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"model file '{path}' does not exist: give a path to an .onnx "
                             f"file or a bundled model name.")
    if path.is_dir():
        raise ModelLoadError(f"'{path}' is a folder, not an ONNX file.")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf raises several unrelated types
        raise ModelLoadError(f"'{path}' is not a readable ONNX model ({type(e).__name__}: "
                             f"{_first_line(e)}). Check that the file is an ONNX protobuf "
                             f"and is not truncated.") from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"'{path}' holds no ONNX graph (no nodes, no outputs); "
                             f"is it really an ONNX file?")
    check_external_data(model, path.parent)
    if any(external_data_helper.uses_external_data(t) for t in _all_tensors(model)):
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as e:
            raise ModelLoadError(f"external data of '{path}' cannot be read: "
                                 f"{_first_line(e)}") from None
    check_model(model, str(path))
    return model


def check_model(model: onnx.ModelProto, where: str = "the model") -> None:
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelLoadError(f"{where} fails the ONNX checker: {_first_line(e)}. "
                             f"Re-export it or repair it with onnx tools.") from None


def check_external_data(model: onnx.ModelProto, folder: Path) -> None:
    root = folder.resolve()
    for tensor in _all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (root / location).resolve()
        if os.path.isabs(location) or root not in (target, *target.parents):
            raise UnsafeModelError(
                f"tensor '{tensor.name}' stores its data at '{location}', outside the "
                f"model's folder '{root}'. External data must live next to the model; "
                f"move the data file there and fix the path.")


def _all_tensors(model):
    yield from external_data_helper._get_all_tensors(model)


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]
