"""DaCe Workbench: see and cut data movement in neural networks.

``ws = workbench.open("model.onnx")`` (or a bundled name such as
``"bert-layer"``) imports a model into an SDFG and returns a Session.
"""
from pathlib import Path

from workbench.errors import (BadInputError, BuildError, CheckFailed, CompileError,
                              ModelLoadError, UnknownModelError, UnsupportedCaseError,
                              UnsupportedOpError, UntrustedSDFGError, WorkbenchError)
from workbench.runtime import threads  # noqa: F401 (OpenMP settings before any program loads)
from workbench.progress import SILENT

__all__ = ["open", "open_session", "from_torch", "resolve_model", "Session", "WorkbenchError", "BadInputError", "CheckFailed",
           "BuildError", "ModelLoadError", "UnknownModelError", "UnsupportedOpError",
           "UnsupportedCaseError", "CompileError", "UntrustedSDFGError"]


def resolve_model(path_or_name) -> Path:
    """A file path, the path of a bundled model written to the cache, or of a zoo model
    (``zoo:NAME``, see sdfg_models/zoo.py)."""
    import sdfg_models
    from sdfg_models import zoo
    text = str(path_or_name)
    if zoo.is_zoo_name(text):
        return zoo.get(text).path()
    if text in sdfg_models.names():
        return sdfg_models.path_for(text)
    path = Path(text).expanduser()
    if path.exists() or any(s in text for s in ("/", "\\")) or path.suffix:
        return path
    raise UnknownModelError(f"'{text}' is neither a file nor a bundled model; bundled models "
                            f"are {', '.join(sdfg_models.names())}; zoo models are "
                            f"zoo:NAME ({', '.join(zoo.names(full=False))}).")


def from_torch(module, example_inputs, name: str = None, **kwargs):
    """Export a torch.nn.Module to ONNX (opset 17, legacy exporter) and open it."""
    from workbench.frontends.torch import from_torch as _from_torch
    return _from_torch(module, example_inputs, name=name, **kwargs)


def open_session(folder, progress=SILENT, trust: bool = None):
    """Reopen a session folder written by ``Session.save`` / ``open(..., session_dir=)``;
    it keeps autosaving there.

    A folder whose SDFGs this workbench did not write raises
    ``UntrustedSDFGError`` unless ``trust`` (see ``workbench.session.signing``).
    """
    from workbench.session import signing as provenance
    from workbench.session import Session
    trust = provenance.trust_by_default() if trust is None else trust
    return Session.open_folder(folder, progress, trust=trust)


def source_name(model) -> str:
    """What a session opened from ``model`` keeps as its source: a bundled or zoo
    model's name, else the file's resolved path."""
    if str(model) in _bundled() or _is_zoo(model):
        return str(model)
    return str(resolve_model(model).resolve())


def open(model, input_shapes: dict = None, name: str = None, progress=SILENT,  # noqa: A001
         session_dir=None, memory_budget=None, trust: bool = None, symbolic=()):
    """Import a model and return a Session over it.

    ``model`` is a path to an .onnx file, a bundled model name (``"mlp"``,
    ``"bert-layer"``, ...) or an ``onnx.ModelProto``. ``input_shapes`` fixes
    symbolic dims: ``{"input": [1, 3, 224, 224]}`` or ``{"batch": 1}``.
    ``symbolic`` names symbolic dims (``["batch"]``) kept as symbols of one program for
    every size; ``input_shapes`` then gives their default sizes.
    With ``session_dir`` the session autosaves there after every step.
    ``memory_budget`` (bytes, or a size such as ``"16G"``; default
    ``$WORKBENCH_MEMORY_BUDGET`` or 8 GiB) refuses a model whose tensors need
    more, before allocating them.

    A session folder opens at its current step without writing into it
    (``open_session`` keeps saving there); ``trust`` is as in ``open_session``.
    """
    import onnx
    from workbench.importer import import_model
    from workbench.session import Session
    if isinstance(model, onnx.ModelProto):
        source = model
    else:
        source = resolve_model(model)
        if source.is_dir() and (source / "session.json").is_file():
            return _open_session_folder(source, input_shapes, progress, trust, session_dir)
        if source.suffix.lower() in (".sdfg", ".sdfgz"):
            raise BadInputError(
                f"'{source}' is an SDFG file; the workbench opens SDFGs only inside session "
                f"folders, which keep the ONNX model they are checked against. Open the session "
                f"folder (or the .onnx model) instead.")
        if _is_zoo(model):  # its entry fixes the symbolic dims; given shapes win
            from sdfg_models import zoo
            entry = zoo.get(model)
            input_shapes, name = {**entry.shapes, **(input_shapes or {})}, name or entry.name
        name = name or (str(model) if str(model) in _bundled() else source.stem)
    imported = import_model(source, input_shapes=input_shapes, name=name, progress=progress,
                            memory_budget=memory_budget, symbolic=symbolic)
    ws = Session(imported, progress)
    if not isinstance(model, onnx.ModelProto):
        ws.source = source_name(model)
    if session_dir is not None:
        ws.save(session_dir)
    return ws


def _open_session_folder(folder, input_shapes, progress, trust, session_dir):
    from workbench.session import signing as provenance
    from workbench.session import Session
    if input_shapes:
        raise BadInputError(f"'{folder}' is a session folder: its input shapes are fixed; "
                            f"leave out the shapes (--shape).")
    trust = provenance.trust_by_default() if trust is None else trust
    ws = Session.open_folder(folder, progress, trust=trust, autosave=False)
    if session_dir is not None:
        ws.save(session_dir)
    return ws


def _is_zoo(model) -> bool:
    from sdfg_models import zoo
    return zoo.is_zoo_name(model)


def _bundled():
    import sdfg_models
    return sdfg_models.names()


def __getattr__(name):
    if name == "Session":
        from workbench.session import Session
        return Session
    raise AttributeError(name)
