"""DaCe Workbench: see and cut data movement in neural networks.

``ws = workbench.open("model.onnx")`` (or a bundled name such as
``"bert-layer"``) imports a model into an SDFG and returns a Session.
"""
from pathlib import Path

from workbench.errors import (BadInputError, BuildError, CheckFailed, ModelLoadError,
                              UnknownModelError, UnsupportedCaseError, UnsupportedOpError,
                              WorkbenchError)
from workbench import threads  # noqa: F401 (OpenMP settings before any program loads)
from workbench.progress import SILENT

__all__ = ["open", "open_session", "from_torch", "resolve_model", "Session", "WorkbenchError", "BadInputError", "CheckFailed",
           "BuildError", "ModelLoadError", "UnknownModelError", "UnsupportedOpError",
           "UnsupportedCaseError"]


def resolve_model(path_or_name) -> Path:
    """A file path, or the path of a bundled model written to the cache."""
    import sdfg_models
    text = str(path_or_name)
    if text in sdfg_models.names():
        return sdfg_models.path_for(text)
    path = Path(text).expanduser()
    if path.exists() or any(s in text for s in ("/", "\\")) or path.suffix:
        return path
    raise UnknownModelError(f"'{text}' is neither a file nor a bundled model; bundled models "
                            f"are {', '.join(sdfg_models.names())}.")


def from_torch(module, example_inputs, name: str = None, **kwargs):
    """Export a torch.nn.Module to ONNX (opset 17, legacy exporter) and open it."""
    from workbench.torch_frontend import from_torch as _from_torch
    return _from_torch(module, example_inputs, name=name, **kwargs)


def open_session(folder, progress=SILENT):
    """Reopen a session folder written by ``Session.save`` / ``open(..., session_dir=)``."""
    from workbench.persist import open_session as _open_session
    return _open_session(folder, progress)


def open(model, input_shapes: dict = None, name: str = None, progress=SILENT,  # noqa: A001
         session_dir=None):
    """Import a model and return a Session over it.

    ``model`` is a path to an .onnx file, a bundled model name (``"mlp"``,
    ``"bert-layer"``, ...) or an ``onnx.ModelProto``. ``input_shapes`` fixes
    symbolic dims: ``{"input": [1, 3, 224, 224]}`` or ``{"batch": 1}``.
    With ``session_dir`` the session autosaves there after every step.
    """
    import onnx
    from workbench.importer import import_model
    from workbench.session import Session
    if isinstance(model, onnx.ModelProto):
        source = model
    else:
        source = resolve_model(model)
        name = name or (str(model) if str(model) in _bundled() else source.stem)
    imported = import_model(source, input_shapes=input_shapes, name=name, progress=progress)
    ws = Session(imported, progress)
    if not isinstance(model, onnx.ModelProto):
        ws.source = str(model) if str(model) in _bundled() else str(Path(source).resolve())
    if session_dir is not None:
        ws.save(session_dir)
    return ws


def _bundled():
    import sdfg_models
    return sdfg_models.names()


def __getattr__(name):
    if name == "Session":
        from workbench.session import Session
        return Session
    raise AttributeError(name)
