"""Reading an ONNX file safely: parse, check, refuse escaping or oversized data.

Order matters: sizes are checked before anything that size is read, paths
before any file outside the model's folder is opened, and the graph's
structure (validate.py) before onnx's checker and shape inference walk it.
"""
import logging
import os
from pathlib import Path

import onnx
from onnx import external_data_helper

from workbench.errors import ModelLoadError, UnsafeModelError
from workbench.importer.budget import check_budget
from workbench.importer.pieces import parse_model
from workbench.importer.validate import element_count, itemsize, validate_graph
from workbench.importer.weightless import without_weights

log = logging.getLogger(__name__)


def load_model(path, memory_budget=None) -> onnx.ModelProto:
    """Load and check ``path``; external data must stay inside its folder."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"model file '{path}' does not exist: give a path to an .onnx "
                             f"file or a bundled model name.")
    if path.is_dir():
        raise ModelLoadError(f"'{path}' is a folder, not an ONNX file.")
    check_budget({str(path): path.stat().st_size}, memory_budget, f"reading '{path}'", "")
    try:
        model = parse_model(path.read_bytes())   # the weights one at a time: see pieces.py
    except Exception as e:  # protobuf raises several unrelated types
        raise ModelLoadError(f"'{path}' is not a readable ONNX model ({type(e).__name__}: "
                             f"{first_line(e)}). Check that the file is an ONNX protobuf "
                             f"and is not truncated.") from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"'{path}' holds no ONNX graph (no nodes, no outputs); "
                             f"is it really an ONNX file?")
    check_external_data(model, path.parent, memory_budget)
    if any(external_data_helper.uses_external_data(t) for t in _all_tensors(model)):
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as e:
            raise ModelLoadError(f"external data of '{path}' cannot be read: "
                                 f"{first_line(e)}") from None
    check_model(model, str(path))
    return model


def check_model(model: onnx.ModelProto, where: str = "the model") -> None:
    """Our structural checks (they name the node), onnx's checker, then onnx's strict
    type and shape inference (a Gemm fed booleans, a declared shape the graph
    contradicts, an attribute value the op cannot take)."""
    validate_graph(model, where)
    model = without_weights(model)   # what the checks read, without the GIL-bound copy
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelLoadError(f"{where} fails the ONNX checker: {first_line(e).rstrip('.')}. "
                             f"Re-export it or repair it with onnx tools.") from None
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                          data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        errors = model_inference_errors(str(e))
        if errors:
            raise ModelLoadError(f"{where} fails ONNX type and shape inference: "
                                 f"{'; '.join(errors[:3])[:600]}. Re-export it or repair it "
                                 f"with onnx tools.") from None
        log.info("onnx inference inside a function body failed: %s", e)
    except Exception as e:  # noqa: BLE001 (inference crashing is onnx's gap, not the model's)
        log.info("onnx strict inference failed: %s", e)


def model_inference_errors(text: str) -> list:
    """The errors of onnx's strict inference that are the model's, one per node.

    Errors inside a function body (an op's expansion: onnx's own gap, as for
    MeanVarianceNormalization's Constant) nest a second "Inference error(s)"
    and are left out, and so are the echoes in the nodes downstream.
    """
    _, _, body = text.partition("Inference error(s):")
    lines = [" ".join(line.split()) for line in (body or text).splitlines() if line.strip()]
    errors = [line for line in lines if "Inference error(s):" not in line]
    # Nodes after the first failing one report that their input has no type: an echo.
    causes = [line for line in errors if "expected to have type but instead is null" not in line]
    return causes or errors


def check_external_data(model: onnx.ModelProto, folder: Path, memory_budget=None) -> None:
    """Paths stay in ``folder``; offsets and lengths fit the file and the dims; the
    total fits the memory budget. Nothing is read."""
    root = folder.resolve()
    sizes = {}
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
        if not target.is_file():
            raise ModelLoadError(f"tensor '{tensor.name}' stores its data at '{location}', "
                                 f"which is not a file in '{root}'. Put the data file next to "
                                 f"the model.")
        offset, length = _int_field(tensor, info, "offset"), _int_field(tensor, info, "length")
        available = target.stat().st_size - (offset or 0)
        size = itemsize(tensor.data_type)
        want = element_count(tensor) * size if size else None
        if length is None:
            length = want if want is not None else available
        if available < 0 or length > available or (want is not None and length != want):
            raise ModelLoadError(
                f"tensor '{tensor.name}' claims {length if length is not None else '?'} bytes "
                f"at offset {offset or 0} of '{location}' (dims {list(tensor.dims)} need "
                f"{want if want is not None else '?'}), but the file holds "
                f"{target.stat().st_size} bytes. The data file does not belong to this "
                f"model or is truncated.")
        sizes[tensor.name] = length
    if sizes:
        check_budget(sizes, memory_budget, "the model's external data", "")


def _int_field(tensor, info, key):
    if key not in info:
        return None
    try:
        value = int(info[key])
    except ValueError:
        value = -1
    if value < 0:
        raise ModelLoadError(f"tensor '{tensor.name}' has external data {key} "
                             f"'{info[key]}', which is not a byte count.")
    return value


def _all_tensors(model):
    yield from external_data_helper._get_all_tensors(model)


def first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]

