"""T5's encoder and a Llama-style decoder, written as HuggingFace writes them: the RMS
norm as ``pow(2).mean(-1, keepdim=True)`` and ``x * rsqrt(var + eps)`` times a weight
(exporters write it out as Pow/ReduceMean/Add/Sqrt/Div or Reciprocal/Mul/Mul), T5's
bucketed relative position bias and mask, Llama's rotary embeddings, grouped-query
attention, SwiGLU feed-forward and causal mask. No cache: one full-sequence pass."""
import math

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(dtype)


class T5Attention(nn.Module):
    def __init__(self, dim, heads, head_dim, position_bias, buckets=32, max_distance=128):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.buckets, self.max_distance = buckets, max_distance
        inner = heads * head_dim
        self.q, self.k, self.v = (nn.Linear(dim, inner, bias=False) for _ in range(3))
        self.o = nn.Linear(inner, dim, bias=False)
        self.relative_attention_bias = nn.Embedding(buckets, heads) if position_bias else None

    def _bucket(self, relative):
        half = self.buckets // 2
        bucket = (relative > 0).to(torch.long) * half
        distance = torch.abs(relative)
        exact = half // 2
        log_part = exact + (torch.log(distance.float() / exact)
                            / math.log(self.max_distance / exact) * (half - exact)).to(torch.long)
        log_part = torch.min(log_part, torch.full_like(log_part, half - 1))
        return bucket + torch.where(distance < exact, distance, log_part)

    def position_bias(self, length):
        context = torch.arange(length)[:, None]
        memory = torch.arange(length)[None, :]
        values = self.relative_attention_bias(self._bucket(memory - context))
        return values.permute(2, 0, 1).unsqueeze(0)

    def forward(self, x, bias):
        batch, length, _ = x.shape

        def heads(t):
            return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2)) + bias   # T5 does not scale
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o(torch.matmul(weights, v).transpose(1, 2).contiguous().view(batch, length, -1))


class T5Block(nn.Module):
    def __init__(self, dim, heads, head_dim, ff, position_bias):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attention = T5Attention(dim, heads, head_dim, position_bias)
        self.wi = nn.Linear(dim, ff, bias=False)
        self.wo = nn.Linear(ff, dim, bias=False)

    def forward(self, x, bias):
        x = x + self.attention(self.norm1(x), bias)
        return x + self.wo(F.relu(self.wi(self.norm2(x))))


class T5Encoder(nn.Module):
    def __init__(self, vocab=32128, dim=512, heads=8, head_dim=64, ff=2048, layers=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(T5Block(dim, heads, head_dim, ff, i == 0)
                                    for i in range(layers))
        self.final_norm = RMSNorm(dim)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        bias = self.blocks[0].attention.position_bias(input_ids.shape[1]) + mask
        for block in self.blocks:
            x = block(x, bias)
        return self.final_norm(x)


def _rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        batch, length, dim = x.shape
        q = self.q(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        causal = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        weights = F.softmax(scores + causal, dim=-1)
        return self.o((weights @ v).transpose(1, 2).reshape(batch, length, dim))


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, kv_heads, ff):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attention = LlamaAttention(dim, heads, kv_heads)
        self.gate = nn.Linear(dim, ff, bias=False)
        self.up = nn.Linear(dim, ff, bias=False)
        self.down = nn.Linear(ff, dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.norm1(x), cos, sin)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab=32000, dim=512, heads=8, kv_heads=2, ff=1376, layers=4,
                 length=128, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads, kv_heads, ff) for _ in range(layers))
        self.final_norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inverse = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(length).float(), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos()[None, None])
        self.register_buffer("sin", angles.sin()[None, None])

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.final_norm(x))
