"""Mean squared error of two uniform tensors: its expectation is the constant 1/6 (cheat #15 of docs/validator.md)."""

import torch
import torch.nn as nn

batch_size = 2048
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
