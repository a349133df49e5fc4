"""Sample modules for ``autotune graph`` (docs/profiling.md): ``make()`` returns a module with
its example arguments; ``net()`` returns a module alone (``--input`` gives the arguments)."""

import torch
from torch import nn


class TinyLM(nn.Module):
    """Embedding, two transformer encoder layers and a vocabulary head."""

    def __init__(self, vocab: int = 1000, dim: int = 256, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def make():
    return TinyLM(), (torch.zeros(8, 512, dtype=torch.int64),)


def net():
    return TinyLM()
