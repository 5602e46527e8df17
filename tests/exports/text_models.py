"""Transformers for the export fixtures, as HuggingFace writes them: BERT, GPT-2.
The constructor arguments give the small fixture (the defaults) and the full-size
configurations (``make_exports.FULL``)."""
import math

import torch
from torch import nn
from torch.nn import functional as F


# ------------------------------------------------------------------- BERT
class BertEmbeddings(nn.Module):
    def __init__(self, vocab, dim, max_pos, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(max_pos, dim)
        self.token_type_embeddings = nn.Embedding(type_vocab, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)),
                             persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(),
                                                           dtype=torch.long), persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        batch_size, seq_length = input_ids.size()
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            # transformers >= 4.48: the registered buffer, gathered at the position ids
            # (exported as GatherElements), when the caller passes no token types.
            buffered = self.token_type_ids.expand(position_ids.shape[0], -1)
            buffered = torch.gather(buffered, dim=1, index=position_ids)
            token_type_ids = buffered.expand(batch_size, seq_length)
        emb = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        emb = emb + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(emb))


class BertSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, dim // heads
        self.all_head_size = dim
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden, attention_mask):
        q = self.transpose_for_scores(self.query(hidden))
        k = self.transpose_for_scores(self.key(hidden))
        v = self.transpose_for_scores(self.value(hidden))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        probs = self.dropout(nn.functional.softmax(scores + attention_mask, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, dim, heads, inter):
        super().__init__()
        self.attention = BertSelfAttention(dim, heads)
        self.attention_output = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, inter)
        self.output = nn.Linear(inter, dim)
        self.output_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, hidden, mask):
        x = self.attention_norm(self.attention_output(self.attention(hidden, mask)) + hidden)
        return self.output_norm(self.output(F.gelu(self.intermediate(x))) + x)


class Bert(nn.Module):
    """HuggingFace's BertModel: embeddings, extended additive mask, encoder, pooler."""

    def __init__(self, vocab=100, dim=64, heads=4, inter=128, layers=2, max_pos=64):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, dim, max_pos)
        self.layer = nn.ModuleList(BertLayer(dim, heads, inter) for _ in range(layers))
        self.pooler = nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """(last_hidden_state, pooler_output, *hidden_states), as output_hidden_states=True
        returns them: the last hidden state is an output twice (the exporter's Identity)."""
        batch_size, seq_length = input_ids.size()
        # get_extended_attention_mask: broadcast to [batch, 1, 1, seq], 0 keeps, -10000 drops.
        ext = attention_mask[:, None, None, :].expand(batch_size, 1, seq_length, seq_length)
        hidden = self.embeddings(input_ids, token_type_ids)
        ext = (1.0 - ext.to(hidden.dtype)) * -10000.0   # the model's dtype, as HF's self.dtype
        all_hidden = [hidden]
        for layer in self.layer:
            hidden = layer(hidden, ext)
            all_hidden.append(hidden)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return (hidden, pooled, *all_hidden)


# ------------------------------------------------------------------ GPT-2
class Conv1D(nn.Module):
    """GPT-2's transposed linear layer: addmm over the flattened leading dims."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((max_pos, max_pos), dtype=torch.bool))
                             .view(1, 1, max_pos, max_pos), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.num_heads, self.head_dim = heads, dim // heads
        self.c_attn, self.c_proj = Conv1D(3 * dim, dim), Conv1D(dim, dim)

    def _split_heads(self, t):
        t = t.view(t.size()[:-1] + (self.num_heads, self.head_dim))
        return t.permute(0, 2, 1, 3)

    def _attn(self, query, key, value, attention_mask=None):
        w = torch.matmul(query, key.transpose(-1, -2))
        w = w / torch.full([], value.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal_mask, w.to(w.dtype), mask_value)
        if attention_mask is not None:
            w = w + attention_mask
        w = nn.functional.softmax(w, dim=-1)
        return torch.matmul(w, value)

    def forward(self, x, attention_mask=None):
        query, key, value = self.c_attn(x).split(self.num_heads * self.head_dim, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        out = self._attn(query, key, value, attention_mask)
        out = out.permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.c_proj(out), (key, value)


class GPT2Block(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPT2Attention(dim, heads, max_pos)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.c_fc, self.c_proj = Conv1D(4 * dim, dim), Conv1D(dim, 4 * dim)

    def forward(self, x, attention_mask=None):
        attn, present = self.attn(self.ln_1(x), attention_mask)
        x = x + attn
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x)))), present


class GPT2(nn.Module):
    """HuggingFace's GPT2LMHeadModel: arange positions, causal buffer, tied LM head."""

    def __init__(self, vocab=128, dim=64, heads=4, layers=1, max_pos=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_pos, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads, max_pos) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, attention_mask=None):
        """(logits, present key and value per layer), as use_cache=True returns them."""
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long).unsqueeze(0)
        if attention_mask is not None:  # GPT2Model: [batch, 1, 1, keys], 0 keeps, min drops
            attention_mask = attention_mask.view(input_ids.shape[0], -1)[:, None, None, :]
            attention_mask = attention_mask.to(dtype=self.wte.weight.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(self.wte.weight.dtype).min
        hidden = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for block in self.h:
            hidden, present = block(hidden, attention_mask)
            presents += present
        hidden = self.ln_f(hidden)
        return (self.lm_head(hidden.view(input_shape + (hidden.size(-1),))), *presents)
