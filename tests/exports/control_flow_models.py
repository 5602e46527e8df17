"""A model with control flow, written as users write it: ``torch.jit.script``'d
``forward`` with a loop whose trip count comes from the input's shape (ONNX ``Loop``;
TorchScript unrolls a loop over a constant ``range``) and an ``if`` on a tensor's value
(ONNX ``If``), exported with the legacy TorchScript exporter."""
import torch
from torch import nn


class RefineAndRoute(nn.Module):
    """Refine a feature vector once per group of ``group`` features (``h = tanh(W h + U
    x)``, the weights read inside the loop body from the outer graph), then route it
    through one of two heads depending on the sign of its mean: logits [batch, classes]."""

    def __init__(self, dim=16, group=4, classes=4):
        super().__init__()
        self.group = group
        self.inp = nn.Linear(dim, dim)
        self.cell = nn.Linear(dim, dim, bias=False)
        self.positive = nn.Linear(dim, classes)
        self.negative = nn.Sequential(nn.Linear(dim, classes), nn.ReLU())

    def forward(self, x):
        u = self.inp(x)
        h = torch.zeros_like(u)
        for _ in range(x.size(1) // self.group):
            h = torch.tanh(self.cell(h) + u)
        if bool(h.mean() > 0):
            out = self.positive(h)
        else:
            out = self.negative(h) * 2.0
        return out
