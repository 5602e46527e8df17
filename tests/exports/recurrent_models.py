"""Recurrent models for the export fixtures, written as users write them: a two-layer
LSTM sequence tagger and a bidirectional GRU sentence classifier (token ids in,
``batch_first`` as most code uses). The constructor arguments give the small
fixture sizes."""
import torch
from torch import nn


class LSTMTagger(nn.Module):
    """Embedding -> two-layer LSTM -> per-token Linear: tag logits [batch, seq, tags]."""

    def __init__(self, vocab=100, dim=32, hidden=48, layers=2, tags=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(hidden, tags)

    def forward(self, input_ids):
        out, _ = self.lstm(self.embedding(input_ids))
        return self.classifier(out)


class GRUClassifier(nn.Module):
    """Embedding -> bidirectional GRU -> both final states -> Linear: [batch, classes]."""

    def __init__(self, vocab=100, dim=32, hidden=48, classes=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, classes)

    def forward(self, input_ids):
        _, h_n = self.gru(self.embedding(input_ids))  # [2, batch, hidden]
        return self.classifier(torch.cat([h_n[0], h_n[1]], dim=-1))
