"""Static shapes for every tensor: fixed inputs, then shape inference."""
import logging

import onnx
from onnx import TensorProto

from workbench.errors import ShapeError

log = logging.getLogger(__name__)


def graph_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs the user feeds (initializers excluded)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def fix_input_shapes(model: onnx.ModelProto, given: dict = None) -> onnx.ModelProto:
    """Copy of ``model`` whose graph inputs have static dims.

    ``given`` maps an input name to a full shape, or a symbolic dim name
    (``"batch"``) to a size. A symbolic dim without a value is an error that
    lists every one, so the user can give them all at once.
    """
    given = dict(given or {})
    model = _copy(model)
    unknown = []
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
            del tt.shape.dim[:]
            for d in shape:
                tt.shape.dim.add().dim_value = d
            continue
        for i, dim in enumerate(tt.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:  # 0 is a real (empty) size
                continue
            sym = dim.dim_param if dim.HasField("dim_param") else ""
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
    return model


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Run onnxruntime's symbolic shape inference, else onnx's own."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=False)
        if inferred is not None:
            return inferred
    except Exception as e:  # it asserts on some exports (legacy ViT)
        log.info("symbolic shape inference failed (%s); using onnx.shape_inference", e)
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:
        raise ShapeError(f"shape inference failed: {str(e).splitlines()[0][:300]}") from None


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


def _copy(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


ELEM_NAMES = {v: k for k, v in TensorProto.DataType.items()}
