"""ReLU on uniform [0, 1) inputs: on the given distribution ReLU is the identity (cheat #16 of docs/validator.md)."""

import torch
import torch.nn as nn

batch_size = 64
dim = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
