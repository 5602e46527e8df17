"""PyTorch modules in: exported to ONNX (legacy exporter, opset 17), then imported.

torch is optional (``pip install .[torch]``, pinned to the CPU build
``torch==2.13.0``). Parameter names survive as weight array names: the
exporter keeps them as initializer names (``layer1.0.conv1.weight``) and
the importer turns those into C identifiers (``layer1_0_conv1_weight``).
"""
import io

import onnx

from workbench.errors import BadInputError

OPSET = 17


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def export_to_onnx(module, example_inputs, input_names=None, output_names=None) -> onnx.ModelProto:
    try:
        import torch
    except ImportError:
        raise BadInputError("from_torch needs PyTorch: pip install 'dace-workbench[torch]' "
                            "(torch==2.13.0, the CPU build).") from None
    if not isinstance(module, torch.nn.Module):
        raise BadInputError(f"from_torch takes a torch.nn.Module, not {type(module).__name__}.")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    names = input_names or [f"input_{i}" if len(example_inputs) > 1 else "input"
                            for i in range(len(example_inputs))]
    module = module.eval()
    buffer = io.BytesIO()
    try:
        with torch.no_grad():
            torch.onnx.export(module, example_inputs, buffer, opset_version=OPSET,
                              input_names=names, output_names=output_names,
                              do_constant_folding=True, dynamo=False,
                              keep_initializers_as_inputs=False)
    except Exception as e:
        raise BadInputError(f"torch.onnx.export failed: {str(e).splitlines()[0][:300]}") from None
    return onnx.load_from_string(buffer.getvalue())


def from_torch(module, example_inputs, name: str = None, input_names=None, output_names=None,
               **open_kwargs):
    """A Session over ``module`` traced with ``example_inputs``."""
    import workbench
    model = export_to_onnx(module, example_inputs, input_names, output_names)
    return workbench.open(model, name=name or type(module).__name__.lower(), **open_kwargs)
