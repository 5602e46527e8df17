"""A model's structure without its weights, for the checks and shape inference.

onnx's checker and both shape-inference engines take a whole ``ModelProto``:
onnx serializes it to hand it to C++ and parses the result back, with the
GIL held all the while. GPT-2 small is 653 MB of weights, and its strict
inference alone held the GIL for 7.2 s, freezing the window that imported
it; ViT-tiny (23 MB) for 0.2 s. None of them reads the values of a large
initializer: only small ones feed shapes (a Reshape target, Slice starts).
So they run on a copy in which every initializer of at least ``MIN_BYTES``
whose data is well-formed becomes a graph input of the same name, element
type and dims: the checker accepts it, and inference gives every tensor the
same type and shape (checked on the zoo's full-size ViT, BERT and GPT-2:
2066, 263 and 2886 tensors, identical). Whether the data fits the dims is
checked before, on the whole model (validate.py).
"""
import onnx

from workbench.importer.validate import element_count, itemsize

MIN_BYTES = 1 << 16   # far above any shape-carrying tensor, far below a weight matrix


def without_weights(model: onnx.ModelProto, min_bytes: int = MIN_BYTES) -> onnx.ModelProto:
    """A copy of ``model`` whose large initializers are graph inputs (no data)."""
    slim = onnx.ModelProto()
    copy_fields(model, slim, skip=("graph",))
    copy_fields(model.graph, slim.graph, skip=("initializer",))
    inputs = {i.name for i in model.graph.input}
    for tensor in model.graph.initializer:
        if not _elidable(tensor, min_bytes):
            slim.graph.initializer.append(tensor)
        elif tensor.name not in inputs:   # (IR < 4 lists initializers among the inputs)
            slim.graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    return slim


def _elidable(tensor: onnx.TensorProto, min_bytes: int) -> bool:
    # From the dims, not len(raw_data): reading the field copies it (653 MB for GPT-2).
    # The data fits the dims: validate.check_tensor_data ran on every model that gets here.
    size = itemsize(tensor.data_type)
    return bool(size) and tensor.HasField("raw_data") and element_count(tensor) * size >= min_bytes


def copy_fields(source, target, skip=()):
    """Every field of protobuf message ``source`` but ``skip`` into ``target``: copying a
    model part by part leaves out what is replaced anyway (the weights) instead of
    copying all of it and deleting."""
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)
