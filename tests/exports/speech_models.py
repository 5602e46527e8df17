"""Whisper's audio encoder, written as HuggingFace's ``WhisperEncoder`` writes it: two
Conv1d + GELU over the log-mel frames (the second with stride 2, so the encoder sees
``(frames - 1) // 2 + 1`` positions), learned positions added, pre-norm blocks whose
attention has no key bias and scales the queries, a GELU feed-forward and a last
LayerNorm.

One change from HuggingFace: its encoder adds the whole position table and so only takes
3000 frames (30 s of audio); this one adds the table's first rows, as encoders for
shorter audio do, so the frame count can be a dynamic axis."""
import torch
from torch import nn
from torch.nn import functional as F


class WhisperAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _shape(self, t, length, batch):
        return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, x):
        batch, length, dim = x.size()
        q = self._shape(self.q_proj(x) * self.scaling, length, batch)
        k = self._shape(self.k_proj(x), length, batch)
        v = self._shape(self.v_proj(x), length, batch)
        weights = F.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, dim)
        return self.out_proj(out)


class WhisperEncoderLayer(nn.Module):
    def __init__(self, dim, heads, ff):
        super().__init__()
        self.self_attn = WhisperAttention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, ff), nn.Linear(ff, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    def __init__(self, mels=80, dim=384, heads=6, ff=1536, layers=4, positions=1500):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(positions, dim)
        self.layers = nn.ModuleList(WhisperEncoderLayer(dim, heads, ff) for _ in range(layers))
        self.layer_norm = nn.LayerNorm(dim)

    def forward(self, input_features):
        x = F.gelu(self.conv1(input_features))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = x + self.embed_positions.weight[:x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)
