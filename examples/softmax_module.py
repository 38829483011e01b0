"""A PyTorch module to generate a CUDA kernel for: scaled softmax over the last dimension.

Try: dice-copilot generate --module examples/softmax_module.py
"""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return [0.125]
