"""Static shapes for every tensor: fixed inputs, then shape inference."""
import contextlib
import logging
import sys
import warnings
from pathlib import Path

import onnx
from onnx import TensorProto

from workbench.errors import ShapeError
from workbench.importer.budget import check_budget, tensor_bytes
from workbench.importer.pieces import copy_model
from workbench.importer.weightless import without_weights

log = logging.getLogger(__name__)


def graph_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs the user feeds (initializers excluded)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def fix_input_shapes(model: onnx.ModelProto, given: dict = None,
                     keep=()) -> onnx.ModelProto:
    """Copy of ``model`` whose graph inputs have static dims, but the symbolic dims
    named in ``keep``.

    ``given`` maps an input name to a full shape, or a symbolic dim name
    (``"batch"``) to a size. A symbolic dim without a value is an error that
    lists every one, so the user can give them all at once.
    """
    given = dict(given or {})
    keep = set(keep)
    model = copy_model(model)
    unknown, resized = [], False
    # Collected before the loop: setting dim_value clears dim_param (a protobuf oneof).
    symbols = {d.dim_param for i in graph_inputs(model) for d in i.type.tensor_type.shape.dim
               if d.HasField("dim_param")}
    for inp in graph_inputs(model):
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            if inp.name not in given:
                unknown.append(f"{inp.name} (rank unknown)")
                continue
            tt.shape.SetInParent()
        if inp.name in given:
            shape = [int(d) for d in given.pop(inp.name)]
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if declared and declared != shape:
                resized = True
            del tt.shape.dim[:]
            for d in shape:
                tt.shape.dim.add().dim_value = d
            continue
        for i, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:  # 0 is a real (empty) size
                continue
            sym = dim.dim_param if dim.HasField("dim_param") else ""
            if sym in keep:
                continue
            if sym and sym in given:
                size = given[sym]
                if isinstance(size, (list, tuple)):
                    if len(size) != 1:
                        raise ShapeError(f"symbolic dim '{sym}' takes one size, not {size}.")
                    size = size[0]
                dim.dim_value = int(size)
            else:
                unknown.append(f"{inp.name}[{i}]" + (f" '{sym}'" if sym else ""))
    for sym in symbols:
        given.pop(sym, None)
    if given:
        raise ShapeError(f"input shapes given for names the model does not have: "
                         f"{', '.join(sorted(given))}; inputs are "
                         f"{', '.join(i.name for i in graph_inputs(model))}.")
    if unknown:
        raise ShapeError("these input dimensions are not fixed: " + ", ".join(unknown) +
                         ". Give them, e.g. --shape input=1,3,224,224 or --shape batch=1.")
    if resized:
        _forget_declared_shapes(model)
    return model


def _forget_declared_shapes(model: onnx.ModelProto) -> None:
    """An input given other static dims than the file declares (a batch-1 export run at
    batch 8) leaves the declared shapes of every other tensor stale: the outputs' and
    value_info's dims go (their element types stay), and inference derives them again."""
    del model.graph.value_info[:]
    for out in model.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")


def infer_shapes(model: onnx.ModelProto, hints: dict = None,
                 memory_budget=None) -> onnx.ModelProto:
    """Static shapes from both inference engines, each filling the other's gaps.

    onnx's own inference (with data propagation) is right on the cases where
    onnxruntime's symbolic one is wrong (negative-step Slice, uneven Split,
    GatherND batch_dims, Reshape allowzero, OneHot); the symbolic one knows
    far more tensors of real exports (BERT's mask plumbing). A tensor takes
    onnx's static shape when it has one, else the symbolic one; the model's
    own declared static shapes fill what both leave open. ``hints`` (name ->
    value computed at import) override all of them.

    The memory budget (budget.py) is checked on the declared shapes, on
    onnx's result and on the merged one: the symbolic engine materializes
    some values (ConstantOfShape of int64), so a model claiming a huge
    tensor is refused before that engine runs.
    """
    check_model_budget(model, memory_budget)
    symbolic = exact = None
    slim = without_weights(model)   # the same shapes, without serializing the weights
    _declare_hints(slim, hints or {})
    with _quiet():
        try:
            exact = onnx.shape_inference.infer_shapes(slim, data_prop=True)
        except Exception as e:
            log.info("onnx shape inference failed (%s)", e)
        if exact is not None:
            check_model_budget(exact, memory_budget)
        try:
            symbolic = _symbolic_shapes(slim)
        except MemoryError:
            raise
        except Exception as e:  # it asserts on some exports (legacy ViT)
            log.info("symbolic shape inference failed (%s)", e)
    if symbolic is None and exact is None:
        raise ShapeError("shape inference failed with both onnxruntime's symbolic and onnx's "
                         "inference; check the model with onnx.checker (full_check=True).")
    merged = copy_model(model)   # the engines' value_info and outputs are all it takes from them
    known = {}
    for source in (model, symbolic, exact):  # later sources win
        if source is None:
            continue
        for name, (elem, shape) in tensor_types(source).items():
            if shape is not None and elem:
                known[name] = (elem, shape)
    for name, value in (hints or {}).items():
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype) if value.dtype.kind in "biuf" \
            else None
        if elem:
            known[name] = (elem, tuple(int(d) for d in value.shape))
    outputs = {o.name for o in merged.graph.output}
    inputs = {i.name for i in merged.graph.input}
    del merged.graph.value_info[:]
    for name, (elem, shape) in known.items():
        if name in outputs:
            target = next(o for o in merged.graph.output if o.name == name)
            target.type.CopyFrom(onnx.helper.make_tensor_type_proto(elem, shape))
        elif name not in inputs:
            merged.graph.value_info.append(onnx.helper.make_tensor_value_info(name, elem, shape))
    check_model_budget(merged, memory_budget)
    return merged


def _declare_hints(model: onnx.ModelProto, hints: dict) -> None:
    """The values known at import, declared with their exact shapes before the engines run,
    so that their readers are inferred from them: a node that stays compiled code (fold=False)
    leaves its output's shape open to the engines (Range), and whatever reads that output
    downstream (a causal mask cast like runtime data) stayed open too."""
    graph_io = {v.name for v in list(model.graph.input) + list(model.graph.output)}
    declared = {v.name: v for v in model.graph.value_info}
    for name, value in hints.items():
        if name in graph_io or value.dtype.kind not in "biuf":
            continue
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        info = onnx.helper.make_tensor_value_info(name, elem, [int(d) for d in value.shape])
        if name in declared:
            declared[name].CopyFrom(info)
        else:
            model.graph.value_info.append(info)


SYMBOLIC_MODULE = "onnxruntime.tools.symbolic_shape_infer"


def _symbolic_shapes(slim: onnx.ModelProto, partial: bool = False,
                     merge: bool = False) -> onnx.ModelProto:
    """``SymbolicShapeInference.infer_shapes`` without its side effect: when shapes stay
    unknown it saves the model as ``sym_shape_infer_temp.onnx`` plus ``<uuid>.data``
    files into the current folder, the user's, before it raises. The same steps, then
    the same exception, without the files (the public call where the steps moved).
    ``partial``: what it inferred, even where some shapes stay unknown. ``merge``: its
    auto_merge (two sizes a broadcast meets are taken to be one)."""
    engine = symbolic_engine()
    try:
        inference = engine(2**31 - 1, merge, False, 0)
        steps = inference._preprocess, inference._infer_impl, inference._update_output_from_vi
    except (AttributeError, TypeError):
        return engine.infer_shapes(slim, auto_merge=merge)
    if max((o.version for o in slim.opset_import if o.domain in ("", "ai.onnx")),
           default=0) < 7:
        return None  # as infer_shapes: opsets before 7 are not supported
    steps[0](slim)
    complete = False
    while inference.run_:
        complete = steps[1]()
    steps[2]()
    if not complete and not partial:
        raise RuntimeError("Incomplete symbolic shape inference")
    return inference.out_mp_


def symbolic_engine():
    """onnxruntime's ``SymbolicShapeInference``, loaded without its package's
    ``__init__``: ``onnxruntime.tools`` imports torch whenever torch is installed
    (1.5 s of every command here), and the engine needs nothing from it."""
    module = sys.modules.get(SYMBOLIC_MODULE)
    if module is None:
        import importlib.util
        import onnxruntime
        path = Path(onnxruntime.__file__).parent / "tools" / "symbolic_shape_infer.py"
        if not path.is_file():   # another layout: the plain import (slower with torch)
            from onnxruntime.tools import symbolic_shape_infer as module
            return module.SymbolicShapeInference
        spec = importlib.util.spec_from_file_location(SYMBOLIC_MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[SYMBOLIC_MODULE] = module
    return module.SymbolicShapeInference


@contextlib.contextmanager
def _quiet():
    """The inference engines warn on stderr (numpy overflow, 'unsupported broadcast') about
    models they then reject or we check anyway; the library stays silent, the log keeps it."""
    sym_log = logging.getLogger(SYMBOLIC_MODULE)
    level = sym_log.level
    sym_log.setLevel(logging.ERROR + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        sym_log.setLevel(level)


def tensor_types(model: onnx.ModelProto) -> dict:
    """name -> (elem_type, shape tuple or None when any dim is not static)."""
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        shape = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if all(d is not None and d >= 0 for d in dims):
                shape = tuple(int(d) for d in dims)
        if vi.name not in out or out[vi.name][1] is None:
            out[vi.name] = (tt.elem_type, shape)
    for t in model.graph.initializer:
        out[t.name] = (t.data_type, tuple(t.dims))
    return out


def check_model_budget(model: onnx.ModelProto, budget=None) -> None:
    """Every tensor of ``model`` with a static shape, against the budget (budget.py)."""
    sizes = {name: tensor_bytes(elem, shape) for name, (elem, shape) in tensor_types(model).items()
             if shape is not None}
    check_budget(sizes, budget)




ELEM_NAMES = {v: k for k, v in TensorProto.DataType.items()}
