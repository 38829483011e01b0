"""Row softmax over a wide axis: every output is ~1/16384 < 1e-4, so all-zeros passes a plain allclose (cheat #14 of
docs/validator.md)."""

import torch
import torch.nn as nn

batch_size = 128
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
