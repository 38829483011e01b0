"""Token embedding lookup: a 32000 x 1024 fp32 table gathered by int64 token ids."""

import torch
import torch.nn as nn

VOCAB, DIM = 32000, 1024


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)


def get_inputs():
    return [torch.randint(0, VOCAB, (4, 2048))]


def get_init_inputs():
    return [VOCAB, DIM]
