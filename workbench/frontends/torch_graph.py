"""An ONNX graph run with PyTorch's operators: the independent reference for
training programs. PyTorch's autograd differentiates it, ``torch.optim``
updates it, so gradients, losses and optimizer steps are checked against
PyTorch on any model the workbench imports, including the zoo's exports
(whose BatchNorms the exporter folded into the convolutions).

Runs the importer's folded model (every shape static). BatchNormalization
uses the batch's statistics in training mode, as ``nn.BatchNorm2d.train()``.
"""
import numpy as np
from onnx import helper, numpy_helper

from workbench.errors import UnsupportedOpError
from workbench.frontends.torch_ops import OPS


def _attrs(node) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class TorchGraph:
    """``params`` (name -> array: initializers, or inputs of ``model``) become leaf
    tensors with gradients; ``__call__`` runs the graph on the other inputs."""

    def __init__(self, model, params: dict, batchnorm: str = "batch"):
        import torch
        self.torch = torch
        self.model = model
        self.batchnorm = batchnorm
        self.values = {}
        self.buffers = {}
        for t in model.graph.initializer:
            self.values[t.name] = torch.from_numpy(np.array(numpy_helper.to_array(t), copy=True))
        self.params = {name: torch.from_numpy(np.array(value, copy=True)).requires_grad_(True)
                       for name, value in params.items()}
        self.values.update(self.params)
        missing = {}
        for node in model.graph.node:
            if node.op_type not in OPS:
                missing.setdefault(node.op_type, []).append(node.name)
        if missing:
            raise UnsupportedOpError(missing, "The PyTorch reference (workbench/frontends/"
                                              "torch_ops.py) cannot run these operators.")

    def __call__(self, inputs: dict) -> dict:
        torch = self.torch
        env = dict(self.values)
        for name, value in inputs.items():
            env[name] = value if isinstance(value, torch.Tensor) else torch.from_numpy(
                np.asarray(value))
        for node in self.model.graph.node:
            args = [env[x] if x else None for x in node.input]
            result = OPS[node.op_type](self, node, args, _attrs(node))
            if not isinstance(result, (list, tuple)):
                result = [result]
            for name, value in zip(node.output, result):
                if name:
                    env[name] = value
        return {o.name: env[o.name] for o in self.model.graph.output}


def torch_loss(kind: str, output, labels):
    """The workbench's losses as PyTorch writes them."""
    import torch.nn.functional as F
    if kind == "output":
        return output.reshape(())
    if kind == "mse":
        return F.mse_loss(output, labels)
    return F.cross_entropy(output, labels)
