"""Training programs built from an imported model: forward pass, loss,
backward pass and optimizer update as one ONNX graph of ordinary operators
(``build_training``); ``Session.training`` imports it as a Session."""
from workbench.training.optimizers import OPTIMIZERS, OptimizerSettings
from workbench.training.forward import LOSSES
from workbench.training.program import TrainingProgram, build_training

__all__ = ["build_training", "TrainingProgram", "OptimizerSettings", "OPTIMIZERS", "LOSSES"]
