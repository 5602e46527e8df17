"""A Llama-style decode step with a KV cache: one new token, the cache of every layer in,
the cache one position longer out (``present = Concat(past, new)``), as generation loops
run a decoder. The weights and blocks are ``decoder_models.Llama``'s; the past length is a
dynamic axis, so one import serves every length up to the rotary tables' length."""
import math

import torch
from torch.nn import functional as F

from decoder_models import Llama, _rotate_half


def _attend(attention, x, cos, sin, past_k=None, past_v=None, mask=None, shape=None):
    """The positions of ``x`` against the past keys and values (when given) and their own:
    (output, keys, values). ``shape``: (batch, length, dim) taken elsewhere, as the
    committed prefill export traced them (from the block's input and the prompt), so that
    re-exporting it writes the same graph."""
    batch, length, dim = x.shape if shape is None else shape
    heads, kv_heads, head_dim = attention.heads, attention.kv_heads, attention.head_dim
    q = attention.q(x).view(batch, length, heads, head_dim).transpose(1, 2)
    k = attention.k(x).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    v = attention.v(x).view(batch, length, kv_heads, head_dim).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    keys, values = k, v
    if past_k is not None:
        keys, values = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
    group = heads // kv_heads
    scores = q @ keys.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(head_dim)
    if mask is not None:
        scores = scores + mask
    out = F.softmax(scores, dim=-1) @ values.repeat_interleave(group, dim=1)
    return attention.o(out.transpose(1, 2).reshape(batch, length, dim)), keys, values


class LlamaDecodeStep(Llama):
    """forward(input_ids [1, 1], position_ids [1, 1], past_key_0, past_value_0, ...) ->
    (logits [1, 1, vocab], present_key_0, present_value_0, ...)."""

    def forward(self, input_ids, position_ids, *past):
        x = self.embed(input_ids)
        cos, sin = self.cos[0, 0][position_ids][:, None], self.sin[0, 0][position_ids][:, None]
        present = []
        for i, block in enumerate(self.blocks):
            out, keys, values = _attend(block.attention, block.norm1(x), cos, sin,
                                        past[2 * i], past[2 * i + 1])
            x = x + out
            h = block.norm2(x)
            x = x + block.down(F.silu(block.gate(h)) * block.up(h))
            present += [keys, values]
        return (self.head(self.final_norm(x)), *present)


class LlamaPrefill(Llama):
    """forward(input_ids [1, sequence]) -> (logits [1, sequence, vocab], present_key_0,
    present_value_0, ...): the prompt read at once, and the cache a decode step goes on
    from (the same weights as ``LlamaDecodeStep`` built under the same seed)."""

    def forward(self, input_ids):
        length = input_ids.shape[1]
        x = self.embed(input_ids)
        cos, sin = self.cos[:, :, :length], self.sin[:, :, :length]
        causal = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        present = []
        for block in self.blocks:
            batch, _, dim = x.shape
            out, k, v = _attend(block.attention, block.norm1(x), cos, sin, mask=causal,
                                shape=(batch, length, dim))
            x = x + out
            h = block.norm2(x)
            x = x + block.down(F.silu(block.gate(h)) * block.up(h))
            present += [k, v]
        return (self.head(self.final_norm(x)), *present)
