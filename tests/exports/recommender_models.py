"""A DLRM-style recommender, written as users write it: a dense MLP, one ``nn.EmbeddingBag``
per sparse feature (bags given by offsets into a flat index list) and a top MLP over their
concatenation. The legacy exporter turns each EmbeddingBag into a ``Loop`` over the bags whose
body slices the indices at ``offsets[i]:offsets[i + 1]``: a size known only at run time."""
import io

import torch
from torch import nn


class DLRM(nn.Module):
    def __init__(self, mode="sum", rows=100, dim=16, dense=13, tables=2):
        super().__init__()
        self.dense = nn.Sequential(nn.Linear(dense, dim), nn.ReLU())
        self.emb = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode=mode) for _ in range(tables))
        self.top = nn.Sequential(nn.Linear(dim * (tables + 1), dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, dense, idx0, off0, idx1, off1):
        x = self.dense(dense)
        e0 = self.emb[0](idx0, off0)
        e1 = self.emb[1](idx1, off1)
        return torch.sigmoid(self.top(torch.cat([x, e0, e1], 1)))


NAMES = ["dense", "idx0", "off0", "idx1", "off1"]


def example_inputs(batch=4, lengths=(10, 7)):
    return (torch.randn(batch, 13), torch.randint(0, 100, (lengths[0],)),
            torch.tensor([0, 3, 5, 9]), torch.randint(0, 100, (lengths[1],)),
            torch.tensor([0, 1, 2, 6]))


def export_dlrm(mode="sum", seed=0) -> bytes:
    """The exported ONNX model (opset 17, legacy exporter) of a seeded DLRM."""
    torch.manual_seed(seed)
    model = DLRM(mode).eval()
    buffer = io.BytesIO()
    torch.onnx.export(model, example_inputs(), buffer, dynamo=False, opset_version=17,
                      input_names=NAMES, output_names=["p"])
    return buffer.getvalue()


class WeightedBag(nn.Module):
    """One EmbeddingBag of mode sum with a weight per index (``per_sample_weights``): the
    exported body slices the indices and the weights at the same offsets."""

    def __init__(self, rows=100, dim=8):
        super().__init__()
        self.bag = nn.EmbeddingBag(rows, dim, mode="sum")

    def forward(self, idx, off, weights):
        return self.bag(idx, off, per_sample_weights=weights)


def export_weighted_bag(seed=0) -> bytes:
    torch.manual_seed(seed)
    buffer = io.BytesIO()
    args = (torch.randint(0, 100, (10,)), torch.tensor([0, 3, 5, 9]), torch.rand(10))
    torch.onnx.export(WeightedBag().eval(), args, buffer, dynamo=False, opset_version=17,
                      input_names=["idx", "off", "w"], output_names=["y"])
    return buffer.getvalue()
