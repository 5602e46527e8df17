"""PyTorch modules through from_torch (skipped when torch is not installed)."""
import numpy as np
import pytest

import workbench
from workbench.errors import BadInputError

torch = pytest.importorskip("torch", reason="torch is optional: pip install .[torch]")


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.nn.functional.hardtanh(self.conv2(x), 0.0, 6.0)  # ReLU6 as Clip
        x = x * torch.sigmoid(x)                                   # SiLU as Sigmoid*Mul
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.head(x)


class SmallTransformer(torch.nn.Module):
    """A BERT-style block written as HuggingFace writes it (view/transpose heads)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff1, self.ff2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.dh).transpose(1, 2) for t in (q, k, v))
        scores = torch.softmax(q @ k.transpose(-1, -2) / self.dh ** 0.5, dim=-1)
        ctx = (scores @ v).transpose(1, 2).reshape(b, s, d)
        x = self.norm1(x + self.out(ctx))
        return self.norm2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


def test_small_cnn_matches_onnxruntime():
    torch.manual_seed(0)
    ws = workbench.from_torch(SmallCNN(), torch.randn(1, 3, 16, 16))
    weights = set(ws.model.weights)
    # conv1 absorbs bn1 in the exporter's folding (a new name); the others keep theirs.
    assert {"conv2_weight", "conv2_bias", "head_weight", "head_bias"} <= weights
    report = ws.verify()
    assert report.match, report.text()


def test_small_transformer_matches_onnxruntime():
    torch.manual_seed(0)
    ws = workbench.from_torch(SmallTransformer().eval(), torch.randn(1, 8, 32))
    report = ws.verify()
    assert report.match, report.text()


def test_not_a_module_is_a_clear_error():
    with pytest.raises(BadInputError, match="torch.nn.Module"):
        workbench.from_torch(np.zeros(3), torch.zeros(3))
